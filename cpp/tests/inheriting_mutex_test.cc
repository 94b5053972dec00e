#include "xdl_ec/inheriting_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#ifdef __linux__
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace xdl_ec {
namespace {

#ifdef __linux__
int Tid() { return static_cast<int>(syscall(SYS_gettid)); }

// An idle-policy thread holds the mutex while a normal thread blocks on it: the waiter moves the owner to the
// normal policy (so a busy machine runs it and it lets go), and the owner moves back when it unlocks.
TEST(InheritingMutex, AWaiterLiftsAnIdleOwnerUntilItUnlocks) {
  InheritingMutex mu;
  std::mutex m;
  std::condition_variable cv;
  int owner_tid = 0;
  bool release = false;
  std::thread owner([&] {
    sched_param idle{};
    ASSERT_EQ(sched_setscheduler(0, SCHED_IDLE, &idle), 0);
    mu.lock();
    {
      std::unique_lock<std::mutex> l(m);
      owner_tid = Tid();
      cv.notify_all();
      cv.wait(l, [&] { return release; });
    }
    mu.unlock();
    EXPECT_EQ(sched_getscheduler(0), SCHED_IDLE);  // moved back by its unlock
    // uncontended now: stays idle across a lock and unlock
    mu.lock();
    mu.unlock();
    EXPECT_EQ(sched_getscheduler(0), SCHED_IDLE);
  });
  {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return owner_tid != 0; });
  }
  EXPECT_EQ(sched_getscheduler(owner_tid), SCHED_IDLE);
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    mu.lock();
    got = true;
    mu.unlock();
  });
  // the waiter lifts the owner before it blocks
  for (int i = 0; i < 2000 && mu.lifts() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(mu.lifts(), 1u);
  EXPECT_EQ(sched_getscheduler(owner_tid), SCHED_OTHER);
  EXPECT_FALSE(got.load());
  {
    std::lock_guard<std::mutex> l(m);
    release = true;
  }
  cv.notify_all();
  waiter.join();
  owner.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(mu.lifts(), 1u);
}

// A normal owner is never changed, and the waiter's own policy is left alone.
TEST(InheritingMutex, ANormalOwnerIsLeftAlone) {
  InheritingMutex mu;
  mu.lock();
  std::thread waiter([&] {
    mu.lock();
    mu.unlock();
    EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
  mu.unlock();
  waiter.join();
  EXPECT_EQ(mu.lifts(), 0u);
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}
#endif

}  // namespace
}  // namespace xdl_ec
