// A data server's side of parity maintenance, off the push's critical path. Every mutation of the
// server's shards that changed bytes (a push, a pull that inserted rows) gets the next delta seq: the
// shard records it into a Mutation (this forwarder's DeltaSink, given to EmbeddingShard::Push / Pull),
// whose Record takes its slot deltas over (a move, no copy) with the worker push seqs applied so far.
// This forwarder's own thread then routes them (ParityRouter) into one ForwardedBatch per parity holder
// and queues them, so the routing's copies and allocations stay off the mutation's path. The mutations
// it finds queued at once (it fell behind, or a remote link's Take routes what accumulated) become one
// seq range whose deltas are XOR-merged per slot (DeltaCoalescer): a hot key touched by every push costs
// one parity update per range, so the work shrinks as the backlog grows. Batches reach each holder in seq
// order, every holder every seq, in the same ranges for all. The durable watermark is the least seq every holder
// applied: per worker, the push seq it includes is what the server reports, and workers forget logged
// pushes up to it.
//
// Delivery: a holder in this process (SetHolder with its ParityHolder) is served by the same thread,
// with no Python and no copy beyond routing. A holder in another process (SetHolder with
// null) is served by whoever calls Take / Ack / Fail (the Python transport). A holder that fails counts
// as down: it gets nothing more until SetHolder names its replacement, whose parity was recomputed
// from the stripes' data at the current seq.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "xdl_ec/delta_batch.h"
#include "xdl_ec/delta_coalescer.h"
#include "xdl_ec/delta_sink.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/parity_holder.h"
#include "xdl_ec/parity_router.h"

namespace xdl_ec {

class DeltaForwarder {
 public:
  struct Table {
    std::string name;
    uint32_t block_slots = 0;
    size_t record_bytes = 0;
  };
  struct Progress {
    int64_t seq = 0;            // the last seq recorded
    int64_t live_applied = 0;   // the least seq the live holders applied (seq when none is live)
    bool pending = false;       // a batch for a live holder is queued or in flight
    WorkerSeqs worker_seqs;     // pushes applied so far
    std::vector<int> down;      // holders that failed and were not replaced
    uint64_t lag_waits = 0;     // Records that found the in-process delivery lagging (backpressure)
    uint64_t lag_catchups = 0;  // of those, the ones that routed or delivered the backlog themselves
    uint64_t coalesced = 0;     // mutations whose deltas were merged into an earlier one's (same seq range)
    uint64_t lifts = 0;         // Flushes that lifted the thread out of the idle policy (it held work they wait for)
  };
  // What Take hands to a remote transport: the batches to send, the durable watermark to send with
  // them, and the link generation to quote in Ack / Fail.
  struct Delivery {
    std::vector<BatchPtr> batches;
    int64_t durable = 0;
    uint64_t link = 0;
  };

  // The DeltaSink of one mutation of `table`'s shard that applies the worker pushes `pushes` (worker ->
  // seq, empty for a pull): the training path gives it to EmbeddingShard::Push / Pull, which record into a
  // spare buffer (TakeSpare) and hand it to Record under the shard's lock, so seqs follow the order in which
  // the shard changed (a lag catch-up in Record holds that lock too: the shard waits, as its pushes would).
  // Made per call; it refers to `forwarder` and `pushes`, which must outlive it.
  class Mutation final : public DeltaSink {
   public:
    // Throws std::invalid_argument naming the server when the forwarder has no table `table`.
    Mutation(DeltaForwarder& forwarder, const std::string& table, const WorkerSeqs& pushes);
    // A spare buffer; throws std::invalid_argument for records of another size than the table's.
    DeltaBatch Begin(size_t record_bytes) override;
    void Record(DeltaBatch deltas) override;  // DeltaForwarder::Record

   private:
    DeltaForwarder& forwarder_;
    const WorkerSeqs& pushes_;
    const std::pair<const std::string, std::unique_ptr<ParityRouter>>& route_;  // the table's router
  };

