"""The asynchronous step loop: each worker is kept busy; its step gets the next global step number and the
weights of that moment, and its gradients (sparse on the servers, dense at the driver) are applied as soon as
they arrive."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from xdl_ec.ps.backend import RoleLost, wait_first
from xdl_ec.ps.direct import LinkFuture, wait_first_linked
from xdl_ec.ps.progress import Progress
from xdl_ec.ps.training_loop import TrainingLoop
from xdl_ec.ps.worker import StepResult


def run_async(loop: TrainingLoop, bar: Progress, stop: Optional[int]) -> None:
    """Trains until step ``stop`` (None: until every worker's input is exhausted)."""
    state, cluster, dense = loop.state, loop.cluster, loop.dense
    workers = len(cluster.workers)
    in_flight: Dict[Any, int] = {}
    step_of: Dict[Any, int] = {}  # the step number each call in flight trains
    retry: List[int] = []  # numbers of failed steps: a retried batch keeps its optimizer step, as in sync mode

    def can_dispatch(i: int) -> bool:
        if i in in_flight.values() or not state.has_next[i]:
            return False
        return bool(retry) or stop is None or state.step < stop

    def dispatch(i: int) -> None:
        if retry:
            step = retry.pop(0)
        else:
            loop.before_step(state.step + 1)
            state.step += 1
            step = state.step
        more = stop is None or step < stop
        future = cluster.worker(i).train_step(step, dense.for_step(), 1, more, loop.ttl_before(step))
        in_flight[future], step_of[future] = i, step

    def apply(i: int, result: StepResult) -> None:
        state.check_finite(result)
        dense.answered([result.dense_grads])
        state.losses.append(result.loss)
        state.note_result(i, result)
        loop.tick(bar)

    for i in range(workers):
        if can_dispatch(i):
            dispatch(i)
    while in_flight:
        futures = list(in_flight)
        waiter = wait_first_linked if isinstance(futures[0], LinkFuture) else wait_first
        done = waiter(futures, cluster.config.call_timeout)
        if not done:  # nobody answered in time: let the scheduler judge the oldest call
            done = [next(iter(in_flight))]
        lost: List[RoleLost] = []
        for future in done:
            i = in_flight.pop(future)
            step = step_of.pop(future)
            try:
                result = cluster.result(future)
            except RoleLost as err:
                lost.append(err)
                retry.append(step)
                continue
            if result is None:  # its input ended: the step number is not used
                state.has_next[i] = False
                continue
            apply(i, result)
        if lost:  # drain the other steps in flight (applying those that succeeded), then recover
            futures = list(in_flight.items())
            in_flight.clear()
            results, more = cluster.drain([f for f, _ in futures])
            for (future, i), result in zip(futures, results):
                step = step_of.pop(future)
                if result is not None:
                    apply(i, result)
                else:
                    retry.append(step)
            retry.sort()
            if loop.recovery.recover(lost + more, state.step):
                retry.clear()  # rolled back: the steps after the checkpoint are numbered again
        elif not in_flight:
            if loop.boundary():  # a boundary with no push in flight
                retry.clear()  # rolled back: the steps after the checkpoint are numbered again
        elif loop.wants_boundary(state.step):
            continue  # hold new steps until the ones in flight are done: the strategy gets its boundary
        for i in range(workers):
            if can_dispatch(i):
                dispatch(i)
