"""``--ft ckpt``: XDL's fault tolerance, the baseline: periodic job checkpoints and a global rollback.

Every ``--ckpt-interval`` (steps, ``Ns`` seconds, or ``auto`` = Young's ``sqrt(2 * save cost * MTBF)`` from the
measured save cost and ``--mtbf``), at a step boundary with every push applied (``ClusterView.quiesce``), each
server's agent (:class:`~xdl_ec.ft.shard_saver.ShardSaver`) writes its own shards (records and optimizer state) into
the pending checkpoint directory; the driver adds the dense parameters, the dense optimizer state and the reader
position (batches trained by each worker) and
commits it atomically (:class:`~xdl_ec.keep.checkpoint.CheckpointStore`: a crash mid-save leaves the previous
checkpoint the latest). Step 0 is saved at :meth:`attach`, so there is always a checkpoint to roll back to.

On a server's death, EVERY server rolls back: dead servers are replaced by empty ones, then all load their part of
the latest checkpoint, the driver restores the dense state, and the :class:`Resume` rewinds the step counter and
every worker's reader to the saved position. Training re-executes the steps after the checkpoint; with
``--deterministic`` in sync mode the replay recomputes exactly what was lost, so the final model equals the
failure-free run's (the report's ``lost_samples`` counts the re-trained samples).

Servers must see the checkpoint directory (one machine, or a shared filesystem on a Ray cluster).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, Optional

from xdl_ec.ft.shard_saver import ShardSaver
from xdl_ec.keep.checkpoint import CheckpointStore
from xdl_ec.ps.fault_tolerance import FailureRecord, FaultTolerance, Resume, Unrecoverable
from xdl_ec.settings.interval import IntervalPolicy, parse_interval

if TYPE_CHECKING:
    from xdl_ec.ps.cluster_view import ClusterView

__all__ = ["Checkpointing"]


class Checkpointing(FaultTolerance):
    """Periodic full checkpoints of servers + dense state + reader position; rollback of every server on a loss.

    Args:
      interval: a :class:`IntervalPolicy` or its text (``"100"`` steps, ``"30s"``, ``"auto"``).
      directory: where checkpoints go (None: a temporary directory removed at the end of the run).
      mtbf: the job's mean time between failures in seconds (``auto`` needs it).
      keep: committed checkpoints kept.
    """

    name = "ckpt"

    def __init__(
        self, interval: Any = "auto", directory: Optional[str] = None, mtbf: Optional[float] = None, keep: int = 2
    ) -> None:
        super().__init__()
        self.policy: IntervalPolicy = (
            interval if isinstance(interval, IntervalPolicy) else parse_interval(interval, mtbf)
        )
        self._own_dir = directory is None
        # absolute: the servers (Ray actors have another working directory) write there
        self._directory = None if directory is None else os.path.abspath(directory)
        self.keep = keep
        self.store: Optional[CheckpointStore] = None
        self.saves = 0
        self.checkpoint_bytes = 0
        self.last_step: Optional[int] = None

    def attach(self, view: ClusterView) -> None:
        super().attach(view)
        self._attach_savers(range(view.num_servers))
        if self._directory is None:
            self._directory = tempfile.mkdtemp(prefix="xdl-ec-ckpt-")
        self.store = CheckpointStore(self._directory, keep=self.keep)
        self.save(0)

    def _attach_savers(self, servers: Iterable[int]) -> None:
        _, lost = self.view.wait([self.view.server(i).attach_agent(ShardSaver) for i in servers])
        if lost:
            raise lost[0]

    # ---- saving ---------------------------------------------------------------------------------------
    def save(self, step: int) -> None:
        """A job checkpoint of ``step``: every server writes its part (in parallel), then one atomic commit."""
        v = self.view
        start = time.perf_counter()
        v.quiesce()
        if self.store is None:
            raise RuntimeError("ckpt: the strategy is not attached to a run (attach() opens its store)")
        pending = self.store.begin(step)
        try:
            futures = [v.agent(i, ShardSaver).save(str(pending.server_dir(i)), step) for i in range(v.num_servers)]
            _, lost = v.wait(futures)
            if lost:
                raise lost[0]
            weights, optimizer = v.dense_variables()
            saved = pending.commit(
                dense_weights=weights, dense_optimizer=optimizer, reader_position=v.reader_position()
            )
        except BaseException:
            pending.abort()
            raise
        end = time.perf_counter()
        self.checkpoint_seconds += end - start
        self.checkpoint_bytes += sum(saved.server(s).nbytes() for s in saved.servers)
        self.saves += 1
        self.last_step = step
        self.policy.saved(step, end, end - start)

    def resumed(self, step: int) -> None:
        """A resumed run's rows are loaded: roll back to them, not to the empty servers of :meth:`attach`."""
        self.save(step)

    def wants_boundary(self, step: int) -> bool:
        """Whether a save is due (async mode: the driver then lets the steps in flight finish)."""
        return self.policy.due(step, time.perf_counter())

    def after_step(self, step: int) -> None:
        if self.policy.due(step, time.perf_counter()):
            self.save(step)

    # ---- recovery -------------------------------------------------------------------------------------
    def recover(self, lost: BaseException) -> Resume:
        v = self.view
        start = time.perf_counter()
        latest = self.store.latest() if self.store is not None else None
        if latest is None:
            raise Unrecoverable(f"{lost}: --ft ckpt has no checkpoint in {self._directory} to roll back to")
        dead = v.dead_servers()
        for index in dead:
            v.replace_server(index)
        self._attach_savers(dead)
        futures = [v.agent(i, ShardSaver).load(str(latest.server(i).directory)) for i in range(v.num_servers)]
        _, more = v.wait(futures)
        if more:
            raise Unrecoverable(f"{more[0]} while rolling back to the checkpoint of step {latest.step}") from more[0]
        weights, optimizer = v.dense_variables()
        for variables, values in ((weights, latest.dense_weights()), (optimizer, latest.dense_optimizer())):
            for variable, value in zip(variables, values):
                variable.assign(value.reshape(tuple(variable.shape)))  # a saved scalar may come back as [1]
        position = latest.reader_position
        retrained = v.samples_since(position)
        now = time.perf_counter()
        self.policy.restart(latest.step, now)
        failed_step = v.step + 1
        for n, index in enumerate(dead):  # servers lost together share one rollback: its samples count once
            self.failures.append(
                FailureRecord(
                    step=failed_step,
                    role="server",
                    index=index,
                    rebuild_seconds=now - start,
                    samples_per_sec_during_rebuild=0.0,  # every server rolls back
                    lost_samples=retrained if n == 0 else 0,
                )
            )
        return Resume(step=latest.step, reader_position=position, lost_samples=retrained)

    def report(self) -> Dict[str, Any]:
        out = super().report()
        out["checkpoint"] = {
            "saves": self.saves,
            "bytes": self.checkpoint_bytes,
            "directory": self._directory,
            "interval_seconds": self.policy.interval_seconds,
            "interval_steps": self.policy.steps,
            "save_seconds": self.policy.save_cost,
        }
        return out

    def close(self) -> None:
        """Removes the temporary checkpoint directory (a user-given ``--ckpt-dir`` is kept)."""
        if self._own_dir and self._directory is not None and Path(self._directory).is_dir():
            shutil.rmtree(self._directory, ignore_errors=True)
