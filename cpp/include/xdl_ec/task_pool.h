// TaskPool: a few threads that run the parts of one batch beside the thread that asked. A worker's
// step pulls and pushes its rows on one thread while the TF step that needs them waits, so a large
// batch's lookups and optimizer steps are split over the cores that would otherwise idle.
//
// One run at a time: a caller that finds the pool busy with another caller's run does every part
// itself, so nothing waits on a queue, nested or concurrent runs cannot deadlock, and the result
// never depends on how the parts were spread (each part writes only its own outputs).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace xdl_ec {

class TaskPool {
 public:
  // The process's pool: hardware_concurrency() - 1 threads (none on one core), or XDL_EC_CORE_THREADS - 1
  // when that is set (1: no threads, every run on its caller). Made again in a forked child, whose copy
  // of the parent's threads does not exist (pthread_atfork).
  static TaskPool& Shared();

  explicit TaskPool(size_t threads);  // threads beside the callers; 0 runs every part on its caller
  ~TaskPool();                        // waits for a run in progress, then joins the threads
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  size_t threads() const { return threads_.size(); }
  // How many parts a batch of n items is worth splitting into: 1 below min_items or without threads, else
  // kPartsPerThread per thread (the caller's included). Parts are claimed as threads come free, so a thread
  // that wakes late (tens to hundreds of microseconds in a VM) takes fewer and the batch still ends early.
  static constexpr size_t kPartsPerThread = 8;
  size_t PartsFor(size_t n, size_t min_items) const {
    if (n == 0 || n < min_items || threads_.empty()) return 1;
    return std::min(n, (threads() + 1) * kPartsPerThread);
  }

  // Calls part(i) once for every i in [0, parts), returning when all returned. The caller runs parts too.
  // The first exception a part throws is rethrown here once every part has finished.
  void Run(size_t parts, const std::function<void(size_t)>& part);
  // Run without a std::function (nor its allocation) when the parts would all run on the caller anyway.
  template <class Part>
  void ForEachPart(size_t parts, Part&& part) {
    if (parts <= 1 || threads_.empty()) {
      for (size_t i = 0; i < parts; ++i) part(i);
      return;
    }
    Run(parts, std::function<void(size_t)>(std::forward<Part>(part)));
  }
  // The first item of part p when n items are cut into `parts` contiguous parts of near-equal size.
  static size_t PartBegin(size_t n, size_t parts, size_t p) { return n / parts * p + std::min(p, n % parts); }

 private:
  void Loop();
  void Work(uint64_t generation);
  bool Claim(uint64_t generation, size_t* index);
  void Finish(const std::exception_ptr& error);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;  // threads: a new run or the end
  std::condition_variable done_;  // the caller: the last part finished
  std::atomic<bool> busy_{false};
  // The run's generation (high 32 bits) and its next unclaimed part (low 32): claiming checks both in one
  // step, so a thread late for one run never takes a part of the next with the old run's function.
  std::atomic<uint64_t> next_{0};
  uint32_t generation_ = 0;  // under mutex_; never 0 once a run started (0 is what the threads start having seen)
  std::atomic<size_t> parts_{0};
  std::atomic<const std::function<void(size_t)>*> part_{nullptr};
  std::atomic<size_t> unfinished_{0};
  std::exception_ptr error_;  // under mutex_
  bool stop_ = false;         // under mutex_
};

}  // namespace xdl_ec
