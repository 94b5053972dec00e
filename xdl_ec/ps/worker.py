"""Worker: trains a job's model on its own input against the parameter servers.

Its input: ``input_fn(index, count)`` of the job (an :class:`~xdl_ec.model.input_stream.InputStream`, which checks and
prepares the next batches on a background thread). One step (driven by the driver's loop, see
:mod:`xdl_ec.ps.training`):

1. the batch was prepared in the background: per table its UNIQUE keys, per feature where its ids' rows are,
   and which keys the previous batch did not touch;
2. the rows of the unique keys come from the servers (:class:`PSClient`, one request per server for every
   table): the part prefetched while the previous step computed, plus the part that had to wait for the previous
   step's push;
3. TF runs the model (:class:`~xdl_ec.model.model_step.ModelStep`) and returns the dense gradients and, per table, the
   per-unique-key summed row gradients;
4. while TF computes, the NEXT batch's rows that this step cannot change (keys not in this batch) are already being
   pulled, when the data allow: with one worker or in async mode. In sync mode with several workers another
   worker's push may touch any key, so the next pull waits for the step barrier;
5. the row gradients are pushed at the step's optimizer step number; the dense gradients go back to the driver
   with the step's answer, together with whether this worker has another batch (so the driver knows the next
   step's participants). When no other worker can pull in between (the same cases as 4), the step answers without
   waiting for the push's acks: they are collected at the next step (or :meth:`Worker.flush`).

When no other worker can come between them (the cases of 4) and the client is a :class:`PSClient` (or its
:class:`CachedClient`), 4 and 5 are ONE request per server (``combine_calls``, the default): the push of step t and
the pull of ALL of step t + 1's keys, applied in that order by the server (``ParameterServer.push_pull``, or
``push_pull_stale`` with a cache), sent as TF finishes; the rows come back
while the answer travels to the driver and its next step call comes back. One call per server and step instead of
up to three (a prefetch pull, a pull of the keys the push changed, the push).

On Ray the driver's step calls and the pulls and pushes go over direct links (:mod:`xdl_ec.ps.direct`, given the
run's ``link_secret``): the step runs on the link's thread, so every method that touches the worker's state holds
its lock (Ray runs the other calls on its own thread).

The same class trains in one process (:mod:`xdl_ec.job.local_run`), there over the tables themselves.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from xdl_ec.model.dense_model import DenseModel
from xdl_ec.model.feature_batch import FeatureBatch
from xdl_ec.model.input_stream import InputStream
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.model.model_step import ModelStep
from xdl_ec.sparse.cache_config import Cache
from xdl_ec.tf.determinism import configure_determinism, size_op_pools

from .backend import Handle, RoleLost
from .cached_client import CachedClient
from .client import PSClient
from .direct import LinkedHandle, LinkHost


def _serialised(method: Any) -> Any:
    """Runs ``method`` holding the worker's lock (a step from a direct link's thread, other calls from Ray's)."""

    @functools.wraps(method)
    def run(self: "Worker", *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return run


@dataclasses.dataclass
class StepResult:
    """A worker's answer to one step: loss, samples, dense gradients (``model.trainable_variables`` order), the
    last push seq sent to each server (what its push log covers), and whether it has another batch."""

    worker: int
    loss: float
    samples: int
    dense_grads: List[np.ndarray]
    push_seqs: Optional[List[int]] = None
    has_next: bool = True
    pending_updates: int = 0  # gradients held in this worker's caches, not yet pushed (lost if it dies)
    # progressive validation: the batch's labels and the probabilities the step gave before its update, one [B]
    # array each per head (``heads`` order; None: a model of one output)
    labels: Optional[List[np.ndarray]] = None
    probabilities: Optional[List[np.ndarray]] = None
    heads: Optional[Tuple[str, ...]] = None


@dataclasses.dataclass(frozen=True)
class DenseState:
    """A dense model's whole state (weights in ``model.trainable_variables`` order, optimizer variables): what the
    driver sends a worker that applies its own dense updates when the driver's copy is the one to go on from (a
    restarted worker, a rollback, a resumed run)."""

    weights: List[np.ndarray]
    optimizer: List[np.ndarray]


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What every process of a run sets the same way."""

    seed: int = 0
    deterministic: bool = False


class Worker(LinkHost):
    """Worker ``index`` of ``count`` of ``job``: its input, a copy of the dense model, a client over ``servers``
    (handles) or the given ``client``. ``prefetch_across_steps``: pull the next batch's untouched keys during the
    current step (see the module docstring for when that is exact)."""

    link_role = "worker"

    def __init__(
        self,
        index: int,
        count: int,
        job: JobSpec,
        settings: RunSettings,
        servers: Sequence[Handle],
        prefetch_across_steps: bool,
        call_timeout: Optional[float] = None,
        client: Any = None,
        apply_dense: bool = False,
        caches: Optional[Mapping[str, Cache]] = None,
        table_rows: Optional[Mapping[str, int]] = None,
        report_dense: bool = False,
        link_secret: Any = None,
        combine_calls: bool = True,
    ) -> None:
        """``apply_dense``: each step applies its dense gradients to this worker's model itself, inside the same
        TF call (one process; a cluster's only worker), and answers none unless ``report_dense`` (a cluster's only
        worker answers them: the driver logs them, see :mod:`xdl_ec.ps.dense_sync`). ``caches``: {table: Cache},
        the worker's embedding caches (:mod:`xdl_ec.ps.cached_client`), sized by ``table_rows`` for "P%" ones.
        ``link_secret``: the run's JobSecret: pulls and pushes go over direct links to the servers (Ray handles).
        ``combine_calls``: with prefetching, a step's push and the next step's pull in one request per server."""
        self._lock = threading.RLock()
        if not 0 <= index < count:
            raise ValueError(f"index: must be in [0, {count}), got {index}")
        configure_determinism(settings.seed, settings.deterministic)
        self.index, self.count, self.job, self.settings = index, count, job, settings
        self.prefetch_across_steps, self.apply_dense = prefetch_across_steps, apply_dense
        self.report_dense = report_dense
        self.link_secret = link_secret
        if client is None:
            servers = [self._linked(h) for h in servers]
            client = (
                PSClient(servers, worker=index)
                if call_timeout is None
                else PSClient(servers, worker=index, timeout=call_timeout)
            )
            client.resume_seqs()  # a restarted worker continues its predecessor's push seqs (and log, under ec)
            if caches:
                client = CachedClient(client, caches, {t.name: t.dim for t in job.tables}, table_rows)
        self.client = client
        self.combine_calls = combine_calls and prefetch_across_steps and type(client) in (PSClient, CachedClient)
        self._last_step = 0
        self._dims = {t.name: t.dim for t in job.tables}
        self._stream = InputStream(
            job.input_fn,
            index,
            count,
            job.features,
            # one worker combining calls pulls every key of a batch with the push before it: no fresh keys to know
            track_fresh=prefetch_across_steps and not (self.combine_calls and count == 1),
            inputs=job.inputs,
            heads=job.heads,
        )
        self._current: Optional[FeatureBatch] = self._stream.next()
        if self._current is not None:  # TF's pools are sized by the step (before the model's first op, if it can)
            size_op_pools(settings.deterministic, len(self._current))
        self._pending: Any = None  # the prefetched rows of _current's fresh keys
        self._step: Optional[ModelStep] = None
        self.dense: Optional[DenseModel] = None
        if self._current is not None:
            self._build(self._current.signature())
        # wall seconds per phase of train_step; "in_step": the whole call (dense weights set included)
        self.seconds: Dict[str, float] = {
            "set_weights": 0.0,
            "pull_wait": 0.0,
            "data_wait": 0.0,
            "compute": 0.0,
            "push": 0.0,
            "in_step": 0.0,
        }
        self.steps = 0
        self._unacked: List[Any] = []  # push futures not yet awaited (see train_step)
        self._resend: List[Tuple[int, tuple]] = []  # (server, push) lost with its server, for its replacement
        self._pushed: Optional[tuple] = None  # (step, result, next batch) of a step whose push met a lost server

    def _build(self, signature: Tuple[Any, ...]) -> None:
        self._signature = signature
        job = self.job
        self.dense = DenseModel(
            job.model_fn,
            job.dense_optimizer,
            job.dense_learning_rate,
            signature,
            job.dims(),
            job.combiners(),
            self.settings.seed,
        )
        self._step = ModelStep.of(job, self.dense, signature, apply=self.apply_dense, return_dense=self.report_dense)

    @property
    def built_dense(self) -> DenseModel:
        """The dense model, built with the first batch (its shapes fix the model's)."""
        if self.dense is None:
            raise RuntimeError(f"worker {self.index}: its model is built with its first batch, and it has had none")
        return self.dense

    @property
    def built_step(self) -> ModelStep:
        if self._step is None:
            raise RuntimeError(f"worker {self.index}: its step is built with its first batch, and it has had none")
        return self._step

    def _linked(self, handle: Handle) -> Handle:
        """``handle`` with its pulls and pushes over a direct link (on Ray, given the run's secret)."""
        if self.link_secret is None or not hasattr(handle, "actor"):
            return handle
        return LinkedHandle(handle, self.link_secret, self.index)

    def ping(self) -> int:
        return self.index

    def batch_signature_built(self) -> Optional[Tuple[Any, ...]]:
        """The batch signature this worker's model and step were built for."""
        return getattr(self, "_signature", None)

    @_serialised
    def batch_signature(self) -> Optional[Tuple[Any, ...]]:
        """The shapes of this worker's batches (None when its input is empty): the driver builds its model so."""
        return None if self._current is None else self._current.signature()

    def _rows(self, batch: FeatureBatch, pending: Any) -> Dict[str, np.ndarray]:
        requests = {t: (keys, self._dims[t]) for t, keys in batch.keys.items()}
        if pending is None:
            return self.client.pull(requests)
        if isinstance(pending, _AllRows):  # every key's rows, pulled with the previous step's push
            return pending.rows.result()
        stale = {t: (keys[~batch.fresh[t]], self._dims[t]) for t, keys in batch.keys.items() if (~batch.fresh[t]).any()}
        later = self.client.pull_async(stale) if stale else None
        fresh_rows = pending.result()
        later_rows = later.result() if later is not None else {}
        rows = {}
        for t, keys in batch.keys.items():
            table_rows = np.empty((keys.size, self._dims[t]), dtype=np.float32)
            if batch.fresh[t].any():
                table_rows[batch.fresh[t]] = fresh_rows[t]
            if t in later_rows:
                table_rows[~batch.fresh[t]] = later_rows[t]
            rows[t] = table_rows
        return rows

    @_serialised
    def train_step(
        self,
        step: int,
        weights: Optional[Sequence[np.ndarray]],
        participants: int,
        more: bool = True,
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> Optional[StepResult]:
        """Trains this worker's next batch at optimizer ``step`` with dense ``weights`` (None: keep its own; a
        :class:`DenseState`: load it whole first); None when its input is exhausted. ``participants``: pushes a
        server waits for at this step (sync mode). ``more``: another step may follow in this fit, so the next
        batch's rows may be prefetched (a pull inserts rows: the last step of a fit prefetches nothing, so a run
        that stops early holds only rows it trained). ``ttl_before``: {table: cutoff} of the tables whose
        ``Evict(ttl_seconds)`` pass ends this step's push (the driver's :class:`~xdl_ec.ps.step_times.StepTimes`),
        sent with the push."""
        start = time.perf_counter()
        try:
            return self._train_step(step, weights, participants, more, ttl_before)
        except RoleLost:
            self._pending = None  # rows in flight may come from the lost server: the retry pulls them all
            raise
        finally:
            self.seconds["in_step"] += time.perf_counter() - start

    def _train_step(
        self,
        step: int,
        weights: Optional[Sequence[np.ndarray]],
        participants: int,
        more: bool,
        ttl_before: Optional[Mapping[str, int]],
    ) -> Optional[StepResult]:
        self._resend_lost()
        if self._pushed is not None and self._pushed[0] == step:
            # the retry of a step whose push already reached every live server (the lost one's part is in the
            # push log, replayed to its replacement, or sent again above): pushing again would apply it twice. It
            # still meets every server, as training the step again would: one lost meanwhile is noticed now.
            self._ping_servers()
            _, result, self._current = self._pushed
            self._pushed = None
            self._pending = None
            self.steps += 1
            return result
        batch = self._current
        if batch is None:
            return None
        tw = time.perf_counter()
        if isinstance(weights, DenseState):
            self.load_dense(weights)
        elif weights is not None:
            self.built_dense.set_weights(weights)
        t0 = time.perf_counter()
        self.seconds["set_weights"] += t0 - tw
        self.flush()
        rows = self._rows(batch, self._pending)
        t_data = time.perf_counter()
        nxt = self._stream.next()
        next_pending = None
        if nxt is not None and nxt.signature() != batch.signature():
            self.built_step._inputs(nxt, {})  # raises the clear shape-mismatch error before anything is applied
        combine = self.combine_calls and participants == 1 and nxt is not None and more
        if nxt is not None and self.prefetch_across_steps and more and not combine:
            fresh = {t: (keys[nxt.fresh[t]], self._dims[t]) for t, keys in nxt.keys.items() if nxt.fresh[t].any()}
            next_pending = self.client.pull_async(fresh) if fresh else _NoRows()
        t1 = time.perf_counter()
        self.seconds["data_wait"] += t1 - t_data
        loss, dense_grads, row_grads, probs = self.built_step.train_scored(batch, rows)
        t2 = time.perf_counter()
        grads = {t: (batch.keys[t], g) for t, g in row_grads.items()}
        heads = self.built_step.heads
        result = StepResult(
            self.index,
            loss,
            len(batch),
            dense_grads,
            None,
            nxt is not None,
            labels=[batch.labels_of(h) for h in (heads or (None,))],
            probabilities=probs,
            heads=None if heads is None else tuple(heads),
        )
        self._last_step = step
        if combine and nxt is not None:  # (combine implies a next batch)
            # the push and the next batch's rows in one request per server, applied in that order there. Sent
            # before the step answers: a worker that dies after answering has sent its push (the driver counts it)
            requests = {t: (keys, self._dims[t]) for t, keys in nxt.keys.items()}
            self._unacked, rows_next = self.client.push_pull_async(grads, step, requests, ttl_before)
            next_pending = _AllRows(rows_next)
        elif self.prefetch_across_steps:
            # No other worker's pull can overtake this push (one worker, or async): its acks are collected before
            # the next step's pulls, which reach each server after it anyway (calls run in submission order).
            self._unacked = self.client.push_async(grads, step, participants, ttl_before)
        else:
            try:
                self.client.push(grads, step, participants, ttl_before)
            except RoleLost:
                result.push_seqs = self.client.sent_seqs()
                self._pushed = (step, result, nxt)
                raise
        result.push_seqs = self.client.sent_seqs()
        if self.prefetch_across_steps and self.count == 1 and any(_failed(f) for f in self._unacked):
            # a server known dead already (a call to it failed at once): this step fails here, as it would have
            # waiting for the push, and its retry answers this result without training again (a cluster's only
            # worker gets the retry, at the same step; with several async workers another may get that step
            # number, so there the failure surfaces with the next step's acks, before it trains)
            self._pushed = (step, result, nxt)
            self._settle_acks()
        if isinstance(self.client, CachedClient):
            result.pending_updates = self.client.pending_updates()
        t3 = time.perf_counter()
        self._current, self._pending = nxt, next_pending
        self.steps += 1
        for name, seconds in (("pull_wait", t_data - t0), ("compute", t2 - t1), ("push", t3 - t2)):
            self.seconds[name] += seconds
        return result

    @_serialised
    def load_dense(self, state: DenseState) -> None:
        """Takes ``state`` as this worker's dense model (weights and optimizer variables)."""
        self.built_dense.load_state(state.weights, state.optimizer)

    @_serialised
    def dense_state(self) -> Tuple[List[np.ndarray], List[np.ndarray], int]:
        """(weights, optimizer variables, optimizer iterations) of this worker's dense model: a worker that applies
        its own dense updates hands the driver its state (see :mod:`xdl_ec.ps.dense_sync`)."""
        weights, variables = self.built_dense.state()
        return weights, variables, int(self.built_dense.optimizer.iterations.numpy())

    @_serialised
    def call_latency(self, calls: int, direct: bool = True) -> float:
        """Mean seconds of an empty call (a ping) from this worker to a server, ``calls`` rounds over every server
        one call at a time, over the path pulls and pushes take (``direct``) or through the backend's handle
        (bench/bench_ray_step.py)."""
        from .api import ServerAPI
        from .direct import unlinked
        from .remote import Remote

        client = getattr(self.client, "client", self.client)  # a CachedClient's PSClient
        start = time.perf_counter()
        for _ in range(calls):
            for server in range(client.num_servers):
                handle = client.servers[server] if direct else unlinked(client.servers[server])
                Remote(handle, ServerAPI).ping().result(client.timeout)
        return (time.perf_counter() - start) / max(calls * client.num_servers, 1)

    def _settle_acks(self) -> None:
        """Waits for every ack in flight, then raises the first server loss among them (after noting the rest; a
        lost server's push is sent again to its replacement before this worker's next push)."""
        unacked, self._unacked = self._unacked, []
        answered, acks, lost = [], [], []
        for future in unacked:
            try:
                acks.append(future.result(self.client.timeout))
                answered.append(future)
            except RoleLost as err:
                lost.append(err)
                self._stash_resend(future)
        self.client.note_acks(answered, acks)
        if lost:
            raise lost[0]

    def _ping_servers(self) -> None:
        plain = getattr(self.client, "client", self.client)
        futures = [plain.server(i).ping() for i in range(plain.num_servers)]
        for future in futures:
            future.result(plain.timeout)

    def _stash_resend(self, future: Any) -> None:
        sent = getattr(future, "sent", None)
        if sent is not None:
            self._resend.append((future.server, sent))

    def _resend_lost(self) -> None:
        """Sends again, in order, the pushes whose server was lost before acknowledging them (a recovery replaced
        it, or reloaded it: the server applies only the parts its state lacks, by seq). A strategy that replays
        push logs (ec) has sent them already; one that reloads a checkpoint (cpr) has not."""
        plain = getattr(self.client, "client", self.client)
        while self._resend:
            server, sent = self._resend[0]
            future = plain.resend(server, sent)
            self.client.note_acks([future], [future.result(self.client.timeout)])
            self._resend.pop(0)

    @_serialised
    def flush(self, write_back: bool = False) -> int:
        """Waits for the acks of this worker's last push (raising its failure, if any); returns how many.
        ``write_back``: first push every gradient its caches hold (the driver's quiesce: saves, checkpoints, the
        end of a run see every update)."""
        self._resend_lost()
        if write_back and isinstance(self.client, CachedClient):
            self._unacked += self.client.write_back(self._last_step)
        count = len(self._unacked)
        self._settle_acks()
        return count

    @_serialised
    def predict(self, batch: FeatureBatch, rows: Dict[str, np.ndarray]) -> Union[np.ndarray, Dict[str, np.ndarray]]:
        return self.built_step.predict(batch, rows)

    @_serialised
    def stats(self) -> Dict[str, Any]:
        """Steps, seconds spent waiting for pulls / computing / pushing, and the client's byte counters."""
        out = {
            "index": self.index,
            "steps": self.steps,
            **{f"{k}_seconds": v for k, v in self.seconds.items()},
            "bytes_pulled": self.client.bytes_pulled,
            "bytes_requested": self.client.bytes_requested,
            "bytes_pushed": self.client.bytes_pushed,
            "input": self._stream.stats(),
        }
        if isinstance(self.client, CachedClient):
            out["cache"] = self.client.cache_stats()
        return out

    @property
    def position(self) -> int:
        """Batches of this worker's input trained so far (its reader position)."""
        return self._stream.position - (1 if self._current is not None else 0)

    @_serialised
    def input_position(self) -> Optional[Any]:
        """The input's own position after the batches trained (:attr:`position`), for a save; None when the input
        does not know it (then a resume skips batches)."""
        return self._stream.input_position(self.position)

    @_serialised
    def seek(self, position: int, state: Optional[Any] = None) -> bool:
        """Continues from this worker's ``position``-th batch (a restarted worker taking over its predecessor's
        reader position, or a rollback; ``state``: the input's own position there, from a save); returns whether a
        batch is left."""
        self._unacked = []
        self._resend = []  # rolled back: those steps are trained (and pushed) again
        self._pushed = None
        self._pending = None
        if isinstance(self.client, CachedClient):
            self.client.drop_pending()  # their steps are trained again
        self._stream.seek(position, state)
        self._current = self._stream.next()
        if self._current is not None and self._step is None:
            self._build(self._current.signature())
        return self._current is not None

    @_serialised
    def set_server(self, index: int, handle: Handle) -> None:
        """Points this worker at a replacement of server ``index``; a prefetch from the old one is dropped."""
        if not 0 <= index < self.client.num_servers:
            raise IndexError(f"index: no server {index} (there are {self.client.num_servers})")
        old, self.client.servers[index] = self.client.servers[index], self._linked(handle)
        if isinstance(old, LinkedHandle):
            old.close()
        self._pending = None  # it may hold the dead server's failed future: pull everything again
        # acks still awaited from the dead server (a push answered after its step) say nothing about the new one:
        # their pushes are sent to it again before this worker's next push (applied only if its state lacks them)
        plain = getattr(self.client, "client", self.client)
        plain.drop_acks(index)
        kept = []
        for future in self._unacked:
            if getattr(future, "server", None) == index:
                self._stash_resend(future)
            else:
                kept.append(future)
        self._unacked = kept

    @_serialised
    def settle_pulls(self) -> None:
        """Waits for this worker's pulls in flight (a prefetch of the next batch's rows): before the servers' rows
        move (:mod:`xdl_ec.ps.resize`), every row a pull inserts must be in place. The rows stay valid for the next
        step: a move changes where rows live, not what they hold."""
        pending = self._pending.rows if isinstance(self._pending, _AllRows) else self._pending
        if pending is not None:
            pending.result()

    @_serialised
    def set_servers(
        self,
        handles: Sequence[Handle],
        kept: Optional[int] = None,
        server_ids: Optional[Sequence[int]] = None,
        origin: Optional[Sequence[int]] = None,
    ) -> None:
        """Points this worker at a resized cluster's servers (``handles``: servers 0..len-1, the first ``kept`` or
        those ``origin`` names the same as before, ``server_ids`` their stable ids, see PSClient.set_servers);
        called with nothing in flight (after :meth:`flush` and :meth:`settle_pulls`); a worker's caches start empty on
        the new layout (:meth:`CachedClient.set_servers`)."""
        if self._unacked:
            raise ValueError("set_servers: pushes are still unacknowledged; flush first")
        old = list(self.client.servers)
        new: List[Handle] = []
        for i, handle in enumerate(handles):  # a kept server keeps its link
            j = i if origin is None else int(origin[i])
            same = 0 <= j < len(old) and (old[j] is handle or getattr(old[j], "handle", None) is handle)
            new.append(old[j] if same else self._linked(handle))
        self.client.set_servers(new, kept, server_ids, origin)
        for handle in old:
            if isinstance(handle, LinkedHandle) and not any(handle is h for h in new):
                handle.close()

    @_serialised
    def enable_push_log(self) -> None:
        """Keeps each push until its server reports it durable (``--ft ec``), for :meth:`replay_pushes`."""
        self.client.enable_push_log()

    @_serialised
    def replay_pushes(self, server: int, after_seq: int, handle: Optional[Handle] = None) -> int:
        """Re-sends this worker's logged pushes to (rebuilt) ``server`` above push seq ``after_seq``, in order;
        ``handle``: the server's replacement, used from now on (a prefetch from the dead one is dropped)."""
        if handle is not None:
            self.set_server(server, handle)
        return self.client.replay(server, after_seq)

    def close(self) -> None:
        self._stream.close()
        self.close_links()
        for handle in getattr(getattr(self.client, "client", self.client), "servers", []):
            if isinstance(handle, LinkedHandle):
                handle.close()


def _failed(future: Any) -> bool:
    """Whether ``future`` already failed (a call to a role known dead fails at once)."""
    if not future.done():
        return False
    try:
        future.result(0)
    except RoleLost:
        return True
    except Exception:  # noqa: BLE001 - any other error surfaces where the ack is awaited
        return False
    return False


class _AllRows:
    """The rows of every key of a batch, in flight with the previous step's push (``combine_calls``)."""

    __slots__ = ("rows",)

    def __init__(self, rows: Any) -> None:
        self.rows = rows


class _NoRows:
    """A prefetch of nothing (every key of the next batch was in this one)."""

    def result(self) -> Dict[str, np.ndarray]:
        return {}
