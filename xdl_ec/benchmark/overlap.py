"""The ``xdl-ec bench --overlap RUNS`` preset: kills that do not wait for rebuilds.

The main bench lets a rebuild finish before the next kill lands (:mod:`xdl_ec.benchmark.after_rebuild_schedule`),
which hides the window in which redundancy is reduced. Here each strategy trains ``RUNS`` times the quick preset's
model under a plain :class:`~xdl_ec.ft.failure_schedule.FailureSchedule` of seeded kills drawn at a short MTBF (an
eighth of the reference's training time unless ``--mtbf`` is given), at most one per step boundary and as close as
one step apart, so a loss may land while an earlier one is still rebuilt. Every strategy gets the same kills in the
same run; a run survives when it trains to the end, and is exact when its model equals the failure-free one. For
``ec``, a second loss inside the window with r = 1 stops the run ("unrecoverable"): how often that happens is what
the time to full redundancy buys.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

OVERLAP_MIN_GAP = 1  # steps between two kills, at least: a rebuild never gets a head start


def run_overlap(config: Any, runs: int, log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Runs every variant of ``config`` (a :class:`~xdl_ec.benchmark.runner.BenchConfig`; its preset is forced to
    quick) ``runs`` times under overlapping kills; writes overlap.json into ``config.out`` and returns the results:
    per variant the runs survived, those ending at the failure-free model, and ec's seconds to full redundancy."""
    from xdl_ec.benchmark.runner import MATRIX, REFERENCE, failure_steps, quiet_tensorflow, strategy_for, train_once
    from xdl_ec.ft.failure_schedule import FailureSchedule, Kill

    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"overlap: the number of runs must be a positive integer, got {runs!r}")
    config = dataclasses.replace(config, quick=True)
    config.validate()
    quiet_tensorflow()
    workload, cluster = config.workload(), config.cluster_config()
    reference = train_once(workload, cluster)
    timeline = reference["timeline"]
    after_first = timeline[-1][1] - timeline[0][1] if timeline else 0.0
    mtbf = config.mtbf if config.mtbf is not None else max(after_first / 8.0, 1e-3)
    variants = [v for v in MATRIX if v.label != REFERENCE and (config.variants is None or v.label in config.variants)]
    schedules = [
        failure_steps(timeline, mtbf, config.seed + run, cluster.servers, reference["steps"], OVERLAP_MIN_GAP)
        for run in range(runs)
    ]
    log(f"xdl-ec bench --overlap: {runs} runs, MTBF {mtbf:.3f} s, kills per run {[len(s) for s in schedules]}")
    rows: List[Dict[str, Any]] = []
    # ec also paced at step boundaries (--rebuild-share of wall time, rebuild="boundary"): the window that leaves
    plan = [(v, False) for v in variants] + [(v, True) for v in variants if v.ft == "ec"]
    for variant, boundary in plan:
        outcomes: List[Dict[str, Any]] = []
        for run, kills in enumerate(schedules):
            try:  # boundary: the same code, its rebuild paced at step boundaries
                strategy = strategy_for(
                    variant, cluster, mtbf, config.seed + run, config.rebuild_share, "boundary" if boundary else None
                )
            except (ValueError, ImportError) as err:
                outcomes.append({"run": run, "status": "unavailable", "error": str(err)})
                break
            schedule = FailureSchedule([Kill(step, "server", server) for step, server, _ in kills])
            try:
                report = train_once(workload, cluster, strategy, schedule)
            except Exception as err:  # noqa: BLE001 - a run that stops is this preset's measure
                outcomes.append({"run": run, "status": "stopped", "error": f"{type(err).__name__}: {err}"})
                continue
            ttfr = [
                f["seconds_to_full_redundancy"]
                for f in report.get("failures", [])
                if f.get("seconds_to_full_redundancy") is not None
            ]
            outcomes.append(
                {
                    "run": run,
                    "status": "survived",
                    "exact": report["model_digest"] == reference["model_digest"],
                    "failures": len(report.get("failures", [])),
                    "seconds_to_full_redundancy": ttfr,
                }
            )
        survived = [o for o in outcomes if o["status"] == "survived"]
        ttfr_all = [t for o in survived for t in o["seconds_to_full_redundancy"]]
        row = {
            "label": variant.label + (" (boundary)" if boundary else ""),
            "ft": variant.ft,
            "runs": len(outcomes),
            "survived": len(survived),
            "exact": sum(1 for o in survived if o["exact"]),
            "median_seconds_to_full_redundancy": statistics.median(ttfr_all) if ttfr_all else None,
            "outcomes": outcomes,
        }
        rows.append(row)
        log(f"  {row['label']:>20}: survived {row['survived']}/{row['runs']}, exact {row['exact']}")
    results = {
        "preset": "overlap",
        "runs": runs,
        "mtbf_seconds": mtbf,
        "seed": config.seed,
        "backend": config.backend,
        "rebuild_share": config.rebuild_share,
        "kills": [[{"step": s, "server": i} for s, i, _ in kills] for kills in schedules],
        "rows": rows,
    }
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overlap.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def overlap_table(results: Dict[str, Any]) -> str:
    """Markdown: runs each strategy survived under overlapping kills."""
    lines = ["| strategy | survived | exact | median s to full redundancy |", "| --- | --- | --- | --- |"]
    for row in results["rows"]:
        ttfr: Optional[float] = row["median_seconds_to_full_redundancy"]
        lines.append(
            f"| {row['label']} | {row['survived']}/{row['runs']} | {row['exact']} | "
            f"{'' if ttfr is None else f'{ttfr:.3f}'} |"
        )
    return "\n".join(lines) + "\n"
