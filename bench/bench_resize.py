"""Benchmark: resizing a running cluster's servers (issue #38), 5 -> 8 -> 4 during one run. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_resize.py [--rounds 3] [--steps 7200] [--rows 400000]
                                                            [--batch 1024] [--window 150] [--backend local|ray]
                                                            [--resize-share X] [--runs none,ec,ec-kill]

The built-in job on synthetic Criteo-shaped data (one sync worker, --deterministic) trains ``--steps`` steps on 5
servers, resized to 8 at step steps/3 and to 4 at 2*steps/3 (``--resize-at``), under ``--ft none`` and under
``--ft ec`` (code 2+1, so 4 servers still hold a stripe); the ec runs are repeated with a server killed mid-move
(5 -> 8: fresh server 6 at the pre-copy's second boundary; 8 -> 4: old server 2 at the pre-copy's second boundary;
in a one-pause move, ``--resize-share 0``: right after a table's rows reached the new layout, right before the rows
are read). Each resized run alternates with the same run never resized (``--rounds`` pairs, the order flipping every
round), so machine drift hits both sides alike.

Under ``none`` a resize is one pause at a step boundary; under ``ec`` the rows move in the background
(:mod:`xdl_ec.ps.background_move`, ``--resize-share`` of the steps' time, the final pause included): a bounded pre-copy
at each boundary while training goes on, then a final pause. Per resize: the pre-copy's boundaries, the final pause
(seconds, and in steps of the median step before the move), all the move's seconds at boundaries per GB of table (rows
held x bytes per row) and the seconds from its first boundary through its switch per GB (the time to complete it, steps
included), rows whose route changed against the ideal |m - n| / max(m, n), rows copied against the minimum (the moved
rows), rows copied again at the final boundary; samples/s over the steps that hold the move (from the boundary that
starts it through the one that ends it, at least ``--window`` steps) against the ``--window`` steps before it (a resize
whose servers were still starting when it could begin, the 8 -> 4 after a long 5 -> 8 move: from the end of the
previous resize's final boundary, where they began starting beside the steps, against the window before the previous
move began), and the same ratio of the never-resized twin over the same steps, and the quotient of the two (the move's
cost with the steps' own pace between the windows taken out: the table grows, the data loops); medians over the rounds,
the quotient with its range. Last, the move's seconds at boundaries as a share of the wall time of the steps that hold
it (the run's own accounting: the steps do not slow beside the boundaries, so samples/s during the move is about 1
minus it, without the windows' drift). Every resized run must end at its twin's model_digest (asserted). Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any, Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.job.cluster import Cluster  # noqa: E402
from xdl_ec.ps.move_hooks import MoveHooks  # noqa: E402
from xdl_ec.ps.resize import RESIZE_SHARE  # noqa: E402


def rate(timeline: List[List[float]], first: int, last: int) -> float:
    """Samples/s over steps first+1..last (timeline rows: [step, seconds, samples, loss]); nan without a step
    (a move that began at the run's last boundary)."""
    by_step = {int(row[0]): row for row in timeline}
    if last <= first:
        return float("nan")
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
    extra: Dict[str, Any] = {"ft": ft, "code": (2, 1), "resize_share": args.resize_share} if ft == "ec" else {}
    cluster = Cluster(
        servers=5,
        backend=args.backend,
        resize_at=[f"{third}:8", f"{2 * third}:4"] if resize else [],
        **extra,
    )
    killed: List[str] = []

    def kill_mid_move(phase: str, trainer: Any, move: Any) -> None:
        # a background move: at the pre-copy's second boundary 5 -> 8 a fresh server (the move starts over), 8 -> 4
        # an old one (rebuilt by the old stripes, the move goes on); a one-pause move (--resize-share 0): 5 -> 8 a
        # fresh server once a table's rows reached the new layout, 8 -> 4 an old one before its rows are read
        servers = len(trainer.scheduler.servers)
        if move is None:
            if phase == "load" and servers == 8 and "fresh" not in killed:
                killed.append("fresh")
                trainer.scheduler.kill("server", 6)
            if phase == "export" and servers == 8 and "old" not in killed:
                killed.append("old")
                trainer.scheduler.kill("server", 2)
            return
        if phase != "precopy" or not move.fresh:  # (its fresh servers form beside the steps first)
            return
        seen[servers] = seen.get(servers, 0) + 1
        if servers == 5 and seen[servers] == 2 and "fresh" not in killed:
            killed.append("fresh")
            trainer.backend.kill(move.fresh[6])
        if servers == 8 and seen[servers] == 2 and "old" not in killed:
            killed.append("old")
            trainer.scheduler.kill("server", 2)

    seen: Dict[int, int] = {}
    job = criteo_job(config)
    if kill:
        job.move_hooks = MoveHooks(kill_mid_move)
    report = job.fit(steps=args.steps, cluster=cluster, deterministic=True, seed=args.seed)
    report["killed"] = killed
    return report


def wall(timeline: List[List[float]], first: int, last: int) -> float:
    """Seconds from the end of step ``first`` to the end of step ``last``."""
    by_step = {int(row[0]): row[1] for row in timeline}
    last = min(last, max(by_step))  # (a move ended by the run's last boundary)
    return by_step[last] - by_step[first] if last > first else 0.0


def step_seconds(timeline: List[List[float]], first: int, last: int) -> float:
    """The median seconds of steps first+1..last."""
    by_step = {int(row[0]): row[1] for row in timeline}
    return statistics.median(by_step[s] - by_step[s - 1] for s in range(first + 1, last + 1))


def summarize(resized: Dict[str, Any], twin: Dict[str, Any], window: int, due: List[int]) -> List[Dict[str, Any]]:
    """Per resize of ``resized`` (scheduled at the steps ``due``), its figures against ``twin``."""
    out = []
    previous: Optional[Dict[str, Any]] = None  # the previous resize's record
    for r, due_step in zip(resized.get("resizes", []), due):
        end = r["step"] - 1  # the boundary after this step ends the move (switches to the new layout)
        begin = r.get("started_step", r["step"]) - 1  # the boundary after this step starts it
        before_end = begin
        if previous is not None and begin > max(due_step, previous["step"]) - 1:
            # its servers were still starting when it could begin: they start at the previous resize's final
            # boundary, beside the steps. Counted from the end of that boundary (their start included), against
            # the window before the previous move began (steady training, no move's boundaries in it)
            begin = previous["step"]
            before_end = previous.get("started_step", previous["step"]) - 1
        elif previous is not None and before_end - previous["step"] < window // 3:
            # the previous move ended just before: too few steps since its switch to measure, so the window before
            # it began
            before_end = previous.get("started_step", previous["step"]) - 1
        start = before_end - window
        if previous is not None and previous["step"] < before_end:
            start = max(start, previous["step"])  # the steps since the previous switch, not its final pause
        before = (start, before_end)
        previous = r
        last = max(int(row[0]) for row in resized["timeline"])
        held = (begin, min(last, max(end + 1, begin + window)))  # the steps that hold the move, >= a window of them
        move_wall = wall(resized["timeline"], begin, end + 1)  # from the boundary that starts it through its switch
        row_bytes = r["bytes_copied"] / max(r["rows_copied"], 1)
        table_gb = r["rows"] * row_bytes / 1e9
        pause = r.get("final_pause_s", r["seconds"])
        out.append(
            {
                "resize": f"{r['servers_before']} -> {r['servers_after']}",
                "boundaries": r.get("precopy_boundaries", 0),
                "pause": pause,
                "seconds": r["seconds"],
                "s_per_gb": r["seconds"] / table_gb if table_gb else float("nan"),
                "wall_per_gb": move_wall / table_gb if table_gb else float("nan"),  # its time to complete
                "rows": r["rows"],
                "moved": r["moved_fraction"],
                "ideal": r["ideal_fraction"],
                "copied_vs_min": r["rows_copied"] / max(r["rows_moved"], 1),
                "recopied": r.get("rows_recopied", 0) / max(r["rows"], 1),
                "restarts": r["restarts"],
                "pause_steps": pause / step_seconds(resized["timeline"], *before),
                "speed": rate(resized["timeline"], *held) / rate(resized["timeline"], *before),
                "twin_speed": rate(twin["timeline"], *held) / rate(twin["timeline"], *before),
                # the move's seconds at boundaries against the wall time of the steps that hold it: its cost as the
                # run itself accounts it, free of the machine's drift between windows
                "boundary_share": r["seconds"] / (move_wall or float("nan")),
            }
        )
    return out


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=7200)
    p.add_argument("--rows", type=int, default=400_000, help="synthetic rows in the data")
    p.add_argument("--cardinality", type=int, default=1_000_000, help="synthetic ids per column at most")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument(
        "--window",
        type=int,
        default=150,
        help="steps before a move its samples/s are measured against (a few seconds: shorter windows swing by 20%%)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=("local", "ray"), default="local")
    p.add_argument(
        "--resize-share",
        type=float,
        default=None,
        help="Cluster(resize_share=...) under ec: the share of the steps' time a move may take, its final pause "
        f"included (0: one pause); default {RESIZE_SHARE:g}",
    )
    p.add_argument(
        "--runs",
        default="none,ec,ec-kill",
        help="which runs, comma-separated: none (--ft none), ec (--ft ec), ec-kill (ec, a server killed mid-move)",
    )
    args = p.parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = sorted(set(runs) - {"none", "ec", "ec-kill"})
    if unknown or not runs:
        p.error(f"--runs: expected some of none, ec, ec-kill, got {args.runs!r}")
    if args.resize_share is not None and not 0.0 <= args.resize_share < 1.0:
        p.error(f"--resize-share: expected a share in [0, 1), got {args.resize_share}")
    if args.backend == "ray":
        from xdl_ec.ps.backend import connect_ray

        connect_ray()
    results: Dict[str, List[Dict[str, Any]]] = {}
    kinds = {
        "none": ("none", "none", False),
        "ec": ("ec 2+1", "ec", False),
        "ec-kill": ("ec 2+1, kill mid-move", "ec", True),
    }
    for label, ft, kill in (kinds[r] for r in runs):
        rows: List[Dict[str, Any]] = []
        for round_ in range(args.rounds):
            order = [True, False] if round_ % 2 == 0 else [False, True]
            reports = {resize: run(args, ft, resize, kill and resize) for resize in order}
            resized, twin = reports[True], reports[False]
            assert resized["model_digest"] == twin["model_digest"], (label, round_)
            if kill:
                assert resized["killed"] == ["fresh", "old"], resized["killed"]
            rows.extend(summarize(resized, twin, args.window, [args.steps // 3, 2 * (args.steps // 3)]))
            for r in resized.get("resizes", []):  # what each move did, as it happened
                print(label, {k: r.get(k) for k in ("servers_after", "started_step", "step", "precopy_boundaries")})
        results[label] = rows
    print(
        f"steps {args.steps}, batch {args.batch}, window {args.window} steps, {args.rounds} rounds, {args.backend}, "
        f"resize_share {RESIZE_SHARE if args.resize_share is None else args.resize_share:g}"
    )
    print(
        "| ft | resize | pre-copy boundaries | final pause s | final pause in steps | move s at boundaries | s per GB "
        "of table | wall s per GB | rows | moved / ideal | copied / minimum | recopied / rows | restarts | samples/s "
        "during the move / before | never-resized twin | move / twin [range] | boundaries' share of the move's wall |"
    )
    print("| --- " * 17 + "|")
    for label, rows in results.items():
        for resize in ("5 -> 8", "8 -> 4"):
            mine = [r for r in rows if r["resize"] == resize]
            med = {k: statistics.median(r[k] for r in mine) for k in mine[0] if k != "resize"}
            against = [r["speed"] / r["twin_speed"] for r in mine]
            print(
                f"| {label} | {resize} | {med['boundaries']:.0f} | {med['pause']:.3f} | {med['pause_steps']:.1f} "
                f"| {med['seconds']:.3f} | {med['s_per_gb']:.1f} | {med['wall_per_gb']:.0f} | {med['rows']:,.0f} "
                f"| {med['moved']:.3f} / {med['ideal']:.3f} | {med['copied_vs_min']:.2f} | {med['recopied']:.3f} | "
                f"{sum(r['restarts'] for r in mine)} | {med['speed']:.2f} | {med['twin_speed']:.2f} | "
                f"{statistics.median(against):.2f} [{min(against):.2f}, {max(against):.2f}] | "
                f"{med['boundary_share']:.3f} |"
            )


if __name__ == "__main__":
    main()
