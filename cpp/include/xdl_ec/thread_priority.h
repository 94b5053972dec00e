// Moving a thread between the cores' idle time and the normal policy, by kernel thread id (Linux; elsewhere
// these do nothing and no thread is idle).
//
// Parity work runs in the idle time (SCHED_IDLE at nice 19: DeltaForwarder's thread) so that it never takes turns
// with the training step. When a normal thread waits for such work, it lifts the worker for as long as it waits
// (InheritingMutex, DeltaForwarder::Flush). A lift restores nice 0 as well as the policy: SCHED_OTHER at nice 19
// weighs 15 against a busy thread's 1024, so beside another job the lifted thread would still get ~1.5% of a core.
#pragma once

namespace xdl_ec {

int CurrentThreadId();      // the calling thread's kernel id (1 where there is none)
void LowerToIdle(int tid);  // nice 19, then SCHED_IDLE where permitted (nice 19 alone where refused)
bool RunsIdle(int tid);     // whether `tid` runs under SCHED_IDLE (false for a thread that is gone)
// SCHED_OTHER at nice 0. Unprivileged processes may not leave SCHED_IDLE or lower a nice value without
// CAP_SYS_NICE or an RLIMIT_NICE of 20: then false (SCHED_OTHER at nice 19 when only the nice is refused: true).
bool LiftToNormal(int tid);

}  // namespace xdl_ec
