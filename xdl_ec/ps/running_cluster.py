"""RunningCluster: the roles of a parameter-server run and the driver's calls to them.

It starts the scheduler (servers holding the job's tables, a hot spare where a strategy replaces lost servers on
Ray) and the workers, addresses them (on Ray a step's calls go over direct links proven with the run's secret,
:mod:`xdl_ec.ps.direct`; Ray keeps placement, liveness and control), and waits for calls with failures confirmed
by the scheduler, so nothing waits forever and a death is told apart from a stuck call. It also holds the run's
fault tolerance, whose own calls a quiesce completes.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from xdl_ec.model.job_spec import JobSpec
from xdl_ec.ps.api import WorkerAPI
from xdl_ec.ps.backend import CallTimeout, RoleLost, make_backend
from xdl_ec.ps.client import PSClient
from xdl_ec.ps.cluster_config import ClusterConfig
from xdl_ec.ps.direct import BesideLinkedHandle, LinkedHandle
from xdl_ec.ps.fault_tolerance import FaultTolerance, NoFaultTolerance
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.placement import plan_placement
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.run_keeper import RunRecord
from xdl_ec.ps.scheduler import Scheduler
from xdl_ec.ps.worker import RunSettings, Worker
from xdl_ec.sparse.cache_config import Cache

# the first calls to a worker wait for it to build its model and read its first batch
START_TIMEOUT = 120.0


class RunningCluster:
    """The servers and workers of ``job`` on ``config`` (started by :meth:`start`), the driver's client to the
    servers and the ``strategy`` guarding them; ``caches``: {table: Cache}, the workers' embedding caches."""

    def __init__(
        self,
        job: JobSpec,
        config: ClusterConfig,
        settings: RunSettings,
        strategy: FaultTolerance,
        caches: Dict[str, Cache],
        worker_class: type = Worker,
    ) -> None:
        self.job, self.config, self.settings, self.caches = job, config, settings, caches
        self.strategy = strategy
        self.worker_class = worker_class
        self.backend = make_backend(config.backend, config.address, config.detached)
        self.link_secret = None
        if config.backend == "ray":
            from xdl_ec.net.job_secret import JobSecret

            self.link_secret = JobSecret.generate()
        self._linked: Dict[int, LinkedHandle] = {}
        self._beside: Dict[int, BesideLinkedHandle] = {}
        self._beside_lock = threading.Lock()  # the ec rebuild's thread asks for them beside the driver's
        self.workers: List[Handle] = []

    def start(self, adopted: Optional[RunRecord] = None) -> None:
        """Starts the servers (placed first: a placement the nodes cannot satisfy is an error before any starts),
        then the workers, and the driver's client. ``adopted``: the roles of a run this driver reattaches to
        (docs/design/reattach.md), taken over instead of started."""
        if adopted is not None:
            self._adopt(adopted)
            return
        strategy = self.strategy
        spares = self._spares()
        placement = plan_placement(self.backend, self.config.failure_domain, self.config.servers, strategy.stripe_code)
        self.scheduler = Scheduler(
            self.backend,
            self.config.servers,
            self.job.tables,
            spares=spares,
            placement=placement,
            # a server of a striped strategy holds parity too, in the same budget
            memory=None if self.config.memory is None else self.config.memory.holding_parity(strategy.stripe_code),
        )
        job = self.job
        self.backend.share_code([job.model_fn, job.input_fn, job.loss, job.eval_fn])
        self.workers = self.scheduler.start_workers(self.config.workers, self.worker_class, self.worker_args)
        self.client = PSClient(self.scheduler.servers, worker=self.config.workers, timeout=self.config.call_timeout)

    def _spares(self) -> int:
        """A hot spare where starting a server is slow (a Ray process) and a strategy replaces lost servers."""
        return 1 if self.config.backend == "ray" and not isinstance(self.strategy, NoFaultTolerance) else 0

    def _adopt(self, record: RunRecord) -> None:
        self.link_secret = record.link_secret
        self.scheduler = Scheduler(
            self.backend,
            self.config.servers,
            self.job.tables,
            spares=self._spares(),
            memory=None if self.config.memory is None else self.config.memory.holding_parity(self.strategy.stripe_code),
            adopted=(record.servers, record.spares),
        )
        self.scheduler.server_ids = None if record.server_ids is None else list(record.server_ids)
        self.backend.share_code([self.job.model_fn, self.job.input_fn, self.job.loss, self.job.eval_fn])
        self.workers = self.scheduler.workers = [self.backend.adopt(w) for w in record.workers]
        self.scheduler.version += 1
        self.client = PSClient(self.scheduler.servers, worker=self.config.workers, timeout=self.config.call_timeout)

    def record(self, base: Dict[str, Any], shape: Dict[str, Any]) -> RunRecord:
        """This cluster's roles as a reattaching driver needs them (docs/design/reattach.md)."""
        return RunRecord(
            servers=list(self.scheduler.servers),
            spares=self.scheduler.spares,
            workers=list(self.workers),
            server_ids=None if self.scheduler.server_ids is None else list(self.scheduler.server_ids),
            link_secret=self.link_secret,
            strategy_secret=self.strategy.link_secret,
            shape=shape,
            base=base,
        )

    @property
    def worker_applies_dense(self) -> bool:
        """A cluster's only worker applies its own dense updates (see :mod:`xdl_ec.ps.dense_sync`)."""
        return self.config.workers == 1

    def worker_args(self, index: int) -> tuple:
        """The arguments of worker ``index``'s constructor (:class:`~xdl_ec.ps.worker.Worker`)."""
        prefetch = self.config.workers == 1 or self.config.mode == "async"
        applies = self.worker_applies_dense
        return (
            index,
            self.config.workers,
            self.job,
            self.settings,
            list(self.scheduler.servers),
            prefetch,
            self.config.call_timeout,
            None,
            applies,
            self.caches,
            self.table_rows(),
            applies,
            self.link_secret,
        )

    def start_worker(self, index: int) -> Handle:
        """A new worker ``index`` in place of a dead one (the caller tells it where to read from)."""
        handle = self.scheduler.start_worker(index, self.worker_class, self.worker_args(index))
        self.workers[index] = handle
        self.scheduler.worker_restarted(index, handle)
        return handle

    def batch_signatures(self) -> List[Any]:
        """Each worker's first batch's signature (None: its input is empty), once every worker has built its model
        and read that batch."""
        timeout = max(self.config.call_timeout, START_TIMEOUT)
        return [self.result(self.worker(i).batch_signature(), timeout=timeout) for i in range(len(self.workers))]

    def rows_per_table(self) -> Dict[str, int]:
        """Rows held per table now, summed over the servers (asks every server)."""
        rows: Dict[str, int] = {t.name: 0 for t in self.job.tables}
        for stats in self.scheduler.server_stats():
            for name, n in stats["rows"].items():
                rows[name] = rows.get(name, 0) + int(n)
        return rows

    def table_rows(self) -> Dict[str, int]:
        """Rows of each table over every server now (the first size of "P%" worker caches; the servers' answers to
        their pulls tell them the rest); {} without such a cache."""
        if not any(c.share is not None for c in self.caches.values()):
            return {}
        return self.rows_per_table()

    # ---- addressing the roles ---------------------------------------------------------------------------
    def worker(self, index: int) -> Remote:
        """Worker ``index``'s calls: its steps over a direct link on Ray, everything else through its handle."""
        handle: Handle = self.workers[index]
        if self.link_secret is not None:
            linked = self._linked.get(index)
            if linked is None or linked.handle is not handle:
                if linked is not None:
                    linked.close()
                linked = self._linked[index] = LinkedHandle(handle, self.link_secret)
            handle = linked
        return Remote(handle, WorkerAPI)

    def server_beside(self, index: int) -> Handle:
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

    def live_workers(self) -> List[Optional[Handle]]:
        """The workers' handles, None for those the scheduler knows dead (restarted by the driver later)."""
        return [None if ("worker", w.index) in self.scheduler.dead else w for w in self.workers]

    # ---- calls and failures -----------------------------------------------------------------------------
    def result(self, future: Any, timeout: Optional[float] = None) -> Any:
        """``future.result`` with failures confirmed by the scheduler: a dead role raises its RoleLost; a role that
        answers pings but not this call within ``timeout`` (the cluster's call timeout) is stuck, and its
        CallTimeout, naming role, method and seconds, stops the run instead of waiting forever."""
        timeout = self.config.call_timeout if timeout is None else timeout
        try:
            return future.result(timeout)
        except (RoleLost, CallTimeout) as err:
            lost = self.scheduler.confirm_failure(err)
            if lost is not None:
                raise lost from None
            raise  # a stuck role, or an error from inside the call (e.g. a worker's own timeout): not a death

    def drain(self, futures: Sequence[Any]) -> Tuple[List[Any], List[RoleLost]]:
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

    def answers(self, futures: Sequence[Any]) -> List[Any]:
        """Waits for every future (a failed step is drained whole first); every result, or the first confirmed
        RoleLost raised."""
        results, lost = self.drain(futures)
        if lost:
            raise lost[0]
        return results

    def quiesce(self, settle: bool = True) -> None:
        """Waits until every push sent so far is applied (a worker may answer a step before its push's acks, see
        :mod:`xdl_ec.ps.worker`): before reading or saving server state, or before killing a role. ``settle``:
        also complete the strategy's own calls in flight (a backstop's cut reads only the shards: it skips that)."""
        self.answers([self.worker(i).flush(True) for i, w in enumerate(self.live_workers()) if w is not None])
        if settle:
            self.strategy.settle()

    def check_servers(self) -> None:
        """Raises the loss of a server that no longer answers a ping. A server no step calls (its shards hold no id
        the steps read: a table with fewer ids than servers) is otherwise found dead only by the reads after
        training, where no recovery runs; checked at a fit's last boundary, its loss is recovered like any other."""
        lost = self.scheduler.probe_servers()
        if lost:
            raise lost[0]

    def only_worker_dense_state(self) -> Optional[tuple]:
        """The only worker's dense state (weights, optimizer variables, iterations), None when it cannot answer."""
        if ("worker", 0) in self.scheduler.dead:
            return None
        try:
            return self.result(self.worker(0).dense_state())
        except (RoleLost, CallTimeout):
            return None

    def worker_stats(self, skip_lost: bool = False) -> List[Dict[str, Any]]:
        """Every worker's stats; ``skip_lost``: leave out a worker lost meanwhile (else its loss is raised)."""
        stats = []
        for i in range(len(self.workers)):
            try:
                stats.append(self.result(self.worker(i).stats()))
            except (RoleLost, CallTimeout):
                if not skip_lost:
                    raise
        return stats

    def close(self) -> None:
        """Closes the workers (those still answering), the direct links and the backend with every role."""
        try:
            for i in range(len(self.workers)):
                try:
                    self.worker(i).close().result(10.0)
                except Exception:  # noqa: BLE001 - already dead or closing
                    pass
            for linked in [*self._linked.values(), *self._beside.values()]:
                linked.close()
        finally:
            self.backend.shutdown()