  // Server `index` of a (k, r) layout over n servers, its tables, continuing after delta seq `seq`
  // whose state included the pushes `worker_seqs`. Its holders are every server holding parity of a
  // stripe it has data in; until SetHolder connects one, its batches wait in its queue.
  DeltaForwarder(int index, int n, int k, int r, const std::vector<Table>& tables, int64_t seq = 0,
                 const WorkerSeqs& worker_seqs = {});
  ~DeltaForwarder();  // Close()
  DeltaForwarder(const DeltaForwarder&) = delete;
  DeltaForwarder& operator=(const DeltaForwarder&) = delete;

  int index() const { return index_; }
  const std::vector<int>& holders() const { return holders_; }

  // What Mutation::Record calls (the shard's write lock held). Call under the lock that orders the shard's
  // mutations, right after one: takes its deltas of `table` (may be empty; moved from, so pass an rvalue
  // to avoid a copy) as the next seq, with `pushes` (worker -> seq) the pushes it applied. A mutation with no delta and
  // no push records nothing. The thread runs in the idle time (SCHED_IDLE); when it serves an in-process holder and
  // lags 64 mutations behind (routing, or delivery), Record first routes and delivers them itself, on the caller's
  // thread, waiting (up to a second) only for work another thread has under way. Returns the current seq. Throws
  // std::invalid_argument for an unknown table or a batch of the wrong record size (nothing recorded).
  int64_t Record(const std::string& table, DeltaBatch deltas, const WorkerSeqs& pushes);

  // An empty DeltaBatch to record the next mutation into: one Record gave back once routed, with its
  // capacity, so steady-state mutations allocate no delta buffers (a fresh one when none is spare).
  DeltaBatch TakeSpare();

  int64_t DurableSeq(int worker) const;  // the highest push seq of `worker` every holder applied

  // (Re)connects `holder` (one of holders()): `local` is its ParityHolder in this process, or null for
  // a holder served through Take/Ack. Its parity reflects this server's stream up to the current seq:
  // the queue is cleared and it counts as having applied seq. Throws std::invalid_argument otherwise.
  // Returns the link generation a remote transport quotes in Take / Ack / Fail.
  uint64_t SetHolder(int holder, std::shared_ptr<ParityHolder> local);

  // Remote transport of link generation `link`: waits up to timeout_ms for batches for `holder` (not
  // down, none in flight) and moves every one recorded so far in flight (routing them if the thread has
  // not yet). False on timeout, once closed, or once the link was
  // replaced (its transport should stop: a new one serves the new link).
  bool Take(int holder, uint64_t link, int timeout_ms, Delivery* out);
  void Ack(int holder, uint64_t link, int64_t applied);  // the holder applied up to `applied`
  // The holder could not be reached or refused: down until replaced; `error` is kept unless lost.
  void Fail(int holder, uint64_t link, const std::string& error, bool lost);

  int64_t seq() const;  // the last seq recorded
  Progress progress() const;
  uint64_t bytes_sent() const;              // delta bytes queued for holders so far
  std::vector<std::string> errors() const;  // failures other than a lost holder

  // Someone waits for parity to catch up (a drain, a decode): what is recorded is routed now instead of
  // waiting for a fuller range, and delivered to in-process holders on the calling thread (at its priority)
  // unless a delivery to them is already running. When the thread has work under way that the caller cannot
  // take over, the thread runs under the normal policy until it next has nothing to do (as InheritingMutex lifts
  // an idle owner). (Remote links still send on their own schedule; their transport flushes.)
  void Flush();

  void DropPending();  // failure injection: every batch not yet delivered is lost, and nothing more goes out
  void Close();        // stops delivering (returns once no delivery runs); Take returns false from now on

 private:
  using Route = std::pair<const std::string, std::unique_ptr<ParityRouter>>;  // a table's entry in routers_
  const Route& RouteOf(const std::string& table, const char* what) const;
  int64_t Record(const Route& route, DeltaBatch deltas, const WorkerSeqs& pushes);
  void KeepSpareLocked(DeltaBatch&& deltas);  // keeps an emptied buffer for TakeSpare, within the budget

