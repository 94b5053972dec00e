"""TensorBoardLog: a run's scalars as TensorBoard event files (``job.fit(logdir=)``, ``xdl-ec train --logdir DIR``).

A run hook: at step boundaries, once ``every`` seconds have passed since its last write, it writes at the run's step
``loss`` (the mean training loss since the last write), ``samples_per_sec`` (since the last write),
``progressive/auc`` and ``progressive/logloss`` (the run's progressive validation window; per head
``progressive/<head>/auc`` ...), ``rows/<table>`` (rows held per table) and ``saves``; on servers also
``bytes_per_sample/pulled`` and ``/pushed`` (embedding bytes the workers moved per sample since the start),
``failures`` (failures so far) and under ``--ft ec`` ``parity/lag_deltas`` (deltas recorded that some live parity
holder has not applied: how far parity trails the shards); with a memory budget ``tier/<table>/rows_in_memory``,
``rows_on_disk``, ``disk_bytes``, ``disk_read_bytes``, ``disk_write_bytes`` and ``memory_hit_rate`` (the report's
counts of the disk tier) and ``memory/budget_bytes`` and ``memory/peak_rss_bytes`` (per server process on servers:
``memory/server-<index>/...``); each failure, once its rebuild is complete, as
``failure/seconds_to_full_redundancy`` at the step it failed. At the end of the fit the same once more, with
``failures`` counting the kills injected into the run. Writing by time, not every step, keeps its cost a fraction of
a percent (the window's exact AUC takes tens of milliseconds over 100k samples; the cluster figures one round of
calls to the servers and workers).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Dict, Iterable, Optional, Set, Tuple, Union

from xdl_ec.settings import checks

DEFAULT_EVERY_SECONDS = 10.0


class TensorBoardLog:
    """Writes a run's scalars under ``logdir`` (see the module docstring)."""

    def __init__(self, logdir: Union[str, os.PathLike], every: float = DEFAULT_EVERY_SECONDS) -> None:
        import tensorflow as tf

        if os.path.exists(logdir) and not os.path.isdir(logdir):
            raise ValueError(f"logdir: {logdir} exists and is not a directory")
        self.every = checks.number("logdir every", every, 0.0)
        self.logdir = os.fspath(logdir)
        from tensorflow.core.framework import summary_pb2

        self._tf = tf
        self._writer = tf.summary.create_file_writer(self.logdir)
        # what TensorBoard's scalar plugin writes (plugin "scalars", a float32 scalar tensor), with TensorFlow's own
        # summary op: tf.summary.scalar needs the tensorboard package, the event files only TensorFlow
        self._metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summary_pb2.DATA_CLASS_SCALAR,
        )
        self._last_time = time.perf_counter()
        self._last_samples: Optional[int] = None
        self._last_losses = 0
        self._failures_written: Set[Tuple[int, str, int]] = set()  # (step, role, index) of each failure written
        self.writes = 0

    def start(self, run: Any) -> None:
        """The fit begins (a resumed run at its saved samples): rates count from here."""
        self._last_time, self._last_samples, self._last_losses = time.perf_counter(), run.samples, len(run.losses)

    def due(self, step: int) -> bool:
        """Async training holds new steps for a boundary when a write is due."""
        return time.perf_counter() - self._last_time >= self.every

    def after_step(self, run: Any) -> None:
        if self.due(run.step):
            self.write(run)

    def write(self, run: Any, extra: Optional[Dict[str, float]] = None) -> None:
        """The scalars of ``run`` (a LocalRun or PSTrainer) at its step, plus ``extra`` {name: value}."""
        now = time.perf_counter()
        scalars: Dict[str, float] = {}
        losses = run.losses[self._last_losses :]
        if losses:
            scalars["loss"] = sum(losses) / len(losses)
        if self._last_samples is not None and now > self._last_time:
            scalars["samples_per_sec"] = (run.samples - self._last_samples) / (now - self._last_time)
        progressive = run.progressive.report()
        for head, figures in [(None, progressive), *progressive.get("heads", {}).items()]:
            prefix = "progressive" if head is None else f"progressive/{head}"
            for name in ("auc", "logloss"):
                if figures.get(name) is not None:
                    scalars[f"{prefix}/{name}"] = figures[name]
        for table, rows in run.rows_per_table().items():
            scalars[f"rows/{table}"] = rows
        savers = [hook.saves for hook in run.hooks if isinstance(getattr(hook, "saves", None), int)]
        if savers:
            scalars["saves"] = sum(savers)
        strategy = getattr(run, "strategy", None)
        scalars.update(self._cluster_scalars(run, strategy))
        scalars.update(self._tier_scalars(run))
        scalars.update(extra or {})
        failures = getattr(strategy, "failures", None) or []
        with self._writer.as_default():
            for name, value in scalars.items():
                self._scalar(name, value, run.step)
            self._write_failures(dataclasses.asdict(f) for f in failures)
        self._writer.flush()
        self._last_time, self._last_samples, self._last_losses = now, run.samples, len(run.losses)
        self.writes += 1

    @staticmethod
    def _cluster_scalars(run: Any, strategy: Any) -> Dict[str, float]:
        """What a run on servers adds: bytes per sample, failures so far and parity's lag (under ec)."""
        scalars: Dict[str, float] = {}
        if hasattr(run, "bytes_per_sample"):
            moved = run.bytes_per_sample()
            scalars["bytes_per_sample/pulled"] = moved["bytes_pulled_per_sample"]
            scalars["bytes_per_sample/pushed"] = moved["bytes_pushed_per_sample"]
        if strategy is not None and hasattr(strategy, "failures"):
            scalars["failures"] = len(strategy.failures)
        if hasattr(strategy, "parity_lag"):
            scalars["parity/lag_deltas"] = strategy.parity_lag()
        return scalars

    @staticmethod
    def _tier_scalars(run: Any) -> Dict[str, float]:
        """What a run with a memory budget adds: per table its disk tier's counts (summed over the servers) as
        ``tier/<table>/<count>``, and the memory of each process as ``memory/budget_bytes`` and
        ``memory/peak_rss_bytes`` (on servers ``memory/server-<index>/...``)."""
        tiers = run.tier_report() if hasattr(run, "tier_report") else None
        if tiers is None:
            return {}
        scalars: Dict[str, float] = {}
        for table, counts in tiers["tables"].items():
            scalars.update({f"tier/{table}/{name}": float(value) for name, value in counts.items()})
        for process, memory in tiers["memory"].items():
            prefix = f"memory/{process}/" if process else "memory/"
            scalars.update({prefix + name: float(value) for name, value in memory.items()})
        return scalars

    def _write_failures(self, failures: Iterable[Dict[str, Any]]) -> None:
        """Each failure whose rebuild is complete, once, at the step it failed."""
        for f in failures:
            key = (int(f["step"]), str(f["role"]), int(f["index"]))
            seconds = f.get("seconds_to_full_redundancy")
            if seconds is None or key in self._failures_written:
                continue
            self._scalar("failure/seconds_to_full_redundancy", seconds, key[0])
            self._failures_written.add(key)

    def _scalar(self, name: str, value: float, step: int) -> None:
        self._tf.summary.write(
            name, self._tf.constant(float(value), self._tf.float32), step=step, metadata=self._metadata
        )

    def scalars(self, values: Dict[str, float], step: int) -> None:
        """``values`` {name: value} at ``step`` (an export's freshness and size, at the step it serves)."""
        with self._writer.as_default():
            for name, value in values.items():
                self._scalar(name, value, step)
        self._writer.flush()

    def finish(self, run: Any, report: Dict[str, Any]) -> None:
        """The fit's last scalars: the run's, its failures and saves."""
        extra = {"failures": float(len(report.get("injected", [])))}
        if "saves" in report:
            extra["saves"] = float(report["saves"]["saves"])
        self.write(run, extra)
        with self._writer.as_default():  # the failures whose rebuilds completed as the run closed
            self._write_failures(report.get("failures", []))
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
