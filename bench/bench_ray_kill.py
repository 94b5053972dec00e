"""Benchmark: a server process SIGKILLed from outside a Ray job under ``--ft ec``: training speed while the lost
server is rebuilt, against the same run's steps before the kill. Not a test.

    PYTHONPATH=build/stage RAY_AUTH_MODE=disabled python3 -P bench/bench_ray_kill.py [--servers 5] [--code 4,1]
        [--batch 256] [--steps 2500] [--kill-after 800] [--repeats 3] [--rows 400000]
        [--urgent-rebuild flat-out|paced|both]

Each repeat starts a fresh Ray cluster of ``--servers`` server actors and one sync worker training the built-in
model on synthetic data, ``--kill-after`` steps first, then sends SIGKILL to the process of server 1 (found through
Ray, as an operator's ``kill -9`` would) a fixed delay into the next steps, so the kill lands mid-step. Printed per
repeat: detection (from the kill: Ray's record of the actor's death), the recovery's pause, the rebuild's seconds
and the seconds from the kill to full redundancy; samples/s of the steps that ran while the rebuild did (the
``samples_per_sec_during_rebuild`` of the report, and from the step timeline) against the mean of the 200 steps
before the kill and of the steps after full redundancy came back; and whether the final model_digest equals the
failure-free run's (trained once in one process, first). With r = 1 one more loss would be fatal while the rebuild
runs: ``--urgent-rebuild`` flat-out rebuilds as fast as it can then, paced keeps to the governor (training's speed);
both (the default) runs the two in turns, the order rotating every repeat. Goal: samples/s during the rebuild >= 90%
of the run's normal steps.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import threading
import time
from typing import Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ft.configs import parse_code  # noqa: E402
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402

KILL_DELAY = 0.3  # seconds after step --kill-after: the kill lands while steps run, not at a boundary
WINDOW = 200  # steps before the kill whose mean is "normal"


def _rate(timeline: List[list], first: int, last: int) -> Optional[float]:
    """samples/s of the steps first..last of a report's timeline (rows: step, seconds, samples, loss)."""
    rows = {int(row[0]): row for row in timeline}
    steps = [s for s in range(first, last + 1) if s in rows and s - 1 in rows]
    if not steps:
        return None
    seconds = sum(rows[s][1] - rows[s - 1][1] for s in steps)
    samples = sum(rows[s][2] - rows[s - 1][2] for s in steps)
    return samples / seconds if seconds > 0 else None


def _one(config: TrainConfig, args: argparse.Namespace, k: int, r: int, urgent: str) -> Dict[str, object]:
    import ray

    trainer = PSTrainer(
        criteo_job(config).spec,
        ClusterConfig(servers=args.servers, workers=1, backend="ray"),
        RunSettings(config.seed, config.deterministic),
        ErasureCoded(k, r, urgent_rebuild=urgent),
    )
    try:
        victim = trainer.scheduler.servers[1].actor
        pid = ray.get(victim.__ray_call__.remote(lambda self: os.getpid()), timeout=60)

        def kill() -> None:  # inside one fit: no gap between fits in the steps before the kill
            while trainer.step < args.kill_after:
                time.sleep(0.001)
            time.sleep(KILL_DELAY)
            os.kill(pid, signal.SIGKILL)

        threading.Thread(target=kill, daemon=True).start()
        report = trainer.fit(args.steps)
        digest = trainer.digest()
    finally:
        trainer.close()
    (failure,) = report["failures"]
    timeline = report["timeline"]  # seconds and samples count from the fit's start
    ends = {int(row[0]): row[1] for row in timeline}
    killed = int(failure["step"])
    # full redundancy: seconds_to_full_redundancy after the kill, which came after step killed - 1 had ended, so
    # the window ends at most one step early
    end = ends[killed - 1] + failure["seconds_to_full_redundancy"]
    during = [s for s in sorted(ends) if s > killed and ends[s] <= end]  # the failed step holds the pause
    after = [s for s in sorted(ends) if ends[s] > end]
    return {
        "failure": failure,
        "digest": digest,
        "killed": killed,
        "before": _rate(timeline, killed - WINDOW, killed - 1),
        "during": _rate(timeline, during[0], during[-1]) if during else None,
        "during_steps": len(during),
        "after": _rate(timeline, after[0], after[-1]) if after else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=5)
    parser.add_argument("--code", default="4,1")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2500)
    parser.add_argument("--kill-after", type=int, default=800)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=400_000, help="synthetic rows (a larger table, a longer rebuild)")
    parser.add_argument("--urgent-rebuild", choices=("flat-out", "paced", "both"), default="both")
    args = parser.parse_args()
    k, r = parse_code(args.code)
    if k + r != args.servers:
        raise SystemExit(f"--code {args.code}: k + r must equal --servers ({args.servers})")
    if not WINDOW < args.kill_after < args.steps:
        raise SystemExit(f"--kill-after: must be in ({WINDOW}, --steps={args.steps})")
    config = TrainConfig(
        synthetic=True,
        synthetic_rows=args.rows,
        batch_size=args.batch,
        steps=args.steps,
        deterministic=True,
        progress=False,
        seed=3,
    )
    reference = criteo_job(config).fit(deterministic=True, seed=config.seed)["model_digest"]
    print(
        f"Ray, {args.servers} servers, ec k={k} r={r}, batch {args.batch}, server 1 SIGKILLed from outside "
        f"{KILL_DELAY:g} s after step {args.kill_after} of {args.steps}:"
    )
    modes = ["flat-out", "paced"] if args.urgent_rebuild == "both" else [args.urgent_rebuild]
    ratios: Dict[str, List[float]] = {mode: [] for mode in modes}
    windows: Dict[str, List[float]] = {mode: [] for mode in modes}
    for repeat in range(args.repeats):
        for mode in modes[repeat % len(modes) :] + modes[: repeat % len(modes)]:
            _report(repeat, mode, _one(config, args, k, r, mode), reference, ratios, windows)
    for mode in modes:
        if ratios[mode]:
            print(
                f"{mode}: samples/s during the rebuild / before the kill: median "
                f"{100 * statistics.median(ratios[mode]):.0f}% (runs: "
                f"{', '.join(f'{100 * x:.0f}%' for x in ratios[mode])}); full redundancy "
                f"{statistics.median(windows[mode]):.2f} s after the kill (median); goal >= 90%"
            )


def _report(
    repeat: int,
    mode: str,
    run: Dict[str, object],
    reference: str,
    ratios: Dict[str, List[float]],
    windows: Dict[str, List[float]],
) -> None:
    f = run["failure"]
    ratio = None if run["during"] is None or not run["before"] else run["during"] / run["before"]
    if ratio is not None:
        ratios[mode].append(ratio)
    windows[mode].append(f["seconds_to_full_redundancy"])
    fmt = lambda v: "n/a" if v is None else f"{v:,.0f}"  # noqa: E731
    print(
        f"  repeat {repeat + 1} {mode}: lost at step {run['killed']}, detected {f['detect_seconds']:.3f} s "
        f"after the kill, rebuild {f['rebuild_seconds']:.2f} s, full redundancy "
        f"{f['seconds_to_full_redundancy']:.2f} s after the kill; samples/s before {fmt(run['before'])}, during "
        f"({run['during_steps']} steps) {fmt(run['during'])} (report: "
        f"{fmt(f.get('samples_per_sec_during_rebuild'))}), after "
        f"{fmt(run['after'])}; during / before "
        f"{'n/a' if ratio is None else f'{100 * ratio:.0f}%'}; digest equals failure-free: "
        f"{run['digest'] == reference}"
    )


if __name__ == "__main__":
    main()
