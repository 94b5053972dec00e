"""LocalRun: a job trained in this process, the default (no servers, no services): one
:class:`~xdl_ec.ps.worker.Worker` over the job's tables held here (:class:`~xdl_ec.job.local_tables.LocalTables`).

Same worker code, same TF step and same per-key optimizer arithmetic as a cluster run, so a one-worker cluster
run with ``deterministic=True`` ends at this run's ``model_digest``.

The input thread prepares the next batches (reading, checks, unique ids) while a step trains. The report's
``stages`` says where the step's time went (:mod:`xdl_ec.ps.step_stages`).

A budgeted run whose spill dir fills finishes the step on its reserve's room and stops at the boundary after it
with :class:`~xdl_ec.sparse.disk_tier_full.DiskTierFull` (the job saves there when it has a save dir).
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, Iterable, Optional

import numpy as np

from xdl_ec.job.local_tables import LocalTables
from xdl_ec.job.trained_model import TrainedModel
from xdl_ec.keep.checkpoint import PendingCheckpoint
from xdl_ec.keep.saved_run import SavedRun
from xdl_ec.model.digest import model_digest, streamed_model_digest
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.model.progressive import ProgressiveWindow
from xdl_ec.model.step_outputs import LAST_STEPS, StepOutputs
from xdl_ec.ps.progress import Progress
from xdl_ec.ps.step_stages import StageClock
from xdl_ec.ps.step_times import StepTimes
from xdl_ec.ps.worker import RunSettings, Worker
from xdl_ec.settings import checks
from xdl_ec.sparse.disk_tier_full import DiskTierFull, spill_dir_of
from xdl_ec.sparse.memory_budget import MemoryBudget, tier_reports
from xdl_ec.sparse.table import as_keys


class LocalRun:
    """Trains ``job`` here; :meth:`fit` trains, :meth:`trained` is the model to predict and evaluate with."""

    def __init__(
        self,
        job: JobSpec,
        settings: RunSettings = RunSettings(),
        progress: bool = False,
        memory: Optional[MemoryBudget] = None,
    ) -> None:
        self.job, self.settings, self.progress, self.memory = job, settings, progress, memory
        self.tables = LocalTables(job.tables, memory)
        # pulls here are synchronous: nothing to prefetch; the model here is the authoritative one
        self.worker = Worker(0, 1, job, settings, [], prefetch_across_steps=False, client=self.tables, apply_dense=True)
        if self.worker.dense is None:
            self.close()
            raise ValueError("input_fn(0, 1): the input yielded no batch (an empty dataset?)")
        self.step = 0
        self.step_times = StepTimes(job.tables)  # the wall time of Evict(ttl_seconds) passes
        self.samples = 0  # trained by the whole run (a resumed run's earlier part included)
        self.losses: list = []
        self.hooks: list = []  # at every step boundary: hook.after_step(run) (a RunSaver's periodic saves)
        self.progressive = ProgressiveWindow()  # this process's steps (a resumed run's window starts empty)

    def fit(self, steps: Optional[int] = None) -> Dict[str, Any]:
        """Trains at most ``steps`` steps (None: until the input is exhausted); the same figures as a cluster
        run's fit."""
        if steps is not None:
            steps = checks.non_negative_int("steps", steps)
        stop = None if steps is None else self.step + steps
        bar = Progress(steps, self.progress, auc=self.progressive.auc)
        timeline = []
        clock = StageClock([self.worker.stats()])
        start = time.perf_counter()
        first_end, first_samples, samples = None, 0, 0
        outputs = StepOutputs()  # the model's extra outputs (an accuracy, an auxiliary loss)
        try:
            while stop is None or self.step < stop:
                more = stop is None or self.step + 1 < stop
                try:
                    result = self.worker.train_step(self.step + 1, None, 1, more, self.step_times.start(self.step + 1))
                except RuntimeError as err:  # a disk-tier write failed even on the reserve's room: no boundary
                    spill_dir = spill_dir_of(err)
                    if spill_dir is None:
                        raise
                    raise DiskTierFull(spill_dir, str(err), self.step, at_boundary=False) from err
                if result is None:
                    break
                if not math.isfinite(result.loss):
                    raise FloatingPointError(
                        f"training diverged at step {self.step + 1}: loss is {result.loss}; lower the learning rates"
                    )
                self.step += 1
                self.losses.append(result.loss)
                outputs.add(result.outputs or {})
                samples += result.samples
                self.samples += result.samples
                if result.labels is not None and result.probabilities is not None:
                    self.progressive.add(result.labels, result.probabilities, result.heads)
                now = time.perf_counter()
                if first_end is None:
                    first_end, first_samples = now, samples
                timeline.append([self.step, now - start, samples, result.loss])
                bar.update(samples, result.loss, result.outputs)
                if self.tables.disk_full is not None:  # the step finished on the reserve's room: stop here
                    raise DiskTierFull(*self.tables.disk_full, self.step, at_boundary=True)
                for hook in self.hooks:
                    hook.after_step(self)
                if not result.has_next:
                    break
        finally:
            bar.close()
        end = time.perf_counter()
        seconds = end - start
        steady = (
            (samples - first_samples) / (end - first_end) if first_end is not None and samples > first_samples else None
        )
        return {
            **outputs.report(),
            "samples": samples,
            "steps": self.step,
            "train_seconds": seconds,
            "samples_per_sec": samples / seconds if seconds > 0 else 0.0,
            "steady_samples_per_sec": steady,
            "final_loss": float(np.mean(self.losses[-LAST_STEPS:])) if self.losses else None,
            "timeline": timeline,
            "progressive": self.progressive.report(),
            "stages": clock.stages([self.worker.stats()]),
        }

    # ---- saving and resuming (see xdl_ec.keep.run_saver) ---------------------------------------------------------
    def quiesce(self, settle: bool = True) -> None:
        """Nothing in flight between steps here: pushes are applied before a step returns."""

    def save_tables(self, pending: PendingCheckpoint) -> int:
        return pending.save_server(0, self.tables.tables).nbytes()

    def dense_state(self) -> tuple:
        return self.worker.built_dense.state()

    @property
    def signature(self) -> Any:
        return self.worker.batch_signature_built()

    def reader_position(self) -> Dict[str, Any]:
        # one worker trains one batch per step: its reader position is the step
        return {
            "step": self.step,
            "worker_batches": [self.step],
            "worker_samples": [self.samples],
            "worker_inputs": [self.worker.input_position()],
        }

    def restore(self, saved: SavedRun) -> None:
        """Continues ``saved`` (checked against this run's job by the caller): its rows, dense state, step and
        reader position."""
        saved.check_run(1)
        for name, table in self.tables.tables.items():
            for rows in saved.rows(name):
                table.load_rows(rows)  # a bounded table's eviction words and pending ids too
        self.worker.built_dense.load_state(*saved.dense_state())
        self.step = saved.step
        self.step_times.resume(saved.step)
        self.samples = saved.worker_samples[0]
        self.worker.seek(saved.worker_batches[0], saved.worker_inputs[0])

    def preload(self, table: str, chunks: Iterable[np.ndarray]) -> int:
        """Creates the rows of every key in ``chunks`` before the first step, each by a pull (the path a step's first
        pull of a key takes: its initializer's row); returns how many keys were asked."""
        if table not in self.tables.tables:
            raise ValueError(f"preload: the job has no table {table!r}")
        t, sent = self.tables.tables[table], 0
        for chunk in chunks:
            keys = np.unique(as_keys(chunk, f"preload[{table!r}] keys"))
            t.pull(keys)
            sent += int(keys.size)
        return sent

    def rows_per_table(self) -> Dict[str, int]:
        """Rows held per table now."""
        return {name: len(t) for name, t in self.tables.tables.items()}

    def trained(self) -> TrainedModel:
        return TrainedModel(self.job, self.tables, self.worker.built_dense, self.worker.batch_signature_built())

    def digest(self) -> str:
        dense = self.worker.built_dense
        if self.memory is None:
            return model_digest(self.tables.exports(), dense.model.weights, dense.optimizer.variables)
        # budgeted: each table's rows in key order a chunk at a time, read through its tier, never all in RAM
        tables = [t.key_order_chunks() for t in self.tables.tables.values()]
        return streamed_model_digest(tables, dense.model.weights, dense.optimizer.variables)

    def report(self) -> Dict[str, Any]:
        report: Dict[str, Any] = {
            "embedding_rows": sum(len(t) for t in self.tables.tables.values()),
            "workers": [self.worker.stats()],
        }
        bounded = {name: t.bounded_report() for name, t in self.tables.tables.items() if t.config.bounded}
        if bounded:  # tables with admit / evict rules (xdl_ec.sparse.row_rules)
            report["tables"] = bounded
        tiers = self.tier_report()
        if tiers is not None:  # the disk tier's counts beside them, and this process's memory
            tables = report.setdefault("tables", {})
            for name, entry in tiers["tables"].items():
                tables.setdefault(name, {}).update(entry)
            report["memory"] = tiers["memory"][""]
        return report

    def tier_report(self) -> Optional[Dict[str, Any]]:
        """A budgeted run's disk tier now: {"tables": {table: its tier counts}, "memory": {"": {"budget_bytes",
        "peak_rss_bytes"}}} (one process: no server name); None without a memory budget."""
        if self.memory is None:
            return None
        tiers = tier_reports([{name: t.tier_counts() for name, t in self.tables.tables.items()}])
        return {"tables": tiers, "memory": {"": self.memory.report()}}

    def close(self) -> None:
        self.worker.close()
