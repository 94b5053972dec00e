#include "xdl_ec/inheriting_mutex.h"

#ifdef __linux__
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace xdl_ec {
namespace {

int ThisThread() {
#ifdef __linux__
  thread_local const int tid = static_cast<int>(syscall(SYS_gettid));
  return tid;
#else
  return 1;
#endif
}

}  // namespace

void InheritingMutex::lock() {
  const int self = ThisThread();
  if (!mu_.try_lock()) {
    Lift(self);
    mu_.lock();
  }
  owner_.store(self, std::memory_order_release);
}

bool InheritingMutex::try_lock() {
  if (!mu_.try_lock()) return false;
  owner_.store(ThisThread(), std::memory_order_release);
  return true;
}

void InheritingMutex::unlock() {
  const int self = ThisThread();
  owner_.store(0, std::memory_order_release);
  int lifted = self;
  const bool restore = lifted_.compare_exchange_strong(lifted, 0);
  mu_.unlock();
#ifdef __linux__
  if (restore) {
    sched_param idle{};
    sched_setscheduler(self, SCHED_IDLE, &idle);  // back to the idle time it was lifted from
  }
#else
  (void)restore;
#endif
}

void InheritingMutex::Lift(int self) {
#ifdef __linux__
  const int owner = owner_.load(std::memory_order_acquire);
  if (owner == 0 || owner == self) return;
  if (sched_getscheduler(owner) != SCHED_IDLE) return;  // a normal owner runs anyway; gone: nothing to lift
  int none = 0;
  if (!lifted_.compare_exchange_strong(none, owner)) return;  // another waiter lifted it already
  // The owner may have unlocked meanwhile: then it stays lifted until its next unlock of this mutex, which
  // costs only that its work meanwhile is not idle-only.
  sched_param normal{};
  if (sched_setscheduler(owner, SCHED_OTHER, &normal) == 0) {
    lifts_.fetch_add(1, std::memory_order_relaxed);
  } else {
    int expected = owner;
    lifted_.compare_exchange_strong(expected, 0);
  }
#else
  (void)self;
#endif
}

}  // namespace xdl_ec
