"""RecoveryCoordinator: what the driver does when the scheduler confirmed deaths.

Servers are recovered by the strategy (``FaultTolerance.recover``); workers hold no model state (the dense replica
lives with the driver), so the driver restarts a lost worker itself: the new one continues from its predecessor's
reader position. Servers first: a new worker contacts every server when it starts. The strategy's
:class:`~xdl_ec.ps.fault_tolerance.Resume` says whether training was rolled back (the step, the dense state and the
readers) or goes on at the failed step.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, List, Optional, Protocol

from xdl_ec.ps import driver_kill_point
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.dense_sync import DriverDense
from xdl_ec.ps.fault_tolerance import FailureRecord, NoFaultTolerance, Resume
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.running_cluster import START_TIMEOUT, RunningCluster
from xdl_ec.ps.training_state import TrainingState

log = logging.getLogger(__name__)


class KillClock(Protocol):
    """What a recovery asks of the run's failure injector (:class:`~xdl_ec.ps.fault_injector.FaultInjector`):
    seconds since it killed (role, index), 0.0 when it did not."""

    def detect_seconds(self, role: str, index: int) -> float: ...


class RecoveryCoordinator:
    """Recovers the roles of ``cluster`` lost while training ``state``; ``dense``: the driver's dense model (a lost
    worker's log is applied to it); ``injector``: the run's failure injector, which knows when it killed."""

    def __init__(
        self,
        cluster: RunningCluster,
        state: TrainingState,
        dense: DriverDense,
        injector: Optional[KillClock] = None,
    ) -> None:
        self.cluster, self.state, self.dense, self.injector = cluster, state, dense, injector
        # told True when a recovery begins and False when it ends (a reattachable run's heartbeat records it: a
        # driver that dies mid-recovery leaves a run whose recovery the next driver redoes, docs/design/reattach.md)
        self.on_recovery: Optional[Callable[[bool], None]] = None
        # told (index, handle) of each replacement server as soon as it is started, before any role is pointed at
        # it (a reattachable run journals it: a next driver ends a replacement it cannot prove whole)
        self.on_replacement: Optional[Callable[[int, Handle], None]] = None

    def recover(self, lost: List[RoleLost], step: int) -> bool:
        """Recovers every role of ``lost`` still dead; True when training was rolled back."""
        if self.on_recovery is not None:
            self.on_recovery(True)
        driver_kill_point.reached("recovery-begun")
        try:
            return self._recover(lost, step)
        finally:
            if self.on_recovery is not None:
                self.on_recovery(False)

    def _recover(self, lost: List[RoleLost], step: int) -> bool:
        cluster, state = self.cluster, self.state
        strategy = cluster.strategy
        seen = set()
        rolled_back = False
        if any(e.role == "worker" for e in lost) and not isinstance(strategy, NoFaultTolerance):
            # a worker's node may have taken servers with it (not noticed yet): a new worker contacts every
            # server when it starts, so those are confirmed now and recovered first
            lost = list(lost) + cluster.scheduler.probe_servers()
        for err in sorted(lost, key=lambda e: e.role == "worker"):
            key = (err.role, err.index)
            if key in seen:
                continue
            seen.add(key)
            if isinstance(strategy, NoFaultTolerance):
                raise err  # no redundancy: the run stops naming the lost role
            if key not in cluster.scheduler.dead:
                continue  # recovered together with an earlier loss
            detect = self.detect_seconds(*key)
            if err.role == "worker":
                start = time.perf_counter()
                while True:
                    try:
                        self.restart_worker(err.index)
                        break
                    except RoleLost as other:  # the new worker met a server that died too: recover it first
                        confirmed = cluster.scheduler.confirm_failure(other) if other.role == "server" else None
                        if confirmed is None:
                            raise
                        rolled_back = self.resume(strategy.recover(confirmed)) or rolled_back
                strategy.failures.append(
                    FailureRecord(
                        step=step,
                        role="worker",
                        index=err.index,
                        detect_seconds=detect,
                        rebuild_seconds=time.perf_counter() - start,
                        samples_per_sec_during_rebuild=0.0,
                        lost_updates=state.pending_updates[err.index],
                    )
                )
                state.pending_updates[err.index] = 0
                log.warning(
                    "worker %d recovered in %.3f s (restarted)", err.index, strategy.failures[-1].rebuild_seconds
                )
                continue
            before = len(strategy.failures)
            resume = strategy.recover(err)
            for record in strategy.failures[before:]:
                if not record.detect_seconds:
                    record.detect_seconds = detect
            rolled_back = self.resume(resume) or rolled_back
        if not strategy.rebuilding:  # else the strategy replenishes when it is done
            cluster.scheduler.replenish_spares()
        return rolled_back

    def at_boundary(self, action: Callable[[], None]) -> bool:
        """Runs ``action()`` at a step boundary (``after_step``, the end of a fit's quiesce). A worker's push may
        meet a dead server after its step answered (acks are collected later), so the loss may surface here: it is
        recovered as a failed step's would be and ``action`` run again. True when the recovery rolled training
        back (the loop then trains again from there)."""
        while True:
            try:
                action()
                return False
            except RoleLost as err:
                confirmed = self.cluster.scheduler.confirm_failure(err)
                if confirmed is None:
                    raise
                if self.recover([confirmed], self.state.step):
                    return True

    def resume(self, resume: Resume) -> bool:
        """Applies a strategy's Resume; True when it rolled training back."""
        cluster, state = self.cluster, self.state
        if resume.reader_position is None:
            return False  # nothing rolled back: the failed step is retried
        state.rewind(resume.step, resume.reader_position, drop_losses=cluster.config.mode == "sync")
        workers = cluster.live_workers()
        futures = [(i, cluster.worker(i).seek(n)) for i, n in enumerate(state.worker_batches) if workers[i] is not None]
        answers = cluster.answers([f for _, f in futures])
        for (i, _), has in zip(futures, answers):
            state.has_next[i] = bool(has)
        return True

    def restart_worker(self, index: int) -> None:
        """A new worker ``index`` continuing from its predecessor's reader position."""
        cluster, state = self.cluster, self.state
        self.dense.worker_lost()  # its successor gets the driver's dense state with its first step
        cluster.start_worker(index)
        previous, before = state.push_seqs[index], state.unlogged_push_seqs[index]
        if previous is not None:  # the predecessor's pushes died with its log (durable or not)
            state.unlogged_push_seqs[index] = (
                previous if before is None else [max(a, b) for a, b in zip(before, previous)]
            )
        timeout = max(cluster.config.call_timeout, START_TIMEOUT)
        state.has_next[index] = bool(cluster.result(cluster.worker(index).seek(state.worker_batches[index]), timeout))

    def detect_seconds(self, role: str, index: int) -> float:
        """Seconds from the death of (role, index) to now: from its injected kill, else from the death the backend
        recorded (a kill from outside the job, on Ray), else 0.0 (unknown)."""
        injected = 0.0 if self.injector is None else self.injector.detect_seconds(role, index)
        if injected:
            return injected
        handles = self.cluster.scheduler.servers if role == "server" else self.cluster.workers
        since = self.cluster.backend.seconds_since_death(handles[index]) if 0 <= index < len(handles) else None
        return 0.0 if since is None else since

    def replace_server(self, index: int) -> Handle:
        """Starts a fresh, empty server ``index`` in place of a dead one and points the workers and the driver's
        client at it; returns its handle (the strategy rebuilds its state)."""
        cluster = self.cluster
        handle = cluster.scheduler.replace_server(index)
        if self.on_replacement is not None:
            self.on_replacement(index, handle)
        cluster.client.servers[index] = handle
        workers = cluster.live_workers()
        cluster.answers([cluster.worker(i).set_server(index, handle) for i, w in enumerate(workers) if w is not None])
        return handle
