"""PSTrainer: the driver of a parameter-server run of a job (``job.fit(cluster=...)``, ``xdl-ec train --servers``).

It starts the scheduler (servers holding the job's tables), the workers (each with the job's model and its own
input) and the authoritative dense model, runs the step loop (:mod:`~xdl_ec.ps.sync_loop` or
:mod:`~xdl_ec.ps.async_loop`) and reports.

Fault tolerance goes through one seam, a :class:`~xdl_ec.ps.fault_tolerance.FaultTolerance` (default ``none``),
which sees the cluster through a :class:`~xdl_ec.ps.cluster_view.ClusterView`: ``attach`` once the cluster is up,
``after_step`` at every step boundary with no push in flight, and on a role death confirmed by the scheduler the
:class:`~xdl_ec.ps.recovery_coordinator.RecoveryCoordinator`. A failed step is first drained (every call of it
answered or failed) so no push is in flight during a recovery. An optional
:class:`~xdl_ec.ps.fault_injector.FaultInjector` kills roles for real at step boundaries. Calls have timeouts, so
nothing waits forever.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

from xdl_ec.model.dense_model import DenseModel
from xdl_ec.model.digest import model_digest
from xdl_ec.model.evaluation import evaluate_batches
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.model.model_step import ModelStep
from xdl_ec.model.progressive import ProgressiveWindow
from xdl_ec.settings import checks
from xdl_ec.sparse.cache_config import Cache
from xdl_ec.sparse.row_rules import merged_reports

from .api import ServerAPI, WorkerAPI
from .async_loop import run_async
from .backend import DEFAULT_TIMEOUT, CallTimeout, RoleLost, make_backend
from .cached_client import merged_cache_stats
from .client import PSClient
from .cluster_view import ClusterView
from .dense_sync import DriverDense
from .direct import BesideLinkedHandle, LinkedHandle
from .fault_tolerance import FaultTolerance, NoFaultTolerance
from .placement import check_failure_domain, plan_placement
from .progress import Progress
from .recovery_coordinator import RecoveryCoordinator
from .remote import Remote
from .scheduler import Scheduler
from .step_stages import StageClock
from .step_times import StepTimes
from .sync_loop import run_sync
from .worker import RunSettings, StepResult, Worker

MODES = ("sync", "async")
BACKENDS = ("local", "ray")
LAST_LOSSES = 50  # final_loss: mean training loss over this many last steps


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """Where a job runs: servers, workers, backend (+ Ray address), mode, call timeout, failure domain ("node",
    "none", None: "node" for erasure-coded servers on a Ray cluster of several nodes; see
    :mod:`xdl_ec.ps.placement`). Checked on creation."""

    servers: int = 1
    workers: int = 1
    backend: str = "local"
    address: Optional[str] = None
    mode: str = "sync"
    call_timeout: float = DEFAULT_TIMEOUT
    failure_domain: Optional[str] = None

    def __post_init__(self) -> None:
        checks.positive_int("servers", self.servers)
        checks.positive_int("workers", self.workers)
        checks.one_of("backend", self.backend, BACKENDS)
        if self.address is not None and self.backend != "ray":
            raise ValueError("address: a Ray address needs backend='ray'")
        checks.one_of("mode", self.mode, MODES)
        checks.positive_number("call_timeout", self.call_timeout)
        check_failure_domain(self.failure_domain, self.backend)


class PSTrainer:
    """Trains ``job`` on ``cluster``; :meth:`fit` trains, :meth:`run` trains, evaluates, reports and shuts down."""

    worker_class = Worker

    def __init__(
        self,
        job: JobSpec,
        cluster: ClusterConfig,
        settings: RunSettings = RunSettings(),
        strategy: Optional[FaultTolerance] = None,
        injector: Any = None,
        progress: bool = False,
        caches: Optional[Dict[str, Cache]] = None,
    ) -> None:
        """``caches``: {table: Cache}, the workers' embedding caches (:mod:`xdl_ec.ps.cached_client`)."""
        checks.instance("job", job, JobSpec)
        checks.instance("cluster", cluster, ClusterConfig)
        strategy = NoFaultTolerance() if strategy is None else strategy
        checks.instance("strategy", strategy, FaultTolerance)
        self.job, self.cluster, self.settings = job, cluster, settings
        self.caches: Dict[str, Cache] = dict(caches or {})
        for name, cache in self.caches.items():
            checks.instance(f"caches[{name!r}]", cache, Cache)
            cache.check_memory(
                name, {t.name: t.dim for t in job.tables}[name], cluster.workers if cluster.backend == "local" else 1
            )
        self.pending_updates = [0] * cluster.workers  # per worker, as of its last answered step
        self._restored_samples = 0  # samples a resumed run's save had trained
        self.strategy, self.injector, self.progress = strategy, injector, progress
        self.step = 0
        self.step_times = StepTimes(job.tables)  # the wall time of Evict(ttl_seconds) passes
        self.samples = 0  # samples trained so far (re-trained ones after a rollback included)
        self.worker_batches = [0] * cluster.workers  # reader position: batches each worker has trained
        self.worker_samples = [0] * cluster.workers
        self.has_next = [False] * cluster.workers
        # each worker's last push seq sent to each server, as of its last answered step: what a worker's push log
        # covered when it died (--ft ec checks that a rebuilt server lost none of a dead worker's pushes)
        self.push_seqs: List[Optional[List[int]]] = [None] * cluster.workers
        self.unlogged_push_seqs: List[Optional[List[int]]] = [None] * cluster.workers  # of restarted predecessors
        self.total_steps: Optional[int] = None
        self.losses: List[float] = []
        # progressive validation over the steps this process drove (re-trained ones after a rollback included)
        self.progressive = ProgressiveWindow()
        self.timeline: List[List[float]] = []
        # the driver's seconds per part of its loop (sync mode): "call" (step calls sent until every answer is
        # in), "dense" (weights read, gradients applied), "boundary" (bookkeeping, after_step); dense_bytes:
        # dense arrays carried by step calls and answers (bench/bench_ray_step.py)
        self.loop_seconds: Dict[str, float] = {"call": 0.0, "dense": 0.0, "boundary": 0.0}
        self.dense_bytes = 0
        self._train_start: Optional[float] = None
        self._fit_start = 0.0
        self._first_step_end: Optional[float] = None  # when this fit's first step ended, and its samples then
        self._first_samples = 0
        self._fit_samples = 0  # samples before this fit
        self._recovery = RecoveryCoordinator(self)
        # at step boundaries with no push in flight, after the strategy: each hook's after_step(trainer) (the job
        # layer's RunSaver and Backstop); async mode holds new steps while a hook's due(step) is True
        self.hooks: List[Any] = []
        self.backend = make_backend(cluster.backend, cluster.address)
        # on Ray the step's data path (pulls, pushes, step calls) goes over direct links proven with this run's
        # secret (xdl_ec.ps.direct); Ray keeps placement, liveness and control
        self.link_secret = None
        if cluster.backend == "ray":
            from xdl_ec.net.job_secret import JobSecret

            self.link_secret = JobSecret.generate()
        self._linked: Dict[int, LinkedHandle] = {}
        self._beside: Dict[int, BesideLinkedHandle] = {}
        self._beside_lock = threading.Lock()  # the ec rebuild's thread asks for them beside the driver's
        try:
            # a hot spare where starting a server is slow (a Ray process) and a strategy replaces lost servers
            spares = 1 if cluster.backend == "ray" and not isinstance(strategy, NoFaultTolerance) else 0
            # before any server starts: a placement the nodes cannot satisfy is an error now
            placement = plan_placement(self.backend, cluster.failure_domain, cluster.servers, strategy.stripe_code)
            self.scheduler = Scheduler(self.backend, cluster.servers, job.tables, spares=spares, placement=placement)
            self.backend.share_code([job.model_fn, job.input_fn, job.loss, job.eval_fn])
            self.workers = self.scheduler.start_workers(cluster.workers, self.worker_class, self.worker_args)
            # workers build their models and read their first batch: wait for them before the clock starts
            signatures = [
                self.result(self.worker(i).batch_signature(), timeout=max(cluster.call_timeout, 120.0))
                for i in range(cluster.workers)
            ]
            self.has_next = [s is not None for s in signatures]
            known = [s for s in signatures if s is not None]
            if not known:
                raise ValueError("input_fn: no worker got a batch (every worker's input is empty)")
            if any(s != known[0] for s in known):
                raise ValueError(f"input_fn: workers' batches differ in their features' shapes: {signatures}")
            model = DenseModel(
                job.model_fn,
                job.dense_optimizer,
                job.dense_learning_rate,
                known[0],
                job.dims(),
                job.combiners(),
                settings.seed,
            )
            # the driver's dense state; a single worker applies its own updates (see xdl_ec.ps.dense_sync)
            self._dense = DriverDense(model, self.worker_applies_dense, self._worker_dense_state)
            self.signature = known[0]
            self._predict = ModelStep.of(job, model, known[0])
            self.client = PSClient(self.scheduler.servers, worker=cluster.workers, timeout=cluster.call_timeout)
            self.view = ClusterView(self)
            self.strategy.attach(self.view)
        except BaseException:
            self.backend.shutdown()
            raise

    @property
    def worker_applies_dense(self) -> bool:
        """A cluster's only worker applies its own dense updates (see :mod:`xdl_ec.ps.dense_sync`)."""
        return self.cluster.workers == 1

    def worker_args(self, index: int) -> tuple:
        prefetch = self.cluster.workers == 1 or self.cluster.mode == "async"
        applies = self.worker_applies_dense
        return (
            index,
            self.cluster.workers,
            self.job,
            self.settings,
            list(self.scheduler.servers),
            prefetch,
            self.cluster.call_timeout,
            None,
            applies,
            self.caches,
            self.table_rows(),
            applies,
            self.link_secret,
        )

    # ---- the dense model (see xdl_ec.ps.dense_sync) -----------------------------------------------------------
    @property
    def dense(self) -> DenseModel:
        """The authoritative dense model, up to date; taken to be changed (a worker applying its own dense updates
        gets it whole with its next step)."""
        return self._dense.take()

    def _worker_dense_state(self) -> Optional[tuple]:
        """The only worker's dense state (weights, optimizer variables, iterations), None when it cannot answer."""
        if ("worker", 0) in self.scheduler.dead:
            return None
        try:
            return self.result(self.worker(0).dense_state())
        except (RoleLost, CallTimeout):
            return None

    def table_rows(self) -> Dict[str, int]:
        """Rows of each table over every server now (the first size of "P%" worker caches; the servers' answers to
        their pulls tell them the rest); {} without such a cache."""
        if not any(c.share is not None for c in self.caches.values()):
            return {}
        rows: Dict[str, int] = {}
        for stats in self.scheduler.server_stats():
            for table, n in stats["rows"].items():
                rows[table] = rows.get(table, 0) + int(n)
        return rows

    def worker(self, index: int) -> Remote:
        """Worker ``index``'s calls: its steps over a direct link on Ray, everything else through its handle."""
        handle = self.workers[index]
        if self.link_secret is not None:
            linked = self._linked.get(index)
            if linked is None or linked.handle is not handle:
                if linked is not None:
                    linked.close()
                linked = self._linked[index] = LinkedHandle(handle, self.link_secret)
            handle = linked
        return Remote(handle, WorkerAPI)

    def server_beside(self, index: int) -> Any:
        """Server ``index``'s handle for calls beside its others (the ec rebuild's): on Ray over a direct link of
        their own (:class:`~xdl_ec.ps.direct.BesideLinkedHandle`), elsewhere the handle itself."""
        handle = self.scheduler.servers[index]
        if self.link_secret is None:
            return handle
        with self._beside_lock:
            linked = self._beside.get(index)
            if linked is None or linked.handle is not handle:  # a replacement: a link to the new process
                if linked is not None:
                    linked.close()
                linked = self._beside[index] = BesideLinkedHandle(handle, self.link_secret)
            return linked

    def live_workers(self) -> List[Any]:
        """The workers' handles, None for those the scheduler knows dead (restarted by the driver later)."""
        return [None if ("worker", w.index) in self.scheduler.dead else w for w in self.workers]

    # ---- calls and failures -----------------------------------------------------------------------------
    def result(self, future: Any, timeout: Optional[float] = None) -> Any:
        """``future.result`` with failures confirmed by the scheduler: a dead role raises its RoleLost; a role that
        answers pings but not this call within ``timeout`` (the cluster's call timeout) is stuck, and its
        CallTimeout, naming role, method and seconds, stops the run instead of waiting forever."""
        timeout = self.cluster.call_timeout if timeout is None else timeout
        try:
            return future.result(timeout)
        except (RoleLost, CallTimeout) as err:
            lost = self.scheduler.confirm_failure(err)
            if lost is not None:
                raise lost from None
            raise  # a stuck role, or an error from inside the call (e.g. a worker's own timeout): not a death

    def drain(self, futures: Sequence[Any]) -> tuple:
        """Waits for every future: (results or None per future, confirmed RoleLost errors)."""
        results: List[Any] = []
        lost: List[RoleLost] = []
        for future in futures:
            try:
                results.append(self.result(future))
            except RoleLost as err:
                results.append(None)
                lost.append(err)
        return results, lost

    def quiesce(self, settle: bool = True) -> None:
        """Waits until every push sent so far is applied (a worker may answer a step before its push's acks, see
        :mod:`xdl_ec.ps.worker`): before reading or saving server state, or before killing a role. ``settle``:
        also complete the strategy's own calls in flight (a backstop's cut reads only the shards: it skips that)."""
        _, lost = self.drain([self.worker(i).flush(True) for i, w in enumerate(self.live_workers()) if w is not None])
        if lost:
            raise lost[0]
        if settle:
            self.strategy.settle()

    # ---- saving and resuming (see xdl_ec.keep.run_saver) ---------------------------------------------------------
    def save_tables(self, pending: Any) -> int:
        """Every server writes its tables into the pending save (in parallel); returns the bytes written. The
        strategy's rebuild, if one is under way, completes first: a save reads every server whole."""
        self.strategy.finish_rebuild()
        servers = self.scheduler.servers
        written, lost = self.drain(
            [Remote(s, ServerAPI).save(str(pending.server_dir(i)), pending.step) for i, s in enumerate(servers)]
        )
        if lost:
            raise lost[0]
        return int(sum(written))

    def dense_state(self) -> tuple:
        return self._dense.current().state()

    def restore(self, saved: Any) -> None:
        """Continues ``saved`` (a :class:`~xdl_ec.keep.saved_run.SavedRun` checked against this job by the caller):
        its rows routed to this cluster's servers (any server count) through their agents, the dense state, the
        step and every worker's reader position; then the strategy takes its own copy (``resumed``)."""
        saved.check_run(self.cluster.workers)
        servers = self.scheduler.servers
        for table in self.job.tables:
            routed = saved.routed_rows(table.name, len(servers))
            _, lost = self.drain(
                [Remote(servers[i], ServerAPI).load_rows(table.name, rows) for i, rows in routed.items()]
            )
            if lost:
                raise lost[0]
        self.dense.load_state(*saved.dense_state())
        self.step = saved.step
        self.step_times.resume(saved.step)
        self.samples = self._restored_samples = saved.samples
        self.worker_batches = saved.worker_batches
        self.worker_samples = saved.worker_samples
        answers, lost = self.drain(
            [
                self.worker(i).seek(n, state)
                for i, (n, state) in enumerate(zip(self.worker_batches, saved.worker_inputs))
            ]
        )
        if lost:
            raise lost[0]
        self.has_next = [bool(a) for a in answers]
        self.quiesce()
        self.strategy.resumed(self.step)

    def take_changes(self, full: bool) -> List[Dict[str, Any]]:
        """Every server's rows changed since its previous cut (or all of them), for an incremental backstop."""
        changes, lost = self.drain([Remote(s, ServerAPI).take_changes(full) for s in self.scheduler.servers])
        if lost:
            raise lost[0]
        return changes

    def after_step(self, step: int) -> None:
        """A step boundary with no push in flight: the strategy's, then the hooks' (periodic saves)."""
        self.strategy.after_step(step)
        for hook in self.hooks:
            hook.after_step(self)

    def wants_boundary(self, step: int) -> bool:
        """Async mode: hold new steps until none is in flight, so :meth:`after_step` comes."""
        return self.strategy.wants_boundary(step) or any(hook.due(step) for hook in self.hooks)

    def recover(self, lost: List[RoleLost], step: int) -> bool:
        return self._recovery.recover(lost, step)

    def at_boundary(self, action: Any) -> bool:
        """Runs ``action()`` at a step boundary (``after_step``, the end of a fit's quiesce). A worker's push may
        meet a dead server after its step answered (acks are collected later), so the loss may surface here: it is
        recovered as a failed step's would be and ``action`` run again. True when the recovery rolled training
        back (the loop then trains again from there)."""
        while True:
            try:
                action()
                return False
            except RoleLost as err:
                confirmed = self.scheduler.confirm_failure(err)
                if confirmed is None:
                    raise
                if self.recover([confirmed], self.step):
                    return True

    def ttl_before(self, step: int) -> Optional[Dict[str, int]]:
        """{table: cutoff} of the Evict(ttl_seconds) passes that end ``step``'s pushes, for its workers (noting the
        step's start time the first time it is asked: a retried or replayed step keeps its first cutoffs)."""
        return self.step_times.start(step)

    def before_step(self, step: int) -> None:
        if self.injector is not None:
            elapsed = 0.0 if self._train_start is None else time.perf_counter() - self._train_start
            self.injector.before_step(self.view, step, elapsed)

    def detect_seconds(self, role: str, index: int) -> float:
        """Seconds from the death of (role, index) to now: from its injected kill, else from the death the backend
        recorded (a kill from outside the job, on Ray), else 0.0 (unknown)."""
        injected = 0.0 if self.injector is None else self.injector.detect_seconds(role, index)
        if injected:
            return injected
        handles = self.scheduler.servers if role == "server" else self.workers
        since = self.backend.seconds_since_death(handles[index]) if 0 <= index < len(handles) else None
        return 0.0 if since is None else since

    def replace_server(self, index: int) -> Any:
        """Starts a fresh, empty server ``index`` in place of a dead one and points the workers and the driver's
        client at it; returns its handle (the strategy rebuilds its state)."""
        handle = self.scheduler.replace_server(index)
        self.client.servers[index] = handle
        workers = self.live_workers()
        _, lost = self.drain([self.worker(i).set_server(index, handle) for i, w in enumerate(workers) if w is not None])
        if lost:
            raise lost[0]
        return handle

    def samples_since(self, position: Any) -> int:
        """Samples trained after the reader position ``position`` ({"worker_samples": [...]}, what a rollback
        re-trains)."""
        then = position["worker_samples"] if isinstance(position, dict) else position
        return int(sum(max(now - was, 0) for now, was in zip(self.worker_samples, then)))

    def reader_position(self) -> Dict[str, Any]:
        # each worker's input's own position (an endless stream's file and offset), asked only when saving: a
        # resume continues there instead of re-reading the input up to its batch count
        # (a worker lost meanwhile gives None: its input is skipped to instead)
        inputs, _ = self.drain([self.worker(i).input_position() for i in range(len(self.workers))])
        return {
            "step": self.step,
            "worker_batches": list(self.worker_batches),
            "worker_samples": list(self.worker_samples),
            "worker_inputs": list(inputs),
        }

    # ---- the loop's bookkeeping -------------------------------------------------------------------------
    def check_finite(self, result: StepResult) -> None:
        if not math.isfinite(result.loss):
            raise FloatingPointError(
                f"training diverged at step {self.step + 1} (worker {result.worker}): loss is "
                f"{result.loss}; lower the learning rates"
            )

    def note_result(self, i: int, result: StepResult) -> None:
        self.worker_batches[i] += 1
        self.worker_samples[i] += result.samples
        self.push_seqs[i] = result.push_seqs
        self.pending_updates[i] = result.pending_updates
        self.has_next[i] = result.has_next
        self.samples += result.samples
        if result.labels is not None and result.probabilities is not None:
            self.progressive.add(result.labels, result.probabilities, result.heads)

    def tick(self, bar: Any) -> None:
        now = time.perf_counter()
        if self._first_step_end is None:
            self._first_step_end, self._first_samples = now, self.samples
        # (step, seconds since this fit began, samples so far, step loss): throughput and loss over time
        self.timeline.append([self.step, now - self._fit_start, self.samples - self._fit_samples, self.losses[-1]])
        bar.update(self.samples - self._fit_samples, self.losses[-1])

    def fit(self, steps: Optional[int] = None) -> Dict[str, Any]:
        """Trains at most ``steps`` more steps (None: until every worker's input is exhausted); the next call
        continues where this one stopped. Returns this call's figures plus the strategy's report."""
        if steps is not None:
            steps = checks.non_negative_int("steps", steps)
        stop = None if steps is None else self.step + steps
        self.total_steps = stop
        if self.injector is not None:
            self.injector.validate(self.cluster.servers, self.cluster.workers, stop)
            self.injector.reset()
        self._first_step_end, self._first_samples = None, 0
        self._fit_samples = self.samples
        self.timeline = []
        bar = Progress(steps, self.progress, auc=self.progressive.auc)
        clock = StageClock(self._worker_stats())
        start = self._fit_start = time.perf_counter()
        if self._train_start is None:  # the first call: --mtbf kills count from here
            self._train_start = start
        first_step = self.step
        try:
            loop = run_sync if self.cluster.mode == "sync" else run_async
            loop(self, bar, stop)
            while self.at_boundary(self.quiesce):  # every push applied before the clock stops
                loop(self, bar, stop)  # rolled back by a recovery: train the steps again
        finally:
            bar.close()
        end = time.perf_counter()
        seconds = end - start
        samples = self.samples - self._fit_samples
        first_end, first_samples = self._first_step_end, self._first_samples
        steady = (
            (self.samples - first_samples) / (end - first_end)
            if first_end is not None and self.samples > first_samples
            else None
        )
        injected = [] if self.injector is None else self.injector.injected()
        return {
            "samples": samples,
            "steps": self.step,
            "steps_this_fit": self.step - first_step,
            "train_seconds": seconds,
            "samples_per_sec": samples / seconds if seconds > 0 else 0.0,
            "steady_samples_per_sec": steady,
            "final_loss": float(np.mean(self.losses[-LAST_LOSSES:])) if self.losses else None,
            "timeline": self.timeline,
            "progressive": self.progressive.report(),
            "injected": [{**k, "seconds": k["time"] - start} for k in injected],
            "stages": clock.stages(self._worker_stats()),
            **self.strategy.report(),
        }

    # ---- evaluation and report --------------------------------------------------------------------------
    def find_rows(self, keys: Dict[str, np.ndarray]) -> Dict[str, tuple]:
        dims = {t.name: t.dim for t in self.job.tables}
        return self.client.find({t: (k, dims[t]) for t, k in keys.items()})

    def evaluate(self, batches: Iterable[Any]) -> Dict[str, Any]:
        """AUC, log loss and sample count of ``batches`` (dict batches as input_fn yields); no row is inserted,
        ids never trained read a zero row."""
        self._dense.current()
        return evaluate_batches(batches, self.job, self.find_rows, self._predict.predict)

    def digest(self) -> str:
        """``model_digest`` of every table (in the job's order) and the dense state (see :mod:`xdl_ec.model.digest`)."""
        return self.digest_of([self.scheduler.exports(t.name) for t in self.job.tables])

    def digest_of(self, exports: Sequence[Sequence[Dict[str, np.ndarray]]]) -> str:
        """``model_digest`` of the tables' ``exports`` (per table, every server's) with the dense state."""
        dense = self._dense.current()
        return model_digest(exports, dense.model.weights, dense.optimizer.variables)

    def rows_per_table(self) -> Dict[str, int]:
        """Rows held per table now, summed over the servers (asks every server)."""
        rows: Dict[str, int] = {t.name: 0 for t in self.job.tables}
        for s in self.scheduler.server_stats():
            for name, n in s["rows"].items():
                rows[name] = rows.get(name, 0) + int(n)
        return rows

    def _worker_stats(self) -> List[Dict[str, Any]]:
        """Every live worker's stats (the report's stages; a worker lost meanwhile is left out)."""
        stats = []
        for i in range(len(self.workers)):
            try:
                stats.append(self.result(self.worker(i).stats()))
            except (RoleLost, CallTimeout):
                pass
        return stats

    def bytes_per_sample(self) -> Dict[str, float]:
        """Embedding bytes the workers pulled and pushed per sample they trained (asks every worker)."""
        workers = [self.result(self.worker(i).stats()) for i in range(len(self.workers))]
        return self._bytes_per_sample(workers)

    def _bytes_per_sample(self, workers: List[Dict[str, Any]]) -> Dict[str, float]:
        samples = max(self.samples - self._restored_samples, 1)  # what this process's workers moved bytes for
        return {
            "bytes_pulled_per_sample": sum(w["bytes_pulled"] + w["bytes_requested"] for w in workers) / samples,
            "bytes_pushed_per_sample": sum(w["bytes_pushed"] for w in workers) / samples,
        }

    def report(self) -> Dict[str, Any]:
        """The cluster's part of a report: per-server and per-worker stats, bytes moved per sample."""
        servers = self.scheduler.server_stats()
        workers = [self.result(self.worker(i).stats()) for i in range(len(self.workers))]
        cached = [w["cache"] for w in workers if "cache" in w]
        caching = {"cache": merged_cache_stats(cached)} if cached else {}
        return {
            **caching,
            "embedding_rows": sum(sum(s["rows"].values()) for s in servers),
            **(
                {"tables": merged_reports([s["tables"] for s in servers if "tables" in s])}
                if any("tables" in s for s in servers)
                else {}
            ),
            "cluster": {**dataclasses.asdict(self.cluster), "map": self.scheduler.cluster_map()},
            "servers": [
                {
                    k: s[k]
                    for k in (
                        "index",
                        "bytes_in",
                        "bytes_out",
                        "requests",
                        "native_requests",
                        "pulls",
                        "pushes",
                        "keys_pulled",
                        "keys_pushed",
                        "rows",
                    )
                }
                for s in servers
            ],
            "workers": workers,
            **self._bytes_per_sample(workers),
        }

    def close(self) -> None:
        dense = getattr(self, "_dense", None)
        if dense is not None:
            dense.sync(ask_worker=False)  # the model stays usable after the cluster is gone (job.fit's model)
        try:
            self.strategy.close()
        finally:
            for i in range(len(getattr(self, "workers", []))):
                try:
                    self.worker(i).close().result(10.0)
                except Exception:  # noqa: BLE001 - already dead or closing
                    pass
            for linked in [*self._linked.values(), *self._beside.values()]:
                linked.close()
            self.backend.shutdown()
