// Applies routed parity updates on a background thread, so a push returns once its shard is updated
// and its deltas routed: parity maintenance leaves the training step's critical path (one process;
// the networked PS forwards the same batches instead).
//
// Contract: Drain() returns once every batch submitted before the call has been applied, and
// rethrows (as std::runtime_error) the first error a background apply met. Anything that reads
// parity or decodes must Drain first; XOR updates commute, so the order of application is free.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "xdl_ec/delta_batch.h"
#include "xdl_ec/parity_update.h"

namespace xdl_ec {

class ParityApplier {
 public:
  using ApplyFn = std::function<void(const ParityUpdate&)>;
  using ApplyDeltasFn = std::function<void(int source, const DeltaBatch&)>;

  // `apply` is called on the background thread for every non-empty update. At most max_pending
  // batches wait; Submit blocks beyond that (bounded memory).
  explicit ParityApplier(ApplyFn apply, size_t max_pending = 64);
  // Also takes whole shard delta batches (SubmitDeltas): `apply_deltas` routes and applies them on the
  // background thread, so the pusher pays neither the routing nor a copy of the deltas.
  ParityApplier(ApplyFn apply, ApplyDeltasFn apply_deltas, size_t max_pending = 64);
  ~ParityApplier();  // applies what is pending, then stops
  ParityApplier(const ParityApplier&) = delete;
  ParityApplier& operator=(const ParityApplier&) = delete;

  // Queues *batch and leaves a recycled (cleared, capacity kept) vector in its place.
  void Submit(std::vector<ParityUpdate>* batch);
  // Queues *deltas, made on server `source`, and leaves a recycled (cleared) batch in its place. Throws
  // std::invalid_argument when the applier was built without apply_deltas.
  void SubmitDeltas(int source, DeltaBatch* deltas);
  void Drain();

 private:
  struct Job {
    std::vector<ParityUpdate> updates;
    int source = -1;  // >= 0: `deltas` holds a shard's batch for apply_deltas_
    DeltaBatch deltas;
  };
  void Run();
  void Enqueue(Job job, std::unique_lock<std::mutex>& lock);

  ApplyFn apply_;
  ApplyDeltasFn apply_deltas_;
  size_t max_pending_;
  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<Job> queue_;
  std::vector<std::vector<ParityUpdate>> spare_;
  std::vector<DeltaBatch> spare_deltas_;
  uint64_t submitted_ = 0, applied_ = 0;
  std::string error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace xdl_ec
