#include "xdl_ec/thread_priority.h"

#ifdef __linux__
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace xdl_ec {
namespace {

constexpr int kIdleNice = 19;

}  // namespace

int CurrentThreadId() {
#ifdef __linux__
  thread_local const int tid = static_cast<int>(syscall(SYS_gettid));
  return tid;
#else
  return 1;
#endif
}

void LowerToIdle(int tid) {
#ifdef __linux__
  setpriority(PRIO_PROCESS, static_cast<id_t>(tid), kIdleNice);
  sched_param idle{};
  sched_setscheduler(tid, SCHED_IDLE, &idle);
#else
  (void)tid;
  (void)kIdleNice;
#endif
}

bool RunsIdle(int tid) {
#ifdef __linux__
  return sched_getscheduler(tid) == SCHED_IDLE;
#else
  (void)tid;
  return false;
#endif
}

bool LiftToNormal(int tid) {
#ifdef __linux__
  sched_param normal{};
  if (sched_setscheduler(tid, SCHED_OTHER, &normal) != 0) return false;
  setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 0);
  return true;
#else
  (void)tid;
  return false;
#endif
}

}  // namespace xdl_ec
