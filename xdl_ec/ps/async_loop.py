"""The asynchronous step loop: each worker is kept busy; its step gets the next global step number and the
weights of that moment, and its gradients (sparse on the servers, dense at the driver) are applied as soon as
they arrive."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from .backend import RoleLost, wait_first
from .direct import LinkFuture, wait_first_linked


def run_async(trainer: Any, bar: Any, stop: Optional[int]) -> None:
    """Trains until step ``stop`` (None: until every worker's input is exhausted)."""
    t = trainer
    workers = len(t.workers)
    in_flight: Dict[Any, int] = {}
    step_of: Dict[Any, int] = {}  # the step number each call in flight trains
    retry: List[int] = []  # numbers of failed steps: a retried batch keeps its optimizer step, as in sync mode

    def can_dispatch(i: int) -> bool:
        if i in in_flight.values() or not t.has_next[i]:
            return False
        return bool(retry) or stop is None or t.step < stop

    def dispatch(i: int) -> None:
        if retry:
            step = retry.pop(0)
        else:
            t.before_step(t.step + 1)
            t.step += 1
            step = t.step
        more = stop is None or step < stop
        future = t.worker(i).train_step(step, t._dense.for_step(), 1, more, t.ttl_before(step))
        in_flight[future], step_of[future] = i, step

    def apply(i: int, result: Any) -> None:
        t.check_finite(result)
        t._dense.answered([result.dense_grads])
        t.losses.append(result.loss)
        t.note_result(i, result)
        t.tick(bar)

    for i in range(workers):
        if can_dispatch(i):
            dispatch(i)
    while in_flight:
        futures = list(in_flight)
        waiter = wait_first_linked if isinstance(futures[0], LinkFuture) else wait_first
        done = waiter(futures, t.cluster.call_timeout)
        if not done:  # nobody answered in time: let the scheduler judge the oldest call
            done = [next(iter(in_flight))]
        lost: List[RoleLost] = []
        for future in done:
            i = in_flight.pop(future)
            step = step_of.pop(future)
            try:
                result = t.result(future)
            except RoleLost as err:
                lost.append(err)
                retry.append(step)
                continue
            if result is None:  # its input ended: the step number is not used
                t.has_next[i] = False
                continue
            apply(i, result)
        if lost:  # drain the other steps in flight (applying those that succeeded), then recover
            futures = list(in_flight.items())
            in_flight.clear()
            results, more = t.drain([f for f, _ in futures])
            for (future, i), result in zip(futures, results):
                step = step_of.pop(future)
                if result is not None:
                    apply(i, result)
                else:
                    retry.append(step)
            retry.sort()
            if t.recover(lost + more, t.step):
                retry.clear()  # rolled back: the steps after the checkpoint are numbered again
        elif not in_flight:
            if t.at_boundary(lambda: t.after_step(t.step)):  # a boundary with no push in flight
                retry.clear()  # rolled back: the steps after the checkpoint are numbered again
        elif t.wants_boundary(t.step):
            continue  # hold new steps until the ones in flight are done: the strategy gets its boundary
        for i in range(workers):
            if can_dispatch(i):
                dispatch(i)
