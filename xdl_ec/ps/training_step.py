"""TrainingStep: one training step of a worker, driven by the driver's loop (:mod:`xdl_ec.ps.training`).

1. the batch was prepared in the background (:class:`~xdl_ec.ps.worker_input.WorkerInput`): per table its UNIQUE
   keys, per feature where its ids' rows are, and which keys the previous batch did not touch;
2. the rows of the unique keys come from the servers (:class:`~xdl_ec.ps.batch_rows.BatchRows`, one request per
   server for every table): the part prefetched while the previous step computed, plus the part that had to wait
   for the previous step's push;
3. TF runs the model (:class:`~xdl_ec.ps.worker_model.WorkerModel`) and returns the dense gradients and, per table,
   the per-unique-key summed row gradients;
4. while TF computes, the NEXT batch's rows that this step cannot change (keys not in this batch) are already being
   pulled, when the data allow: with one worker or in async mode. In sync mode with several workers another
   worker's push may touch any key, so the next pull waits for the step barrier;
5. the row gradients are pushed at the step's optimizer step number; the dense gradients go back to the driver
   with the step's answer, together with whether this worker has another batch (so the driver knows the next
   step's participants). When no other worker can pull in between (the same cases as 4), the step answers without
   waiting for the push's acks (:class:`~xdl_ec.ps.pushes_in_flight.PushesInFlight`): they are read at the next
   step, or a flush.

When no other worker can come between them (the cases of 4) and the client is a :class:`~xdl_ec.ps.client.PSClient`
(or its :class:`~xdl_ec.ps.cached_client.CachedClient`), 4 and 5 are ONE request per server (``combine_calls``):
the push of step t and the pull of ALL of step t + 1's keys, applied in that order by the server
(``ParameterServer.push_pull``, or ``push_pull_stale`` with a cache), sent as TF finishes; the rows come back
while the answer travels to the driver and its next step call comes back. One call per server and step instead of
up to three (a prefetch pull, a pull of the keys the push changed, the push).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from xdl_ec.model.feature_batch import FeatureBatch
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.batch_rows import AllRows, Prefetch
from xdl_ec.ps.dense_state import DenseState
from xdl_ec.ps.step_result import StepResult
from xdl_ec.ps.worker_parts import WorkerParts


@dataclasses.dataclass(frozen=True)
class _SentStep:
    """A step whose push met a lost server after reaching the live ones: the retry of ``step`` answers ``result``
    without training again, and ``following`` becomes the current batch."""

    step: int
    result: StepResult
    following: Optional[FeatureBatch]


class TrainingStep:
    """The steps of worker ``index`` of ``count`` over its ``parts``. ``prefetch_across_steps``: pull the next
    batch's untouched keys during the current step (and read the push's acks later); ``combine_calls``: that pull
    of every key and the push in one request per server (see the module docstring for when either is exact)."""

    def __init__(
        self, index: int, count: int, parts: WorkerParts, prefetch_across_steps: bool, combine_calls: bool
    ) -> None:
        self._index, self._count, self._parts = index, count, parts
        self._prefetch, self._combine = prefetch_across_steps, combine_calls
        self._sent: Optional[_SentStep] = None

    def train(
        self,
        step: int,
        weights: Union[None, DenseState, Sequence[np.ndarray]],
        participants: int,
        more: bool,
        ttl_before: Optional[Mapping[str, int]],
    ) -> Optional[StepResult]:
        """The step at optimizer ``step`` (see :meth:`Worker.train_step`); None when the input is exhausted."""
        parts = self._parts
        with self._timed():
            parts.pushes.resend_lost()
            if self._sent is not None and self._sent.step == step:
                return self._answer_again(self._sent)
            batch = parts.input.current
            if batch is None:
                return None
            tw = time.perf_counter()
            parts.model.take_weights(weights)
            t0 = time.perf_counter()
            parts.stats.add("set_weights", t0 - tw)
            parts.pushes.flush(write_back=False)
            rows = parts.rows.of(batch)
            t_data = time.perf_counter()
            following = parts.input.read_next()
            if following is not None:
                parts.model.check_following(batch, following)  # before anything is applied
            combine = self._combine and participants == 1 and following is not None and more
            prefetch: Optional[Prefetch] = None
            if following is not None and self._prefetch and more and not combine:
                prefetch = parts.rows.prefetch_fresh(following)
            t1 = time.perf_counter()
            parts.stats.add("data_wait", t1 - t_data)
            result, grads = self._trained(batch, rows, following is not None)
            t2 = time.perf_counter()
            if combine and following is not None:  # (combine implies a next batch)
                # the push and the next batch's rows in one request per server, applied in that order there. Sent
                # before the step answers: a worker that dies after answering has sent its push (the driver counts it)
                prefetch = AllRows(parts.pushes.push_pull(grads, step, parts.rows.requests(following), ttl_before))
            else:
                self._push(result, following, grads, step, participants, ttl_before)
            result.push_seqs = parts.client.sent_seqs()
            if self._prefetch and self._count == 1 and parts.pushes.any_lost():
                # a server known dead already (a call to it failed at once): this step fails here, as it would have
                # waiting for the push, and its retry answers this result without training again (a cluster's only
                # worker gets the retry, at the same step; with several async workers another may get that step
                # number, so there the failure surfaces with the next step's acks, before it trains)
                self._sent = _SentStep(step, result, following)
                parts.pushes.settle()
            result.pending_updates = parts.pushes.held_in_caches()
            t3 = time.perf_counter()
            parts.input.current = following
            parts.rows.expect(prefetch)
            parts.stats.steps += 1
            for name, seconds in (("pull_wait", t_data - t0), ("compute", t2 - t1), ("push", t3 - t2)):
                parts.stats.add(name, seconds)
            return result

    def forget(self) -> None:
        """A rollback: a step whose push was sent is trained again, not answered from memory."""
        self._sent = None

    @property
    def unanswered(self) -> Optional[int]:
        """The step trained whose push met a lost server, kept for its retry (None: none): its batch and dense
        update are applied, its answer is not given yet (a reattaching driver retries it, docs/design/reattach.md)."""
        return None if self._sent is None else self._sent.step

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        """A step's wall time ("in_step"); a lost server drops the rows in flight (they may come from it: the
        retry pulls them all)."""
        start = time.perf_counter()
        try:
            yield
        except RoleLost:
            self._parts.rows.drop()
            raise
        finally:
            self._parts.stats.add("in_step", time.perf_counter() - start)

    def _trained(
        self, batch: FeatureBatch, rows: Dict[str, np.ndarray], has_next: bool
    ) -> Tuple[StepResult, Dict[str, Tuple[np.ndarray, np.ndarray]]]:
        """TF's step on ``batch`` over ``rows``: the answer (its push seqs to come) and {table: (keys, row
        gradients)} to push."""
        step_model = self._parts.model.built_step
        loss, dense_grads, row_grads, probs = step_model.train_scored(batch, rows)
        heads = step_model.heads
        result = StepResult(
            self._index,
            loss,
            len(batch),
            dense_grads,
            None,
            has_next,
            labels=[batch.labels_of(h) for h in (heads or (None,))],
            probabilities=probs,
            heads=None if heads is None else tuple(heads),
            outputs=dict(step_model.outputs) or None,
        )
        return result, {t: (batch.keys[t], g) for t, g in row_grads.items()}

    def _push(
        self,
        result: StepResult,
        following: Optional[FeatureBatch],
        grads: Dict[str, Tuple[np.ndarray, np.ndarray]],
        step: int,
        participants: int,
        ttl_before: Optional[Mapping[str, int]],
    ) -> None:
        """Pushes the step's ``grads`` apart from any pull: without waiting for the acks when prefetching, else
        waiting (a lost server then keeps ``result`` for the step's retry)."""
        pushes = self._parts.pushes
        if self._prefetch:
            # No other worker's pull can overtake this push (one worker, or async): its acks are collected before
            # the next step's pulls, which reach each server after it anyway (calls run in submission order).
            pushes.push_async(grads, step, participants, ttl_before)
            return
        try:
            pushes.push(grads, step, participants, ttl_before)
        except RoleLost:
            result.push_seqs = self._parts.client.sent_seqs()
            self._sent = _SentStep(step, result, following)
            raise

    def _answer_again(self, sent: _SentStep) -> StepResult:
        """The retry of a step whose push already reached every live server (the lost one's part is in the push
        log, replayed to its replacement, or sent again before): pushing again would apply it twice. It still
        meets every server, as training the step again would: one lost meanwhile is noticed now."""
        parts = self._parts
        parts.servers.ping_all()
        parts.input.current = sent.following
        self._sent = None
        parts.rows.drop()
        parts.stats.steps += 1
        return sent.result
