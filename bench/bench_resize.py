"""Benchmark: resizing a running cluster's servers (issue #38), 5 -> 8 -> 4 during one run. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_resize.py [--rounds 3] [--steps 240] [--rows 400000]
                                                            [--batch 1024] [--window 30] [--backend local|ray]

The built-in job on synthetic Criteo-shaped data (one sync worker, --deterministic) trains ``--steps`` steps on 5
servers, resized to 8 at step steps/3 and to 4 at 2*steps/3 (``--resize-at``), under ``--ft none`` and under
``--ft ec`` (code 2+1, so 4 servers still hold a stripe); the ec runs are repeated with a server killed mid-move
(5 -> 8: a fresh server right after the rows of a table reached the new layout; 8 -> 4: an old server right before
its rows are read). Each resized run alternates with the same run never resized (``--rounds`` pairs, the order
flipping every round), so machine drift hits both sides alike.

Per resize: the pause (seconds; the move is one freeze-copy-switch at a step boundary) and the same in steps (the
median step before it), seconds per GB of table (rows held x bytes per row), rows whose route changed against the
ideal |m - n| / max(m, n), rows copied against the minimum (the moved rows); samples/s over the ``--window`` steps
after the resize (the step boundary that holds the move included) against the ``--window`` steps before it, and the
same ratio of the never-resized twin over the same steps. Every resized run must end at its twin's
model_digest (asserted). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any, Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.job.cluster import Cluster  # noqa: E402
from xdl_ec.ps.resize import Resizer  # noqa: E402


def rate(timeline: List[List[float]], first: int, last: int) -> float:
    """Samples/s over steps first+1..last (timeline rows: [step, seconds, samples, loss])."""
    by_step = {int(row[0]): row for row in timeline}
    a, b = by_step[first], by_step[last]
    return (b[2] - a[2]) / (b[1] - a[1])


def run(args: argparse.Namespace, ft: str, resize: bool, kill: bool) -> Dict[str, Any]:
    third = args.steps // 3
    config = TrainConfig(
        synthetic=True,
        synthetic_rows=args.rows,
        synthetic_max_cardinality=args.cardinality,
        batch_size=args.batch,
        steps=args.steps,
        seed=args.seed,
        deterministic=True,
        progress=False,
    )
    extra: Dict[str, Any] = {"ft": ft, "code": (2, 1)} if ft == "ec" else {}
    cluster = Cluster(
        servers=5,
        backend=args.backend,
        resize_at=[f"{third}:8", f"{2 * third}:4"] if resize else [],
        **extra,
    )
    killed: List[str] = []

    def kill_mid_move(phase: str, trainer: Any, move: Any = None) -> None:
        # 5 -> 8: a fresh server once a table's rows are on the new layout; 8 -> 4: an old server before its read
        servers = len(trainer.scheduler.servers)
        if phase == "load" and servers == 8 and "fresh" not in killed:
            killed.append("fresh")
            trainer.scheduler.kill("server", 6)
        if phase == "export" and servers == 8 and "old" not in killed:
            killed.append("old")
            trainer.scheduler.kill("server", 2)

    Resizer.on_phase = staticmethod(kill_mid_move) if kill else None
    try:
        report = criteo_job(config).fit(steps=args.steps, cluster=cluster, deterministic=True, seed=args.seed)
    finally:
        Resizer.on_phase = None
    report["killed"] = killed
    return report


def step_seconds(timeline: List[List[float]], first: int, last: int) -> float:
    """The median seconds of steps first+1..last."""
    by_step = {int(row[0]): row[1] for row in timeline}
    return statistics.median(by_step[s] - by_step[s - 1] for s in range(first + 1, last + 1))


def summarize(resized: Dict[str, Any], twin: Dict[str, Any], window: int) -> List[Dict[str, Any]]:
    out = []
    for r in resized.get("resizes", []):
        at = r["step"] - 1  # the boundary after this step holds the move
        row_bytes = r["bytes_copied"] / max(r["rows_copied"], 1)
        table_gb = r["rows"] * row_bytes / 1e9
        out.append(
            {
                "resize": f"{r['servers_before']} -> {r['servers_after']}",
                "seconds": r["seconds"],
                "s_per_gb": r["seconds"] / table_gb if table_gb else float("nan"),
                "rows": r["rows"],
                "moved": r["moved_fraction"],
                "ideal": r["ideal_fraction"],
                "copied_vs_min": r["rows_copied"] / max(r["rows_moved"], 1),
                "restarts": r["restarts"],
                "pause_steps": r["seconds"] / step_seconds(resized["timeline"], at - window, at),
                "speed": rate(resized["timeline"], at, at + window) / rate(resized["timeline"], at - window, at),
                "twin_speed": rate(twin["timeline"], at, at + window) / rate(twin["timeline"], at - window, at),
            }
        )
    return out


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=240)
    p.add_argument("--rows", type=int, default=400_000, help="synthetic rows in the data")
    p.add_argument("--cardinality", type=int, default=1_000_000, help="synthetic ids per column at most")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--window", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=("local", "ray"), default="local")
    args = p.parse_args(argv)
    if args.backend == "ray":
        from xdl_ec.ps.backend import connect_ray

        connect_ray()
    results: Dict[str, List[Dict[str, Any]]] = {}
    for label, ft, kill in (("none", "none", False), ("ec 2+1", "ec", False), ("ec 2+1, kill mid-move", "ec", True)):
        rows: List[Dict[str, Any]] = []
        for round_ in range(args.rounds):
            order = [True, False] if round_ % 2 == 0 else [False, True]
            reports = {resize: run(args, ft, resize, kill and resize) for resize in order}
            resized, twin = reports[True], reports[False]
            assert resized["model_digest"] == twin["model_digest"], (label, round_)
            if kill:
                assert resized["killed"] == ["fresh", "old"], resized["killed"]
            rows.extend(summarize(resized, twin, args.window))
        results[label] = rows
    print(f"steps {args.steps}, batch {args.batch}, window {args.window} steps, {args.rounds} rounds, {args.backend}")
    print(
        "| ft | resize | pause s (median) | pause in steps | s per GB of table | rows | moved / ideal | copied / "
        "minimum | restarts | samples/s after / before | never-resized twin |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, rows in results.items():
        for resize in ("5 -> 8", "8 -> 4"):
            mine = [r for r in rows if r["resize"] == resize]
            med = {k: statistics.median(r[k] for r in mine) for k in mine[0] if k != "resize"}
            print(
                f"| {label} | {resize} | {med['seconds']:.3f} | {med['pause_steps']:.1f} | {med['s_per_gb']:.1f} "
                f"| {med['rows']:,.0f} "
                f"| {med['moved']:.3f} / {med['ideal']:.3f} | {med['copied_vs_min']:.2f} | "
                f"{sum(r['restarts'] for r in mine)} | {med['speed']:.2f} | {med['twin_speed']:.2f} |"
            )


if __name__ == "__main__":
    main()
