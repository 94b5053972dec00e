"""The synchronous step loop: step t is dispatched to every worker that has a batch left, with the dense weights
(none when the only worker applies its own dense updates, :mod:`~xdl_ec.ps.dense_sync`); all answers are awaited
(the barrier), the dense gradients averaged in worker order and applied (or logged); servers apply the
step's sparse pushes merged in worker order (see :mod:`xdl_ec.ps.server`). Deterministic with ``--deterministic``;
with one worker the model_digest equals the one-process run's."""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import numpy as np

from .dense_sync import dense_nbytes
from .worker import StepResult


def run_sync(trainer: Any, bar: Any, stop: Optional[int]) -> None:
    """Trains until step ``stop`` (None: until every worker's input is exhausted)."""
    t = trainer
    done: Dict[int, StepResult] = {}  # answers of the current step's workers (kept when it is retried)
    while stop is None or t.step < stop:
        todo_all = [i for i, has in enumerate(t.has_next) if has]
        if not todo_all:
            break
        if not done:
            t.before_step(t.step + 1)
        participants = len(todo_all)
        step = t.step + 1
        tw = time.perf_counter()
        weights = t._dense.for_step()
        todo = [i for i in todo_all if i not in done]
        more = stop is None or step < stop
        t0 = time.perf_counter()
        t.loop_seconds["dense"] += t0 - tw
        ttl_before = t.ttl_before(step)
        futures = [t.worker(i).train_step(step, weights, participants, more, ttl_before) for i in todo]
        answers, lost = t.drain(futures)
        t1 = time.perf_counter()
        t.loop_seconds["call"] += t1 - t0
        done.update((i, r) for i, r in zip(todo, answers) if r is not None)
        if lost:  # no call of the step is in flight any more: recover, then retry or replay
            if t.recover(lost, step):
                done = {}  # rolled back: the step is replayed whole
            # else retried: the workers that answered trained their batch (their pushes wait on the servers for
            # the others'), only the failed ones run again
            continue
        results = [done[i] for i in todo_all]
        done = {}
        for i, r in zip(todo_all, results):
            if r is None:
                raise RuntimeError(f"worker {i} had no batch at step {step} although it reported one")
            t.check_finite(r)
        t.step = step
        t.dense_bytes += len(todo) * dense_nbytes(weights) + sum(dense_nbytes(r.dense_grads) for r in results)
        t._dense.answered([r.dense_grads for r in results])
        t2 = time.perf_counter()
        t.loop_seconds["dense"] += t2 - t1
        t.losses.append(results[0].loss if participants == 1 else float(np.mean([r.loss for r in results])))
        for i, r in zip(todo_all, results):
            t.note_result(i, r)
        t.tick(bar)
        t.at_boundary(lambda: t.after_step(t.step))  # a rollback there: the loop goes on from its step
        t.loop_seconds["boundary"] += time.perf_counter() - t2
