"""Worker: trains the model on its part of the data against the parameter servers.

Its part: of the run's one stream of train batches (:func:`xdl_ec.trainer.train_batch_stream`), worker i of W takes
batches i, i + W, i + 2W, ... (one worker takes them all, in the single-process trainer's order).

One step (driven by the scheduler's loop, see :mod:`xdl_ec.ps.training`):

1. the batch was prepared in a background thread: its UNIQUE keys (sorted), the int32 ``inverse`` [B, 26] of every
   id into them, and which of them the previous batch did not touch;
2. the rows of the unique keys come from the servers (:class:`PSClient`): the part prefetched while the previous
   step computed, plus the part that had to wait for the previous step's push;
3. TF runs the model on ``xdl_ec.tf_ops.gather(rows, inverse)`` and returns the dense gradients and the
   per-unique-key summed row gradients [U, dim] (the same C++ summation as the single-process lookup's gradient);
4. while TF computes, the NEXT batch's rows that this step cannot change (keys not in this batch) are already being
   pulled, when the data allow: with one worker or in async mode. In sync mode with several workers another worker's
   push may touch any key, so the next pull waits for the step barrier (prefetch stays within the data pipeline);
5. the row gradients are pushed to their servers at the step's optimizer step number; the dense gradients go back
   to the driver with the step's answer. When no other worker can pull in between (the same cases as 4), the step
   answers without waiting for the push's acks: they are collected at the next step (or :meth:`Worker.flush`),
   so the push overlaps the driver's turnaround.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from ..data.prefetcher import Prefetcher
from ..data.schema import NUM_DENSE, NUM_SPARSE, Batch
from .backend import Handle, RoleLost
from .client import PendingRows, PSClient
from .server import TableSpec


@dataclasses.dataclass
class PreparedBatch:
    """A batch plus what the step needs from the servers: unique keys, inverse, and the keys the previous batch did
    not touch (``fresh``), which may be pulled before the previous step's push."""

    batch: Batch
    keys: np.ndarray
    inverse: np.ndarray
    fresh: np.ndarray
    pending: Optional[PendingRows] = None


def prepare_batches(batches: Iterator[Batch]) -> Iterator[PreparedBatch]:
    """Deduplicates each batch's ids and marks the keys absent from the batch before."""
    previous: Optional[np.ndarray] = None
    for b in batches:
        keys, inverse = np.unique(b.sparse.reshape(-1), return_inverse=True)
        inverse = inverse.astype(np.int32).reshape(b.sparse.shape)
        if previous is None:
            fresh = np.ones(keys.size, dtype=bool)
        else:
            fresh = np.isin(keys, previous, assume_unique=True, invert=True)
        previous = keys
        yield PreparedBatch(b, keys, inverse, fresh)


@dataclasses.dataclass
class StepResult:
    """A worker's answer to one step: its loss, samples and dense gradients (``model.trainable_variables`` order)."""

    worker: int
    loss: float
    samples: int
    dense_grads: List[np.ndarray]
    push_seqs: Optional[List[int]] = None  # the last push seq sent to each server (a driver keeps what outlives us)


