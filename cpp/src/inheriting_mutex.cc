#include "xdl_ec/inheriting_mutex.h"

#include "xdl_ec/thread_priority.h"

namespace xdl_ec {

void InheritingMutex::lock() {
  const int self = CurrentThreadId();
  if (!mu_.try_lock()) {
    Lift(self);
    mu_.lock();
  }
  owner_.store(self, std::memory_order_release);
}

bool InheritingMutex::try_lock() {
  if (!mu_.try_lock()) return false;
  owner_.store(CurrentThreadId(), std::memory_order_release);
  return true;
}

void InheritingMutex::unlock() {
  const int self = CurrentThreadId();
  owner_.store(0, std::memory_order_release);
  int lifted = self;
  const bool restore = lifted_.compare_exchange_strong(lifted, 0);
  mu_.unlock();
  if (restore) LowerToIdle(self);  // back to the idle time it was lifted from
}

void InheritingMutex::Lift(int self) {
  const int owner = owner_.load(std::memory_order_acquire);
  if (owner == 0 || owner == self) return;
  if (!RunsIdle(owner)) return;  // a normal owner runs anyway; gone: nothing to lift
  int none = 0;
  if (!lifted_.compare_exchange_strong(none, owner)) return;  // another waiter lifted it already
  // The owner may have unlocked meanwhile: then it stays lifted until its next unlock of this mutex, which
  // costs only that its work meanwhile is not idle-only.
  if (LiftToNormal(owner)) {
    lifts_.fetch_add(1, std::memory_order_relaxed);
  } else {
    int expected = owner;
    lifted_.compare_exchange_strong(expected, 0);
  }
}

}  // namespace xdl_ec
