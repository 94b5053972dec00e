"""RunPersistence: a parameter-server run's state as a save reads it and a resume writes it back.

A save (:class:`~xdl_ec.keep.run_saver.RunSaver`) asks, at a quiesced step boundary, every server to write its
tables, and the driver for the dense state and every worker's reader position; a backstop cut asks for the rows
changed since the last one. A resume routes a save's rows to this cluster's servers (any server count) and sets
the dense state, the step and the readers from it.
"""

from __future__ import annotations

from typing import Any, Dict, List

from xdl_ec.keep.checkpoint import PendingCheckpoint
from xdl_ec.keep.saved_run import SavedRun
from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.dense_sync import DriverDense
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.running_cluster import RunningCluster
from xdl_ec.ps.training_state import TrainingState


class RunPersistence:
    """Saves and restores the run of ``cluster`` at ``state`` with the driver's ``dense`` model."""

    def __init__(self, cluster: RunningCluster, state: TrainingState, dense: DriverDense) -> None:
        self.cluster, self.state, self.dense = cluster, state, dense

    def save_tables(self, pending: PendingCheckpoint) -> int:
        """Every server writes its tables into the pending save (in parallel); returns the bytes written. The
        strategy's rebuild, if one is under way, completes first: a save reads every server whole."""
        self.cluster.strategy.finish_rebuild()
        servers = self.cluster.scheduler.servers
        written = self.cluster.answers(
            [Remote(s, ServerAPI).save(str(pending.server_dir(i)), pending.step) for i, s in enumerate(servers)]
        )
        return int(sum(written))

    def dense_state(self) -> tuple:
        """The driver's dense state, up to date: (weights, optimizer variables)."""
        return self.dense.current().state()

    def reader_position(self) -> Dict[str, Any]:
        """Where training is: the step and each worker's batches, samples and its input's own position."""
        cluster, state = self.cluster, self.state
        # each worker's input's own position (an endless stream's file and offset), asked only when saving: a
        # resume continues there instead of re-reading the input up to its batch count
        # (a worker lost meanwhile gives None: its input is skipped to instead)
        inputs, _ = cluster.drain([cluster.worker(i).input_position() for i in range(len(cluster.workers))])
        return {
            "step": state.step,
            "worker_batches": list(state.worker_batches),
            "worker_samples": list(state.worker_samples),
            "worker_inputs": list(inputs),
        }

    def restore(self, saved: SavedRun) -> None:
        """Continues ``saved`` (checked against this job by the caller): its rows routed to this cluster's servers
        (any server count) through their agents, the dense state, the step and every worker's reader position;
        then the strategy takes its own copy (``resumed``)."""
        cluster, state = self.cluster, self.state
        saved.check_run(cluster.config.workers)
        servers = cluster.scheduler.servers
        for table in cluster.job.tables:
            routed = saved.routed_rows(table.name, len(servers))
            cluster.answers([Remote(servers[i], ServerAPI).load_rows(table.name, rows) for i, rows in routed.items()])
        self.dense.take().load_state(*saved.dense_state())
        state.step = saved.step
        state.step_times.resume(saved.step)
        state.samples = state.restored_samples = saved.samples
        state.worker_batches = saved.worker_batches
        state.worker_samples = saved.worker_samples
        answers = cluster.answers(
            [
                cluster.worker(i).seek(n, position)
                for i, (n, position) in enumerate(zip(state.worker_batches, saved.worker_inputs))
            ]
        )
        state.has_next = [bool(a) for a in answers]
        cluster.quiesce()
        cluster.strategy.resumed(state.step)

    def take_changes(self, full: bool) -> List[Dict[str, Any]]:
        """Every server's rows changed since its previous cut (or all of them), for an incremental backstop."""
        return self.cluster.answers([Remote(s, ServerAPI).take_changes(full) for s in self.cluster.scheduler.servers])
