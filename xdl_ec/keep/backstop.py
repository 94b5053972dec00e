"""Backstop: incremental saves of a run in the background, for what parity cannot cover (``--ft ec
--backstop-every Ns``): more than r servers lost at once, or the driver process lost with the dense state.

At a step boundary every ``every`` (and with no rebuild under way), the backstop takes a CUT, the only part on the
step's path: the workers' pushes are flushed, then each server hands over the rows changed since the previous cut
(:meth:`~xdl_ec.ps.server.ParameterServer.take_changes`, the shard's dirty-slot set: the cost is the rows changed,
not the table), and the driver copies the dense state, the reader positions and the step. A background thread
then writes them as one save (:mod:`xdl_ec.keep.checkpoint`: atomic, sha256 per file) while training goes on; at most
one write is in flight (a cut waits for the previous write).

Every ``compact_every``-th cut is FULL (every row), and so is the first one and any server's part after it was
replaced (a rebuilt server has not been tracking): an increment's ``chain`` names the saves since the last full
one, oldest first, and :class:`~xdl_ec.keep.saved_run.SavedRun` replays them (a key's newest row wins). Once a full
save is committed, every older save is deleted; a chain is never broken by pruning.

A backstop save is an ordinary save: ``--resume DIR`` continues from the newest one, replaying the steps after it
(with ``--deterministic`` the run ends at the failure-free model). A run that stops because it cannot recover
writes ``STOPPED.json`` beside the saves (its step and samples), so the resumed run's report gives
``retrained_samples``; a driver killed outright writes nothing, and the report then says only where it resumed.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from typing import Any, Dict, List, Optional, Union

import numpy as np

from xdl_ec.keep.change_feed import ChangeFeed
from xdl_ec.keep.checkpoint import CheckpointStore, JobCheckpoint, ShardCheckpoint
from xdl_ec.keep.run_saver import RunSaver
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.settings import checks
from xdl_ec.sparse.table import EmbeddingTable

WRITE_TIMEOUT = 600.0  # seconds a cut waits for the previous write
STOPPED = "STOPPED.json"  # beside the saves: how far a run that could not recover got


class Backstop(RunSaver):
    """Incremental background saves of a cluster run into ``directory`` (see the module docstring)."""

    def __init__(
        self,
        directory: Union[str, os.PathLike],
        job: JobSpec,
        *,
        seed: int,
        deterministic: bool,
        workers: int,
        every: str,
        compact_every: int = 10,
        source: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(
            directory, job, seed=seed, deterministic=deterministic, workers=workers, every=every, keep=1, source=source
        )
        self.store = CheckpointStore(directory, keep=1 << 30)  # pruned by chains, not by count
        self.compact_every = checks.positive_int("compact_every", compact_every)
        self._templates = {t.name: EmbeddingTable.from_config(t) for t in job.tables}  # configs for the files
        self._chain: List[str] = []  # saves since (and with) the last full one
        self._since_full: Optional[int] = None  # increments since the last full cut (None: none yet)
        self._writer: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self.cut_seconds = 0.0
        self.increments: List[Dict[str, Any]] = []  # per cut: step, full, rows, bytes, write seconds

    def after_step(self, run: Any) -> None:
        if self.due(run.step) and not run.strategy.rebuilding:  # a rebuilding server is read whole by a cut
            self.save(run)

    def save(self, run: Any) -> Optional[JobCheckpoint]:  # type: ignore[override]  # written in the background
        """Takes a cut of ``run`` (a PSTrainer) and writes it in the background; returns None (see :meth:`wait`)."""
        self.wait()
        start = time.perf_counter()
        run.quiesce(settle=False)
        full = self._since_full is None or self._since_full + 1 >= self.compact_every
        changes = ChangeFeed.of(run).take(self, full)  # shared with serving exports, if any
        weights, optimizer = run.dense_state()
        position, extra = run.reader_position(), self.extra(run)
        step = run.step
        self.cut_seconds += time.perf_counter() - start
        # full when every server cut whole: asked for, or a server that must (fresh, rebuilt, a bounded table)
        full = all(c["full"] for c in changes)
        chain = [] if full else list(self._chain)
        extra["backstop"] = {"full": full, "chain": chain}
        self._writer = threading.Thread(
            target=self._write,
            name="xdl-ec-backstop",
            daemon=True,
            args=(step, changes, weights, optimizer, position, extra, start),
        )
        self._writer.start()
        self._since_full = 0 if full or self._since_full is None else self._since_full + 1
        if self.policy is not None:
            self.policy.saved(step, time.perf_counter(), time.perf_counter() - start)
        return None

    def _write(
        self,
        step: int,
        changes: List[Dict[str, Any]],
        weights: List[np.ndarray],
        optimizer: List[np.ndarray],
        position: Dict[str, Any],
        extra: Dict[str, Any],
        start: float,
    ) -> None:
        try:
            written = time.perf_counter()
            pending = self.store.begin(step)
            try:
                nbytes = 0
                for server, change in enumerate(changes):
                    part = ShardCheckpoint.write(
                        pending.server_dir(server), self._templates, step=step, atomic=False, rows=change["tables"]
                    )
                    nbytes += part.nbytes()
                saved = pending.commit(
                    dense_weights=weights, dense_optimizer=optimizer, reader_position=position, extra=extra
                )
            except BaseException:
                pending.abort()
                raise
            if extra["backstop"]["full"]:
                self._prune_before(saved)
                self._chain = []
            self._chain.append(saved.directory.name)
            self.saves += 1
            self.bytes += nbytes
            self.seconds += time.perf_counter() - start
            self.last = saved
            self.increments.append(
                {
                    "step": step,
                    "full": extra["backstop"]["full"],
                    "rows": int(sum(len(r["keys"]) for c in changes for r in c["tables"].values())),
                    "bytes": nbytes,
                    "write_seconds": time.perf_counter() - written,
                }
            )
        except BaseException as err:  # noqa: BLE001 - reported by the next cut or wait
            self._error = err

    def _prune_before(self, saved: JobCheckpoint) -> None:
        for old in self.store._committed():
            if old.name < saved.directory.name:  # names sort by sequence number
                shutil.rmtree(old, ignore_errors=True)

    def note_stop(self, step: int, samples: int, cause: str) -> None:
        """The run cannot recover: records how far it got beside the saves (``STOPPED.json``), so the resumed run
        reports the samples it trains again."""
        record = {"step": int(step), "samples": int(samples), "cause": cause}
        path = self.store.root / STOPPED
        self.store.root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, sort_keys=True))
        os.replace(tmp, path)

    def wait(self) -> None:
        """Waits for the write in flight; its failure is raised here (the run stops: a backstop that cannot
        write is no backstop)."""
        if self._writer is not None:
            self._writer.join(WRITE_TIMEOUT)
            if self._writer.is_alive():
                raise TimeoutError(f"backstop: writing into {self.store.root} took over {WRITE_TIMEOUT:.0f} s")
            self._writer = None
        if self._error is not None:
            err, self._error = self._error, None
            raise RuntimeError(f"backstop: writing into {self.store.root} failed: {err}") from err

    def report(self) -> Dict[str, Any]:
        return {
            **super().report(),
            "cut_seconds": self.cut_seconds,
            "compact_every": self.compact_every,
            "increments": list(self.increments),
        }

    def close(self) -> None:
        for table in self._templates.values():
            table.close()
        self._templates.clear()
        super().close()
