"""RecoveryCoordinator: what the driver does when the scheduler confirmed deaths.

Servers are recovered by the strategy (``FaultTolerance.recover``); workers hold no model state (the dense replica
lives with the driver), so the driver restarts a lost worker itself: the new one continues from its predecessor's
reader position. Servers first: a new worker contacts every server when it starts. The strategy's
:class:`~xdl_ec.ps.fault_tolerance.Resume` says whether training was rolled back (the step, the dense state and the
readers) or goes on at the failed step.
"""

from __future__ import annotations

import time
from typing import Any, List

from .backend import RoleLost
from .fault_tolerance import FailureRecord, NoFaultTolerance, Resume


class RecoveryCoordinator:
    def __init__(self, trainer: Any) -> None:
        self.t = trainer

    def recover(self, lost: List[RoleLost], step: int) -> bool:
        """Recovers every role of ``lost`` still dead; True when training was rolled back."""
        t = self.t
        strategy = t.strategy
        seen = set()
        rolled_back = False
        if any(e.role == "worker" for e in lost) and not isinstance(strategy, NoFaultTolerance):
            # a worker's node may have taken servers with it (not noticed yet): a new worker contacts every
            # server when it starts, so those are confirmed now and recovered first
            lost = list(lost) + t.scheduler.probe_servers()
        for err in sorted(lost, key=lambda e: e.role == "worker"):
            key = (err.role, err.index)
            if key in seen:
                continue
            seen.add(key)
            if isinstance(strategy, NoFaultTolerance):
                raise err  # no redundancy: the run stops naming the lost role
            if key not in t.scheduler.dead:
                continue  # recovered together with an earlier loss
            detect = t.detect_seconds(*key)
            if err.role == "worker":
                start = time.perf_counter()
                while True:
                    try:
                        self.restart_worker(err.index)
                        break
                    except RoleLost as other:  # the new worker met a server that died too: recover it first
                        confirmed = t.scheduler.confirm_failure(other) if other.role == "server" else None
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
                        lost_updates=t.pending_updates[err.index],
                    )
                )
                t.pending_updates[err.index] = 0
                continue
            before = len(strategy.failures)
            resume = strategy.recover(err)
            for record in strategy.failures[before:]:
                if not record.detect_seconds:
                    record.detect_seconds = detect
            rolled_back = self.resume(resume) or rolled_back
        if not strategy.rebuilding:  # else the strategy replenishes when it is done
            t.scheduler.replenish_spares()
        return rolled_back

    def resume(self, resume: Resume) -> bool:
        """Applies a strategy's Resume; True when it rolled training back."""
        t = self.t
        if resume.reader_position is None:
            return False  # nothing rolled back: the failed step is retried
        if t.cluster.mode == "sync":
            del t.losses[resume.step :]
        t.step = resume.step
        t.worker_batches = [int(n) for n in resume.reader_position["worker_batches"]]
        # the readers' sample counts rewind with them: a second rollback to the same position counts what was
        # trained since it once (re-trained samples stay counted in t.samples)
        if "worker_samples" in resume.reader_position:
            t.worker_samples = [int(n) for n in resume.reader_position["worker_samples"]]
        workers = t.live_workers()
        futures = [(i, t.worker(i).seek(n)) for i, n in enumerate(t.worker_batches) if workers[i] is not None]
        answers, lost = t.drain([f for _, f in futures])
        if lost:
            raise lost[0]
        for (i, _), has in zip(futures, answers):
            t.has_next[i] = bool(has)
        return True

    def restart_worker(self, index: int) -> None:
        """A new worker ``index`` continuing from its predecessor's reader position."""
        t = self.t
        t._dense.worker_lost()  # its successor gets the driver's dense state with its first step
        handle = t.scheduler.start_worker(index, t.worker_class, t.worker_args(index))
        previous, before = t.push_seqs[index], t.unlogged_push_seqs[index]
        if previous is not None:  # the predecessor's pushes died with its log (durable or not)
            t.unlogged_push_seqs[index] = previous if before is None else [max(a, b) for a, b in zip(before, previous)]
        t.workers[index] = handle
        t.scheduler.worker_restarted(index, handle)
        t.has_next[index] = bool(
            t.result(t.worker(index).seek(t.worker_batches[index]), timeout=max(t.cluster.call_timeout, 120.0))
        )
