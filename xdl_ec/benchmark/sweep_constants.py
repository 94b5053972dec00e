"""The planner's constants from an MTBF sweep's runs (:class:`~xdl_ec.plan.measured_constants.MeasuredConstants`):
each strategy's cost line fitted to its runs, the measured job's rate and bytes per server, ec's rebuild time,
the row memory probe, and the command and load they were measured under."""

from __future__ import annotations

import datetime
import os
import statistics
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from xdl_ec.benchmark.runner import MATRIX, BenchConfig, machine, normal_samples_per_sec
from xdl_ec.plan.measured_constants import MeasuredConstants, RowMemory
from xdl_ec.plan.overhead_model import StrategyCost
from xdl_ec.plan.row_layout import RowLayout


def sweep_command(config: BenchConfig) -> str:
    """The ``xdl-ec bench`` command line that runs this sweep again."""
    parts = ["xdl-ec bench", "--sweep-mtbf", ",".join(f"{m:g}" for m in config.sweep_mtbf or ())]
    parts += ["--rounds", str(config.rounds), "--seed", str(config.seed), "--backend", config.backend]
    if config.quick:
        parts.append("--quick")
    if config.data:
        parts += ["--data", config.data]
    for label in config.variants or ():
        parts += ["--only", label]
    if config.rebuild_share is not None:
        parts += ["--rebuild-share", f"{config.rebuild_share:g}"]
    return " ".join(parts)


def table_bytes_per_server(workload: Any, report: Mapping[str, Any]) -> float:
    """Record bytes the fullest server of ``report`` held (its rows of each table times the table's record)."""
    record = {t.name: RowLayout.of_table(t).record_bytes for t in workload.job.tables}
    per_server = [sum(n * record[name] for name, n in s.get("rows", {}).items()) for s in report.get("servers", [])]
    return float(max(per_server, default=0))


def young_save_seconds(label: str, runs: Sequence[Mapping[str, Any]]) -> float:
    """Mean seconds of one checkpoint save of ``label``'s runs when it checkpoints at Young's interval (ckpt's
    ``auto``), else 0."""
    variant = next(v for v in MATRIX if v.label == label)
    if variant.ft != "ckpt" or variant.options.get("ckpt_interval") != "auto":
        return 0.0
    saves = [r["save_seconds"] for r in runs if r["strategy"] == label and r.get("save_seconds")]
    return statistics.fmean(saves) if saves else 0.0


def sweep_constants(
    config: BenchConfig,
    workload: Any,
    runs: Sequence[Mapping[str, Any]],
    references: Sequence[Mapping[str, Any]],
    labels: Sequence[str],
    row_memory: RowMemory,
    load_start: Tuple[float, float, float],
) -> MeasuredConstants:
    """The constants of a finished sweep (a strategy kind the sweep did not run has no cost in them)."""
    ft_of = {v.label: v.ft for v in MATRIX}
    costs: Dict[str, StrategyCost] = {}
    chosen: Dict[str, str] = {}
    for label in labels:
        ft = ft_of[label]
        if ft in chosen or ft == "none":
            continue
        points = [
            (r["failures_per_second"], r["overhead"])
            for r in runs
            if r["strategy"] == label and r["status"] == "ok" and r["overhead"] is not None
        ]
        if points:
            chosen[ft], costs[ft] = label, StrategyCost.fit(points, young_save_seconds(label, runs))
    rates = [normal_samples_per_sec(r["report"]) for r in references]
    rebuilds: List[float] = [
        r["rebuild_seconds_mean"]
        for r in runs
        if r["strategy"] == chosen.get("ec") and r["status"] == "ok" and r["rebuild_seconds_mean"] is not None
    ]
    return MeasuredConstants(
        costs=costs,
        labels=chosen,
        samples_per_sec=statistics.median(r for r in rates if r),
        bytes_per_server=table_bytes_per_server(workload, references[0]["report"]),
        rebuild_seconds=statistics.fmean(rebuilds) if rebuilds else 0.0,
        row_memory=row_memory,
        provenance={
            "command": sweep_command(config),
            "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
            "machine": machine(),
            "servers": config.cluster_config().servers,
        },
    )
