// InheritingMutex: a mutex whose waiters lift an idle-policy owner to the normal policy until it unlocks.
//
// Parity work runs in threads under SCHED_IDLE (delta_forwarder.cc), so it only takes the cores' idle time. When
// such a thread holds a lock a normal thread needs (a parity holder's, which a rebuild's or a degraded read's
// fragment reads take), a busy machine does not schedule it again for as long as the normal threads keep the
// cores, and the normal thread waits on it: priority inversion (measured: a rebuild's parity writes waited 90 ms
// each on a 2-core machine while training ran, 40x the rebuild's own work). Linux's priority-inheritance futexes
// lift only real-time priorities, so this does it by hand: a thread about to block looks up the owner, and if it
// runs under SCHED_IDLE, moves it to SCHED_OTHER at nice 0 (thread_priority.h); the owner moves itself back at its
// next unlock of this mutex. Uncontended, lock() and unlock() cost a try_lock and two atomic stores. Elsewhere
// than Linux it is a plain mutex.
#pragma once

#include <atomic>
#include <mutex>

namespace xdl_ec {

class InheritingMutex {
 public:
  InheritingMutex() = default;
  InheritingMutex(const InheritingMutex&) = delete;
  InheritingMutex& operator=(const InheritingMutex&) = delete;

  void lock();
  bool try_lock();
  void unlock();

  // Times a waiter lifted an idle-policy owner (for tests and stats).
  uint64_t lifts() const { return lifts_.load(std::memory_order_relaxed); }

 private:
  void Lift(int self);

  std::mutex mu_;
  std::atomic<int> owner_{0};   // thread id of the owner, 0 when unlocked
  std::atomic<int> lifted_{0};  // thread id of an owner a waiter lifted and that has not moved back yet
  std::atomic<uint64_t> lifts_{0};
};

}  // namespace xdl_ec
