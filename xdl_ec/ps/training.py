"""PSTrainer: the driver of a parameter-server run of a job (``job.fit(cluster=...)``, ``xdl-ec train --servers``).

It composes the run's parts, each with one job: the :class:`~xdl_ec.ps.running_cluster.RunningCluster` (the
roles and the calls to them), the :class:`~xdl_ec.ps.training_state.TrainingState` (where training is), the
authoritative dense model (:class:`~xdl_ec.ps.dense_sync.DriverDense`), the
:class:`~xdl_ec.ps.training_loop.TrainingLoop` (the steps, fit by fit), the
:class:`~xdl_ec.ps.recovery_coordinator.RecoveryCoordinator` (roles lost), the
:class:`~xdl_ec.ps.run_persistence.RunPersistence` (saves and resumes) and the
:class:`~xdl_ec.ps.run_report.RunReport` (evaluation, digest, the cluster's report).

Fault tolerance goes through one seam, a :class:`~xdl_ec.ps.fault_tolerance.FaultTolerance` (default ``none``),
which sees the cluster through a :class:`~xdl_ec.ps.cluster_view.ClusterView`: ``attach`` once the cluster is up,
``after_step`` at every step boundary with no push in flight, and on a role death confirmed by the scheduler the
recovery coordinator. A failed step is first drained (every call of it answered or failed) so no push is in flight
during a recovery. An optional :class:`~xdl_ec.ps.fault_injector.FaultInjector` kills roles for real at step
boundaries. Calls have timeouts, so nothing waits forever.

A PSTrainer is also the run its hooks and the job layer see (``step``, ``samples``, ``quiesce()``,
``save_tables()``, ``reader_position()``... as :class:`~xdl_ec.job.local_run.LocalRun` offers them).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import numpy as np

from xdl_ec.keep.checkpoint import PendingCheckpoint
from xdl_ec.keep.saved_run import SavedRun
from xdl_ec.model.dense_model import DenseModel
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.model.model_step import ModelStep
from xdl_ec.model.progressive import ProgressiveWindow
from xdl_ec.ps.async_loop import run_async
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.cluster_config import ClusterConfig
from xdl_ec.ps.cluster_view import ClusterView
from xdl_ec.ps.dense_sync import DriverDense
from xdl_ec.ps.fault_injector import FaultInjector
from xdl_ec.ps.fault_tolerance import FaultTolerance, NoFaultTolerance
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.recovery_coordinator import RecoveryCoordinator
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.row_preload import preload_rows
from xdl_ec.ps.run_keeper import RunRecord
from xdl_ec.ps.run_persistence import RunPersistence
from xdl_ec.ps.run_report import RunReport
from xdl_ec.ps.running_cluster import RunningCluster
from xdl_ec.ps.step_agreement import StepAgreement
from xdl_ec.ps.step_hook import StepHook
from xdl_ec.ps.sync_loop import run_sync
from xdl_ec.ps.training_loop import TrainingLoop
from xdl_ec.ps.training_state import TrainingState
from xdl_ec.ps.worker import RunSettings
from xdl_ec.settings import checks
from xdl_ec.sparse.cache_config import Cache

__all__ = ["ClusterConfig", "PSTrainer"]


class PSTrainer:
    """Trains ``job`` on ``cluster``: :meth:`fit` trains, :meth:`evaluate`, :meth:`digest` and :meth:`report`
    tell what it trained, :meth:`close` shuts the cluster down."""

    def __init__(
        self,
        job: JobSpec,
        cluster: ClusterConfig,
        settings: RunSettings = RunSettings(),
        strategy: Optional[FaultTolerance] = None,
        injector: Optional[FaultInjector] = None,
        progress: bool = False,
        caches: Optional[Dict[str, Cache]] = None,
        reattach: Optional[RunRecord] = None,
    ) -> None:
        """``caches``: {table: Cache}, the workers' embedding caches (:mod:`xdl_ec.ps.cached_client`).
        ``reattach``: the record of a run whose driver died, whose roles this driver takes over and continues at
        the step it agrees on with them (docs/design/reattach.md; :attr:`reattached_step`)."""
        checks.instance("job", job, JobSpec)
        checks.instance("cluster", cluster, ClusterConfig)
        strategy = NoFaultTolerance() if strategy is None else strategy
        checks.instance("strategy", strategy, FaultTolerance)
        caches = dict(caches or {})
        dims = {t.name: t.dim for t in job.tables}
        for name, cache in caches.items():
            checks.instance(f"caches[{name!r}]", cache, Cache)
            cache.check_memory(name, dims[name], cluster.workers if cluster.backend == "local" else 1)
        self.job, self.settings, self.injector = job, settings, injector
        self.state = TrainingState(job.tables, cluster.workers)
        self.roles = RunningCluster(job, cluster, settings, strategy, caches)
        self.reattached_step: Optional[int] = None
        try:
            self.roles.start(reattach)
            self.signature = self._first_signature()
            model = DenseModel(
                job.model_fn,
                job.dense_optimizer,
                job.dense_learning_rate,
                self.signature,
                job.dims(),
                job.combiners(),
                settings.seed,
            )
            # the driver's dense state; a single worker applies its own updates (see xdl_ec.ps.dense_sync)
            self._dense = DriverDense(model, self.roles.worker_applies_dense, self.roles.only_worker_dense_state)
            self.recovery = RecoveryCoordinator(self.roles, self.state, self._dense, injector)
            self.persistence = RunPersistence(self.roles, self.state, self._dense)
            self.reporter = RunReport(self.roles, self.state, self._dense, ModelStep.of(job, model, self.signature))
            self.view = ClusterView(self.roles, self.state, self.persistence, self.recovery, self._dense)
            steps = run_sync if cluster.mode == "sync" else run_async
            self.loop = TrainingLoop(
                self.roles, self.state, self._dense, self.recovery, self.view, steps, self, injector, progress
            )
            self.agreement = StepAgreement(self.roles, self.state, self._dense)
            if reattach is None:
                strategy.attach(self.view)
            else:
                self.roles.scheduler.probe_servers()  # a server lost meanwhile is marked, then recovered
                self.reattached_step = self.agreement.agree(reattach)
                if injector is not None:  # the kills before the steps the dead driver sent are made
                    injector.made_through(self.agreement.dispatched)
                strategy.reattach(self.view, reattach.strategy_secret)
        except BaseException:
            if reattach is None:  # a reattach that failed leaves the run's roles to its caller's decision
                self.roles.backend.shutdown()
            raise
        # the cluster's parts that the job layer, resizes and benchmarks reach (the same objects for the run)
        self.backend = self.roles.backend
        self.scheduler = self.roles.scheduler
        self.client = self.roles.client
        self.link_secret = self.roles.link_secret
        self.workers: List[Handle] = self.roles.workers  # restarted workers replace their entry in place

    def _first_signature(self) -> Any:
        """The signature of the workers' first batches (the dense model is built for it), which must agree."""
        signatures = self.roles.batch_signatures()
        self.state.has_next = [s is not None for s in signatures]
        known = [s for s in signatures if s is not None]
        if not known:
            raise ValueError("input_fn: no worker got a batch (every worker's input is empty)")
        if any(s != known[0] for s in known):
            raise ValueError(f"input_fn: workers' batches differ in their features' shapes: {signatures}")
        return known[0]

    # ---- training ---------------------------------------------------------------------------------------
    def fit(self, steps: Optional[int] = None) -> Dict[str, Any]:
        """Trains at most ``steps`` more steps (None: until every worker's input is exhausted); the next call
        continues where this one stopped. Returns this call's figures plus the strategy's report."""
        return self.loop.fit(steps)

    @property
    def hooks(self) -> List[StepHook]:
        """Run at every step boundary with no push in flight, after the strategy (``after_step(self)``)."""
        return self.loop.hooks

    @property
    def cluster(self) -> ClusterConfig:
        return self.roles.config

    @cluster.setter
    def cluster(self, config: ClusterConfig) -> None:  # a resize changes the server count
        self.roles.config = config

    @property
    def strategy(self) -> FaultTolerance:
        return self.roles.strategy

    @strategy.setter
    def strategy(self, strategy: FaultTolerance) -> None:  # a resize re-forms ec's stripes under a successor
        self.roles.strategy = strategy

    # ---- where training is ------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        return self.state.step

    @property
    def samples(self) -> int:
        return self.state.samples

    @property
    def total_steps(self) -> Optional[int]:
        return self.state.total_steps

    @property
    def losses(self) -> List[float]:
        return self.state.losses

    @property
    def progressive(self) -> ProgressiveWindow:
        return self.state.progressive

    # ---- the roles and calls to them --------------------------------------------------------------------
    def worker(self, index: int) -> Remote:
        return self.roles.worker(index)

    def server_beside(self, index: int) -> Handle:
        return self.roles.server_beside(index)

    def live_workers(self) -> List[Optional[Handle]]:
        return self.roles.live_workers()

    def result(self, future: Any, timeout: Optional[float] = None) -> Any:
        return self.roles.result(future, timeout)

    def drain(self, futures: Sequence[Any]) -> tuple:
        return self.roles.drain(futures)

    def quiesce(self, settle: bool = True) -> None:
        self.roles.quiesce(settle)

    def recover(self, lost: List[RoleLost], step: int) -> bool:
        return self.recovery.recover(lost, step)

    # ---- saving and resuming (see xdl_ec.keep.run_saver) ------------------------------------------------
    @property
    def dense(self) -> DenseModel:
        """The authoritative dense model, up to date; taken to be changed (a worker applying its own dense updates
        gets it whole with its next step)."""
        return self._dense.take()

    def dense_state(self) -> tuple:
        return self.persistence.dense_state()

    def save_tables(self, pending: PendingCheckpoint) -> int:
        return self.persistence.save_tables(pending)

    def reader_position(self) -> Dict[str, Any]:
        return self.persistence.reader_position()

    def restore(self, saved: SavedRun) -> None:
        self.persistence.restore(saved)

    def take_changes(self, full: bool) -> List[Dict[str, Any]]:
        return self.persistence.take_changes(full)

    def preload(self, table: str, chunks: Iterable[np.ndarray]) -> int:
        """Creates the rows of every key in ``chunks`` on the servers before the first step
        (:func:`xdl_ec.ps.row_preload.preload_rows`); returns how many keys were sent. The strategy then takes the
        preloaded rows as a resume's (``resumed``): no worker logs them for a replay, so ec waits until they are
        parity-durable (a kill a few steps in could otherwise find some still on their way and rebuild the server
        without them), ckpt and cpr take a fresh copy to roll back to."""
        sent = preload_rows(self.roles, table, chunks)
        self.strategy.resumed(self.state.step)
        return sent

    # ---- evaluation and report --------------------------------------------------------------------------
    def evaluate(self, batches: Iterable[Any]) -> Dict[str, Any]:
        return self.reporter.evaluate(batches)

    def digest(self) -> str:
        return self.reporter.digest()

    def digest_of(self, exports: Sequence[Sequence[Dict[str, np.ndarray]]]) -> str:
        return self.reporter.digest_of(exports)

    def key_order_rows(self, table: str) -> Iterator[Dict[str, np.ndarray]]:
        return self.reporter.key_order_rows(table)

    def digest_streamed(self, tables: Iterable[Iterable[Mapping[str, np.ndarray]]]) -> str:
        return self.reporter.digest_streamed(tables)

    def rows_per_table(self) -> Dict[str, int]:
        return self.roles.rows_per_table()

    def bytes_per_sample(self) -> Dict[str, float]:
        """Embedding bytes the workers pulled and pushed per sample they trained (asks every worker)."""
        return self.reporter.bytes_per_sample(self.roles.worker_stats())

    def report(self) -> Dict[str, Any]:
        return self.reporter.report()

    def tier_report(self) -> Optional[Dict[str, Any]]:
        """The budgeted servers' disk tier now (:meth:`RunReport.tier_report`); None without a budget."""
        return self.reporter.tier_report()

    def close(self) -> None:
        """Shuts the cluster down; the dense model stays usable (``job.fit``'s model)."""
        self._dense.sync(ask_worker=False)
        try:
            self.roles.strategy.close()
        finally:
            self.roles.close()