class Worker:
    """Worker ``index`` of ``count``: its share of ``total_batches`` of the run's data, a copy of the dense model,
    a :class:`PSClient` over ``servers``. ``prefetch_across_steps``: pull the next batch's untouched keys during the
    current step (see the module docstring for when that is exact)."""

    def __init__(self, index: int, count: int, config: Any, servers: Sequence[Handle], table: TableSpec,
                 total_batches: int, prefetch_across_steps: bool, call_timeout: Optional[float] = None) -> None:
        from ..trainer import configure_determinism, open_training_data, train_batch_stream

        if not 0 <= index < count:
            raise ValueError(f"index: must be in [0, {count}), got {index}")
        configure_determinism(config.seed, config.deterministic)
        import tensorflow as tf

        from .dense_sync import DenseReplica

        self.index, self.count = index, count
        self.table = table
        self.prefetch_across_steps = prefetch_across_steps
        self.client = PSClient(servers, worker=index, **({} if call_timeout is None else {"timeout": call_timeout}))
        self.client.resume_seqs()  # a restarted worker continues its predecessor's push seqs (and log, under ec)
        self.dense = DenseReplica(config)
        data = open_training_data(config)
        # this worker's share of the run's batch stream, from its ``skip``-th batch on (seek)
        self._stream = lambda skip: itertools.islice(
            (b for i, b in enumerate(train_batch_stream(data, config, total_batches)) if i % count == index),
            skip, None)
        self._prepared = Prefetcher(prepare_batches(self._stream(0)), depth=2)
        self._current: Optional[PreparedBatch] = self._next()
        self._step_fn = self._make_step(tf)
        self.seconds: Dict[str, float] = {"pull_wait": 0.0, "data_wait": 0.0, "compute": 0.0, "push": 0.0}
        self.steps = 0
        self._unacked: List[Any] = []  # push futures not yet awaited (see train_step)
        self._pushed: Optional[tuple] = None  # (step, result, next batch) of a step whose push met a lost server

    def _make_step(self, tf: Any) -> Any:
        from .. import tf_ops

        model = self.dense.model

        def step(dense, rows, inverse, label):  # noqa: ANN001, ANN202 - traced by tf.function
            with tf.GradientTape() as tape:
                tape.watch(rows)
                emb = tf_ops.gather(rows, inverse)
                logits = model((dense, emb), training=True)
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logits))
            grads = tape.gradient(loss, [*model.trainable_variables, rows])
            return loss, grads[:-1], grads[-1]

        signature = [tf.TensorSpec([None, NUM_DENSE], tf.float32), tf.TensorSpec([None, self.table.dim], tf.float32),
                     tf.TensorSpec([None, NUM_SPARSE], tf.int32), tf.TensorSpec([None], tf.float32)]
        return tf.function(step, input_signature=signature)

    def _next(self) -> Optional[PreparedBatch]:
        return next(self._prepared, None)

    def _rows(self, p: PreparedBatch) -> np.ndarray:
        name, dim = self.table.name, self.table.dim
        if p.pending is None:
            return self.client.pull(name, p.keys, dim)
        rows = np.empty((p.keys.size, dim), dtype=np.float32)
        stale = ~p.fresh
        later = self.client.pull_async(name, p.keys[stale], dim) if stale.any() else None
        rows[p.fresh] = p.pending.result()
        if later is not None:
            rows[stale] = later.result()
        return rows

    def ping(self) -> int:
        return self.index

    def enable_push_log(self) -> None:
        """Keeps each push until its server reports it parity-durable (``--ft ec``), for :meth:`replay_pushes`."""
        self.client.enable_push_log()

    def replay_pushes(self, server: int, after_seq: int, handle: Optional[Handle] = None) -> int:
        """Re-sends this worker's logged pushes to (rebuilt) ``server`` above push seq ``after_seq``, in order;
        ``handle``: the server's replacement, used from now on (a prefetch from the dead one is dropped)."""
        if handle is not None:
            self.client.servers[server] = handle
            if self._current is not None:
                self._current.pending = None
        return self.client.replay(server, after_seq)

    def train_step(self, step: int, weights: Optional[Sequence[np.ndarray]], participants: int) -> Optional[StepResult]:
        """Trains this worker's next batch at optimizer ``step`` with dense ``weights`` (None: keep its own);
        None when its data are exhausted. ``participants``: pushes a server waits for at this step (sync mode)."""
        if self._pushed is not None and self._pushed[0] == step:
            # the retry of a step whose push already reached every live server (the lost one's part is in the
            # push log, replayed to its replacement): pushing again would apply it twice
            _, result, self._current = self._pushed
            self._pushed = None
            self.steps += 1
            return result
        p = self._current
        if p is None:
            return None
        if weights is not None:
            self.dense.set_weights(weights)
        t0 = time.perf_counter()
        self.flush()
        rows = self._rows(p)
        t_data = time.perf_counter()
        nxt = self._next()
        if nxt is not None and self.prefetch_across_steps and nxt.fresh.any():
            nxt.pending = self.client.pull_async(self.table.name, nxt.keys[nxt.fresh], self.table.dim)
        t1 = time.perf_counter()
        self.seconds["data_wait"] += t1 - t_data
        b = p.batch
        loss, dense_grads, row_grads = self._step_fn(b.dense, rows, p.inverse, b.label)
        row_grads = row_grads.numpy()
        dense_grads = [g.numpy() for g in dense_grads]
        t2 = time.perf_counter()
        if self.prefetch_across_steps:
            # No other worker's pull can overtake this push (one worker, or async): its acks are collected before
            # the next step's pulls, which reach each server after it anyway (calls run in submission order).
            self._unacked = self.client.push_async(self.table.name, p.keys, row_grads, step, participants)
        else:
            try:
                self.client.push(self.table.name, p.keys, row_grads, step, participants)
            except RoleLost:
                self._pushed = (step, StepResult(self.index, float(loss), len(b), dense_grads,
                                                 self.client.sent_seqs()), nxt)
                raise
        t3 = time.perf_counter()
        self._current = nxt
        self.steps += 1
        for name, seconds in (("pull_wait", t_data - t0), ("compute", t2 - t1), ("push", t3 - t2)):
            self.seconds[name] += seconds
        return StepResult(self.index, float(loss), len(b), dense_grads, self.client.sent_seqs())

    def flush(self) -> int:
        """Waits for the acks of this worker's last push (raising its failure, if any); returns how many."""
        unacked, self._unacked = self._unacked, []
        self.client.note_acks(unacked, [future.result(self.client.timeout) for future in unacked])
        return len(unacked)

    def stats(self) -> Dict[str, Any]:
        """Steps, seconds spent waiting for pulls / computing / pushing, and the client's byte counters."""
        return {"index": self.index, "steps": self.steps, **{f"{k}_seconds": v for k, v in self.seconds.items()},
                "bytes_pulled": self.client.bytes_pulled, "bytes_requested": self.client.bytes_requested,
                "bytes_pushed": self.client.bytes_pushed}

    def seek(self, batches_done: int) -> int:
        """Continues from this worker's ``batches_done``-th own batch (a restarted worker taking over its
        predecessor's reader position, or a rollback to a checkpoint); returns it."""
        if isinstance(batches_done, bool) or not isinstance(batches_done, int) or batches_done < 0:
            raise ValueError(f"batches_done: must be an int >= 0, got {batches_done!r}")
        self._unacked = []
        self._pushed = None
        self._prepared.close()
        self._prepared = Prefetcher(prepare_batches(self._stream(batches_done)), depth=2)
        self._current = self._next()
        return batches_done

    def set_server(self, index: int, handle: Handle) -> None:
        """Points this worker at a replacement of server ``index``; a prefetch from the old one is dropped."""
        if not 0 <= index < self.client.num_servers:
            raise IndexError(f"index: no server {index} (there are {self.client.num_servers})")
        self.client.servers[index] = handle
        if self._current is not None:
            self._current.pending = None  # it may hold the dead server's failed future: pull everything again

    def close(self) -> None:
        self._prepared.close()
