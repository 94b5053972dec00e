#include "xdl_ec/task_pool.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace xdl_ec {
namespace {

TEST(TaskPool, RunsEveryPartExactlyOnce) {
  for (size_t threads : {0u, 1u, 3u}) {
    TaskPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (size_t parts : {0u, 1u, 2u, 5u, 64u}) {
      std::vector<std::atomic<int>> ran(parts);
      pool.Run(parts, [&](size_t p) { ran[p].fetch_add(1); });
      for (size_t p = 0; p < parts; ++p) EXPECT_EQ(ran[p].load(), 1) << threads << " threads, part " << p;
    }
  }
}

TEST(TaskPool, ConcurrentCallersEachGetAllTheirParts) {
  TaskPool pool(2);
  constexpr int kRuns = 300;
  auto caller = [&](std::atomic<long>* sum) {
    for (int r = 0; r < kRuns; ++r) pool.Run(7, [&](size_t p) { sum->fetch_add(static_cast<long>(p) + 1); });
  };
  std::atomic<long> a{0}, b{0};
  std::thread ta(caller, &a), tb(caller, &b);
  ta.join();
  tb.join();
  EXPECT_EQ(a.load(), kRuns * 28L);  // 1 + ... + 7 per run, whoever ran the parts
  EXPECT_EQ(b.load(), kRuns * 28L);
}

TEST(TaskPool, APartsExceptionIsRethrownAfterEveryPartRanAndThePoolStaysUsable) {
  TaskPool pool(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.Run(16,
                        [&](size_t p) {
                          ran.fetch_add(1);
                          if (p == 3) throw std::runtime_error("part 3");
                        }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 16);
  std::atomic<int> again{0};
  pool.Run(16, [&](size_t) { again.fetch_add(1); });
  EXPECT_EQ(again.load(), 16);
}

TEST(TaskPool, ARunInsideAPartRunsOnItsCaller) {
  TaskPool pool(1);
  std::atomic<int> inner{0};
  pool.Run(4, [&](size_t) { pool.Run(3, [&](size_t) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 12);
}

TEST(TaskPool, PartsCoverTheItemsContiguouslyInNearEqualSizes) {
  for (size_t n = 0; n < 40; ++n) {
    for (size_t parts = 1; parts < 12; ++parts) {
      EXPECT_EQ(TaskPool::PartBegin(n, parts, 0), 0u);
      EXPECT_EQ(TaskPool::PartBegin(n, parts, parts), n);
      for (size_t p = 0; p < parts; ++p) {
        const size_t size = TaskPool::PartBegin(n, parts, p + 1) - TaskPool::PartBegin(n, parts, p);
        EXPECT_TRUE(size == n / parts || size == n / parts + 1) << n << " items, " << parts << " parts";
      }
    }
  }
  TaskPool none(0), two(2);
  EXPECT_EQ(none.PartsFor(100000, 10), 1u);  // no threads: nothing to split over
  EXPECT_EQ(two.PartsFor(9, 10), 1u);        // below the minimum
  EXPECT_EQ(two.PartsFor(100000, 10), 3 * TaskPool::kPartsPerThread);
  EXPECT_EQ(two.PartsFor(5, 1), 5u);  // never more parts than items
}

TEST(TaskPool, AForkedChildMakesItsOwnPool) {
  TaskPool& parent = TaskPool::Shared();
  std::atomic<int> warm{0};
  parent.Run(8, [&](size_t) { warm.fetch_add(1); });  // the parent's threads exist and have run
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // a child waiting on the parent's threads (which it does not have) would hang: fail instead
    TaskPool& child = TaskPool::Shared();
    std::atomic<int> ran{0};
    child.Run(16, [&](size_t) { ran.fetch_add(1); });
    _exit(ran.load() == 16 && &child != &parent ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(warm.load(), 8);
}

}  // namespace
}  // namespace xdl_ec