  struct Link {
    std::shared_ptr<ParityHolder> local;  // null: remote (or not connected)
    bool connected = false;
    bool down = false;
    bool in_flight = false;
    uint64_t generation = 0;
    int64_t acked = 0;
    int64_t base = 0;  // the seq its holder's parity already reflected when (re)connected: later seqs only
    std::deque<BatchPtr> queue;
  };
  // A mutation recorded but not yet routed into its holders' queues.
  struct Recorded {
    int64_t seq = 0;
    const ParityRouter* router = nullptr;
    const std::string* table = nullptr;  // the key of its router in routers_ (never erased)
    DeltaBatch deltas;
    std::shared_ptr<const WorkerSeqs> stamp;
    std::chrono::steady_clock::time_point at;  // when recorded: bounds how long routing waits for a range
  };
  void Run();                                              // routes what Record took, and delivers to local holders
  bool DeliverLocked(std::unique_lock<std::mutex>& lock);  // one delivery to a local holder; false: none due
  void RouteLocked(std::unique_lock<std::mutex>& lock);
  // Routes what is recorded and delivers to in-process holders on the calling thread (Flush, and Record when
  // the thread lags); whether there was anything to do.
  bool FlushLocked(std::unique_lock<std::mutex>& lock);
  bool ServesLocalLocked() const;  // some live holder is in this process: the thread routes at once
  bool RoutesNowLocked() const;    // the thread should route what is recorded now
  size_t LagLocked() const;        // mutations this thread has still to route or deliver in-process
  void FailLocked(Link& link, int holder, const std::string& error, bool lost);
  void LiftLocked();   // the thread to SCHED_OTHER (Flush waits for what it took)
  void LowerLocked();  // back to SCHED_IDLE once lifted (the thread, when it has nothing taken)
  int64_t DurableLocked() const;
  void AdvanceDurableLocked();
  Link& LinkLocked(int holder, const char* what);

  int index_;
  std::vector<int> holders_;
  std::map<std::string, std::unique_ptr<ParityRouter>> routers_;
  mutable std::mutex mu_;
  std::condition_variable work_;  // batches queued, a link changed, or closing
  int64_t seq_;
  std::shared_ptr<const WorkerSeqs> worker_seqs_;
  std::map<int, Link> links_;
  std::deque<Recorded> recorded_;  // in seq order, not yet routed
  size_t routing_ = 0;             // taken from recorded_ by the thread, not yet queued on the links
  size_t delivering_ = 0;          // deliveries to local holders running outside the lock (Close waits for them)
  bool flush_ = false;             // Flush asked to route what is recorded now
  DeltaCoalescer coalescer_;       // used by the one router at a time, as is merged_
  DeltaCoalescer::Merged merged_;
  uint64_t coalesced_ = 0;          // mutations merged into an earlier one of their range
  std::vector<DeltaBatch> spares_;  // routed batches' buffers, for TakeSpare
  size_t spare_bytes_ = 0;          // their capacity
  uint64_t lag_waits_ = 0;          // Records that found the delivery lagging
  uint64_t lag_catchups_ = 0;       // of those, the ones that did the thread's work themselves
  std::deque<std::pair<int64_t, std::shared_ptr<const WorkerSeqs>>> history_;  // not yet durable
  std::shared_ptr<const WorkerSeqs> durable_seqs_;
  uint64_t next_generation_ = 1;
  uint64_t bytes_sent_ = 0;
  std::vector<std::string> errors_;
  bool closed_ = false;
  int thread_tid_ = 0;   // the thread's kernel id, once it runs (Linux)
  bool lifted_ = false;  // a Flush lifted the thread out of the idle policy
  uint64_t lifts_ = 0;
  std::thread thread_;
};

}  // namespace xdl_ec
