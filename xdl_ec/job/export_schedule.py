"""ExportSchedule: fresh serving while training goes on (``--export-every N|Ns --export-dir DIR``,
``job.fit(export_every=, export_dir=)``).

A run hook. When the fit begins it writes the full SavedModel ``DIR/base`` (:mod:`xdl_ec.job.serving_export`) with a
fresh base id; then every ``every`` (steps, or seconds: ``"60s"``), and once more at the end of the fit, a delta
``DIR/delta-NNNNNN`` (:mod:`xdl_ec.job.serving_delta`): the rows changed since the previous export, the rows removed
and every dense weight. A server in plain TensorFlow applies them in name order (``m.apply_delta``) and then serves
what ``xdl_ec.load`` of a save at the same step predicts.

The rows come from the shards' dirty-slot sets, shared with the backstop through :class:`~xdl_ec.keep.change_feed.
ChangeFeed`: at the step boundary (the only part on the step's path) the pushes are flushed, each shard hands over
its changed rows, and the dense weights are copied; a background thread writes the delta (at most one write in
flight: the next cut waits for it). A table with admit / evict rules is cut whole, as the backstop cuts it (an
eviction pass frees rows the dirty set cannot name): its delta holds the rows trained since the previous export
(their ``last_step`` word) and keys new to serving, and its removed keys are those served before and gone now. After
a failure (a rollback, a rebuilt or replaced server) the next delta is a reset: every table cut whole, cleared and
written again by the server (O(table), once per failure).

Freshness (the report's ``exports.freshness_s``) is the seconds from the boundary after a step to its delta's rename,
when a server can apply it (each record's ``cut_s`` is the part spent at the boundary, on the step's path).
``full_bytes`` is what a delta of every row the model serves (and the dense weights) would take at the last export:
the size a delta saves against.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from xdl_ec.job import serving_delta
from xdl_ec.job.serving_export import write_saved_model
from xdl_ec.keep.change_feed import ChangeFeed
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.settings.interval import parse_interval

WRITE_TIMEOUT = 600.0  # seconds a cut waits for the previous delta's write


class ExportSchedule:
    """Writes a run's base SavedModel and then its deltas into ``directory`` (see the module docstring)."""

    def __init__(self, directory: Union[str, os.PathLike], every: str, job: JobSpec, log: Any = None) -> None:
        self.root = Path(directory).expanduser().absolute()
        check_export_dir(self.root)
        self.policy = parse_export_every(every)
        self.job, self.log = job, log
        self.base_id = uuid.uuid4().hex
        self.sequence = 0
        self.step: Optional[int] = None  # the step of the last export
        self.base_bytes = 0
        self.full_bytes = 0
        self.records: List[Dict[str, Any]] = []  # per delta written: step, freshness_s, bytes, rows, removed
        self._served: Dict[str, np.ndarray] = {}  # bounded tables: the keys served (sorted)
        self._failures = 0  # the run's failures at the last export
        self._logged = 0
        self._writer: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    # ---- the run hook ----------------------------------------------------------------------------------------------
    def start(self, run: Any) -> None:
        """The fit begins (after a resume's restore): writes the base, the full model at the run's step."""
        run.quiesce(settle=False)
        changes = ChangeFeed.of(run).take(self, True)
        exports = {t.name: self._rows_of(t.name, changes)[0] for t in self.job.tables}
        for t in self.job.tables:
            if t.bounded:
                self._served[t.name] = np.sort(exports[t.name]["keys"])
        # the model the signature traces: a cluster's driver copy (up to date), else the run's own
        dense = run.dense if hasattr(run, "take_changes") else run.worker.built_dense
        base = write_saved_model(
            self.job, run.signature, dense, exports, self.root / serving_delta.BASE, self.base_id, run.step
        )
        self._failures = _failures(run)
        self.base_bytes = sum(f.stat().st_size for f in base.rglob("*") if f.is_file())
        self.step = run.step
        self.policy.restart(run.step, time.perf_counter())

    def due(self, step: int) -> bool:
        return self.step is not None and step != self.step and self.policy.due(step, time.perf_counter())

    def after_step(self, run: Any) -> None:
        if self.due(run.step):
            self.export(run)
        self._log_written(run)

    def finish(self, run: Any) -> None:
        """The fit ends: a last delta of its last step (unless the last export is of it), written before returning."""
        if self.step is not None and run.step != self.step:
            self.export(run)
        self.wait()
        self._log_written(run)

    # ---- a delta ---------------------------------------------------------------------------------------------------
    def export(self, run: Any) -> None:
        """Cuts ``run`` at its step boundary and writes the delta in the background."""
        self.wait()
        cut = time.perf_counter()
        run.quiesce(settle=False)
        # a failure may have put older rows back (a rollback, a partial recovery) or dropped rows no dirty set names:
        # this delta then resets every table to its whole cut
        failures = _failures(run)
        reset = failures != self._failures or (self.step is not None and run.step < self.step)
        self._failures = failures
        changes = ChangeFeed.of(run).take(self, reset)
        weights = list(run.dense_state()[0])
        cut_s = time.perf_counter() - cut  # the rest of the delta is made by the writer thread
        dense_bytes = sum(int(np.asarray(w).nbytes) for w in weights)
        rows_now = run.rows_per_table()
        self.full_bytes = dense_bytes + sum(
            serving_delta.payload_bytes(rows_now.get(t.name, 0), t.dim) for t in self.job.tables
        )
        self.sequence += 1
        previous, self.step = self.step, run.step
        self.policy.restart(run.step, time.perf_counter())
        self._writer = threading.Thread(
            target=self._write,
            name="xdl-ec-export",
            daemon=True,
            args=(self.sequence, run.step, previous, changes, reset, weights, cut, cut_s),
        )
        self._writer.start()

    def _rows_of(
        self, name: str, changes: List[Dict[str, Any]], previous: Optional[int] = None, reset: bool = False
    ) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        """A table's rows to send from every server's cut, and its keys removed since the last export (a bounded
        table's, cut whole: the keys served before and absent now; it sends the rows trained since the last export
        and the keys new to serving; ``previous``: the last export's step). ``reset``: the cut is whole, every row is
        sent. A table without rules loses
        no row but through a failure (a reset), so its whole cuts (a backstop's full one, a server's beside a
        bounded table) are sent whole, without removals."""
        parts = [c["tables"][name] for c in changes if len(c["tables"][name]["keys"])]
        dim = next(t.dim for t in self.job.tables if t.name == name)
        if parts:
            keys = np.concatenate([p["keys"] for p in parts])
            values = np.concatenate([np.asarray(p["values"], np.float32).reshape(-1, dim) for p in parts])
        else:
            keys, values = np.zeros([0], np.int64), np.zeros([0, dim], np.float32)
        rows = {"keys": keys, "values": values}
        removed = np.zeros([0], np.int64)
        served = self._served.get(name)
        if served is not None and previous is not None and reset:
            self._served[name] = np.sort(keys)
        elif served is not None and previous is not None:
            last_step = np.concatenate([p["last_step"] for p in parts]) if parts else np.zeros([0], np.int64)
            now = np.sort(keys)
            removed = served[~np.isin(served, now, assume_unique=True)]
            # trained at or after the last export's step (a superset of the rows changed since it), or new to serving
            sent = (last_step >= previous) | ~np.isin(keys, served, assume_unique=True)
            rows = {"keys": keys[sent], "values": values[sent]}
            self._served[name] = now
        return rows, removed

    def _write(
        self,
        sequence: int,
        step: int,
        previous: Optional[int],
        changes: List[Dict[str, Any]],
        reset: bool,
        weights: List[np.ndarray],
        cut: float,
        cut_s: float,
    ) -> None:
        try:
            tables: List[Tuple[str, np.ndarray, np.ndarray, np.ndarray, bool]] = []
            for t in self.job.tables:  # the served keys of bounded tables change only here, one write at a time
                rows, removed = self._rows_of(t.name, changes, previous, reset)
                tables.append((t.name, rows["keys"], rows["values"].reshape(-1, t.dim), removed, reset))
            _, nbytes = serving_delta.write_delta(self.root, self.base_id, sequence, step, tables, weights)
            self.records.append(
                {
                    "sequence": sequence,
                    "step": step,
                    "freshness_s": time.perf_counter() - cut,
                    "cut_s": cut_s,
                    "bytes": nbytes,
                    "rows": int(sum(len(t[1]) for t in tables)),
                    "removed": int(sum(len(t[3]) for t in tables)),
                    "reset": any(t[4] for t in tables),
                }
            )
        except BaseException as err:  # noqa: BLE001 - raised by the next cut or wait
            self._error = err

    def wait(self) -> None:
        """Waits for the delta being written; its failure is raised here (the run stops)."""
        if self._writer is not None:
            self._writer.join(WRITE_TIMEOUT)
            if self._writer.is_alive():
                raise TimeoutError(f"export: writing a delta into {self.root} took over {WRITE_TIMEOUT:.0f} s")
            self._writer = None
        if self._error is not None:
            err, self._error = self._error, None
            raise RuntimeError(f"export: writing a delta into {self.root} failed: {err}") from err

    def _log_written(self, run: Any) -> None:
        """The TensorBoard scalars of the deltas written since the last call (on the training thread)."""
        if self.log is None:
            return
        written = self.records[self._logged :]  # the writer thread may append meanwhile: count what was read
        self._logged += len(written)
        for record in written:
            self.log.scalars(
                {"export/freshness_s": record["freshness_s"], "export/delta_bytes": record["bytes"]}, record["step"]
            )

    def report(self) -> Dict[str, Any]:
        """The run report's ``exports``: count (the base and every delta), freshness_s median and p99 over the
        deltas, delta_bytes (mean per delta), full_bytes (see the module docstring), base_bytes, the directory, and
        cut_seconds: the step path's part, the cuts at the boundary (the writes run beside training)."""
        fresh = [r["freshness_s"] for r in self.records]
        sizes = [r["bytes"] for r in self.records]
        return {
            "directory": str(self.root),
            "base_id": self.base_id,
            "count": (self.step is not None) + len(self.records),
            "deltas": len(self.records),
            "freshness_s": {
                "median": float(np.median(fresh)) if fresh else None,
                "p99": float(np.percentile(fresh, 99)) if fresh else None,
            },
            "delta_bytes": float(np.mean(sizes)) if sizes else None,
            "full_bytes": self.full_bytes,
            "base_bytes": self.base_bytes,
            "cut_seconds": float(sum(r["cut_s"] for r in self.records)),
            "records": list(self.records),
        }


def _failures(run: Any) -> int:
    """Failures the run has recovered from so far (a run in this process has none)."""
    return len(getattr(getattr(run, "strategy", None), "failures", ()))


def parse_export_every(every: str) -> Any:
    """``N`` steps or ``Ns`` seconds (an IntervalPolicy); a clear error for anything else."""
    if not isinstance(every, str) or every.strip().lower() == "auto":
        raise ValueError(f"export_every: give N steps (e.g. '500') or N seconds (e.g. '60s'), got {every!r}")
    try:
        return parse_interval(every)
    except ValueError:
        raise ValueError(
            f"export_every: {every!r} is neither a step count (e.g. '500') nor seconds (e.g. '60s')"
        ) from None


def check_export_dir(root: Path) -> None:
    """The export directory must be new or empty: deltas of another base beside this one's could be applied."""
    if root.exists() and not root.is_dir():
        raise ValueError(f"export_dir: {root} exists and is not a directory; pass a new directory")
    if root.is_dir() and any(root.iterdir()):
        raise ValueError(
            f"export_dir: {root} is not empty (a base and deltas of another run?); pass a new or empty directory"
        )
