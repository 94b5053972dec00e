"""RunSaver: consistent saves of a training run (``job.save``, ``--save-dir DIR --save-every N|Ns --keep K``).

A save is one cut of the whole run at a step boundary: the run is quiesced (every push sent so far applied, no
rebuild under way), then every server writes its tables (records with optimizer state) into the pending save in
parallel, and the driver adds the dense weights and their optimizer state, the reader position of every worker,
the step and what :class:`~xdl_ec.keep.saved_run.SavedRun` checks on resume (job, seed, worker count, the job's source).
The commit is atomic (temporary directory, fsync, rename, a manifest with the sha256 of every file; see
:mod:`xdl_ec.keep.checkpoint`), and only the newest ``keep`` saves are kept.

What a run offers a saver (:class:`~xdl_ec.job.local_run.LocalRun` and :class:`~xdl_ec.ps.training.PSTrainer`):
``step``, ``samples``, ``signature``, ``quiesce()``, ``save_tables(pending)``, ``dense_state()``, ``reader_position()``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional, Protocol, Union

from xdl_ec.keep.checkpoint import CheckpointStore, JobCheckpoint, PendingCheckpoint
from xdl_ec.keep.save_dir_lock import SaveDirLock
from xdl_ec.keep.saved_run import SAVE_FORMAT
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.settings.interval import IntervalPolicy, parse_interval


class SaveableRun(Protocol):
    step: int
    samples: int
    signature: Any  # the batch signature the dense model was built for (FeatureBatch.signature)

    def quiesce(self) -> None: ...

    def save_tables(self, pending: PendingCheckpoint) -> int: ...

    def dense_state(self) -> tuple: ...

    def reader_position(self) -> Dict[str, Any]: ...


class RunSaver:
    """Saves runs of ``job`` into the save root ``directory``; ``every`` (``"500"`` steps or ``"60s"``) makes
    :meth:`after_step` save periodically, None saves only when asked."""

    def __init__(
        self,
        directory: Union[str, os.PathLike],
        job: JobSpec,
        *,
        seed: int,
        deterministic: bool,
        workers: int,
        every: Optional[str] = None,
        keep: int = 2,
        source: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.lock = SaveDirLock(directory)  # before anything is written or rotated: a live run holds it
        self.store = CheckpointStore(directory, keep=keep)
        self.policy: Optional[IntervalPolicy] = None
        if every is not None:
            if isinstance(every, str) and every.strip().lower() == "auto":
                raise ValueError(
                    "save every: 'auto' is for --ckpt-interval; give a step count (e.g. '500') or seconds (e.g. '60s')"
                )
            self.policy = parse_interval(every)
        self.job, self.seed, self.deterministic, self.workers = job, seed, deterministic, workers
        self.source = source
        self.saves = 0
        self.seconds = 0.0
        self.bytes = 0
        self.last: Optional[JobCheckpoint] = None

    def start(self, step: int) -> None:
        """The run begins (or resumes) at ``step``: the first periodic save comes one interval after it."""
        if self.policy is not None:
            self.policy.restart(step, time.perf_counter())

    def due(self, step: int) -> bool:
        return self.policy is not None and self.policy.due(step, time.perf_counter())

    def after_step(self, run: SaveableRun) -> None:
        """At a step boundary with no push in flight: saves when the interval has passed."""
        if self.due(run.step):
            self.save(run)

    def save(self, run: SaveableRun) -> JobCheckpoint:
        """One consistent save of ``run`` at its current step (see the module docstring)."""
        start = time.perf_counter()
        run.quiesce()
        pending = self.store.begin(run.step)
        try:
            written = run.save_tables(pending)
            weights, optimizer = run.dense_state()
            saved = pending.commit(
                dense_weights=weights,
                dense_optimizer=optimizer,
                reader_position=run.reader_position(),
                extra=self.extra(run),
            )
        except BaseException:
            pending.abort()
            raise
        end = time.perf_counter()
        self.saves += 1
        self.seconds += end - start
        self.bytes += written
        self.last = saved
        if self.policy is not None:
            self.policy.saved(run.step, end, end - start)
        return saved

    def extra(self, run: SaveableRun, **more: Any) -> Dict[str, Any]:
        """What a save records beside the state, for :class:`~xdl_ec.keep.saved_run.SavedRun`'s checks."""
        return {
            "format": SAVE_FORMAT,
            "job": self.job.describe(),
            "source": self.source,
            "seed": self.seed,
            "deterministic": self.deterministic,
            "workers": self.workers,
            "samples": int(run.samples),
            "signature": run.signature,
            **more,
        }

    def close(self) -> None:
        """The run is over: its save directory is free for the next run (idempotent)."""
        self.lock.release()

    def report(self) -> Dict[str, Any]:
        return {
            "directory": str(self.store.root),
            "saves": self.saves,
            "seconds": self.seconds,
            "bytes": self.bytes,
            "last": None if self.last is None else str(self.last.directory),
            "last_step": None if self.last is None else self.last.step,
        }
