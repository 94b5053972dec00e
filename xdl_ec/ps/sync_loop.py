"""The synchronous step loop: step t is dispatched to every worker that has a batch left, with the dense weights
(none when the only worker applies its own dense updates, :mod:`~xdl_ec.ps.dense_sync`); all answers are awaited
(the barrier), the dense gradients averaged in worker order and applied (or logged); servers apply the
step's sparse pushes merged in worker order (see :mod:`xdl_ec.ps.server`). Deterministic with ``--deterministic``;
with one worker the model_digest equals the one-process run's."""

from __future__ import annotations

import time
from typing import Dict, Optional

import numpy as np

from xdl_ec.ps.dense_sync import dense_nbytes
from xdl_ec.ps.progress import Progress
from xdl_ec.ps.training_loop import TrainingLoop
from xdl_ec.ps.worker import StepResult


def run_sync(loop: TrainingLoop, bar: Progress, stop: Optional[int]) -> None:
    """Trains until step ``stop`` (None: until every worker's input is exhausted)."""
    state, cluster, dense, timer = loop.state, loop.cluster, loop.dense, loop.loop_seconds
    done: Dict[int, StepResult] = {}  # answers of the current step's workers (kept when it is retried)
    while stop is None or state.step < stop:
        todo_all = [i for i, has in enumerate(state.has_next) if has]
        if not todo_all:
            break
        if not done:
            loop.before_step(state.step + 1)
        participants = len(todo_all)
        step = state.step + 1
        tw = time.perf_counter()
        weights = dense.for_step()
        todo = [i for i in todo_all if i not in done]
        more = stop is None or step < stop
        t0 = time.perf_counter()
        timer["dense"] += t0 - tw
        ttl_before = loop.ttl_before(step)
        futures = [cluster.worker(i).train_step(step, weights, participants, more, ttl_before) for i in todo]
        answers, lost = cluster.drain(futures)
        t1 = time.perf_counter()
        timer["call"] += t1 - t0
        done.update((i, r) for i, r in zip(todo, answers) if r is not None)
        if lost:  # no call of the step is in flight any more: recover, then retry or replay
            if loop.recovery.recover(lost, step):
                done = {}  # rolled back: the step is replayed whole
            # else retried: the workers that answered trained their batch (their pushes wait on the servers for
            # the others'), only the failed ones run again
            continue
        results = [done[i] for i in todo_all]
        done = {}
        for i, r in zip(todo_all, results):
            if r is None:
                raise RuntimeError(f"worker {i} had no batch at step {step} although it reported one")
            state.check_finite(r)
        state.step = step
        loop.dense_bytes += len(todo) * dense_nbytes(weights) + sum(dense_nbytes(r.dense_grads) for r in results)
        dense.answered([r.dense_grads for r in results])
        t2 = time.perf_counter()
        timer["dense"] += t2 - t1
        state.losses.append(results[0].loss if participants == 1 else float(np.mean([r.loss for r in results])))
        for i, r in zip(todo_all, results):
            state.note_result(i, r)
        loop.tick(bar)
        loop.boundary()  # a rollback there: the loop goes on from its step
        timer["boundary"] += time.perf_counter() - t2
