"""Benchmark: ``--ft ec``'s vulnerable window (one more server loss fatal) under another job's load, with and
without ``--rebuild-within``. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_vulnerable_window.py [--load 2] [--rounds 3] [--within 2]
                                                                       [--steps 160] [--fail-at 80] [--second-after 12]
                                                                       [--emb-dim 128] [--batch 512]

``--load P`` busy-loop processes (``python3 -c "while True: pass"``) run beside the whole bench: the other job. Each
round trains three fresh (2, 1) clusters of 3 servers, in an order that rotates every round: "bounded"
(``rebuild_within=--within``), "unbounded" (a bound no rebuild comes near: the rebuild as it was before the bound,
flat out beside training) and "unbounded-aa" (the same again: the A/A noise floor of the comparison). In each,
server 1 is killed before step ``--fail-at`` and, with ``--second-after N``, server 2 N steps later (the issue's
scenario: fatal if the first rebuild is not done by then). Per arm: the vulnerable window (the report's
``vulnerable_seconds``, from the loss to full redundancy), the recovery's pause in it, the seconds training was
held, how many windows kept ``--within``, runs stopped as unrecoverable (their first window never closed: counted as
a miss), and the run's samples/s; the ratios bounded/unbounded and the A/A unbounded-aa/unbounded of the median
window and samples/s, over the same rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
from typing import Any, Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ft.failure_injector import FailureInjector  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings, Unrecoverable  # noqa: E402

FAR = 1e6  # seconds: the unbounded arms' bound, which no rebuild comes near
ARMS = ("bounded", "unbounded", "unbounded-aa")


def one_run(args: argparse.Namespace, within: float) -> Dict[str, Any]:
    config = TrainConfig(
        synthetic=True,
        steps=args.steps,
        batch_size=args.batch,
        emb_dim=args.emb_dim,
        deterministic=True,
        progress=False,
        seed=3,
    )
    kills = [Kill(args.fail_at, "server", 1)]
    if args.second_after:
        kills.append(Kill(args.fail_at + args.second_after, "server", 2))
    strategy = ErasureCoded(2, 1, rebuild_within=within)
    trainer = PSTrainer(
        criteo_job(config).spec,
        ClusterConfig(servers=3, workers=1),
        RunSettings(config.seed, config.deterministic),
        strategy,
        FailureInjector(FailureSchedule(kills)),
    )
    try:
        report = trainer.fit()
        outcome = "exact"
    except Unrecoverable:
        report, outcome = {}, "unrecoverable"
    # read before close: a close after an unrecoverable run completes what it can, which is no window that held
    first = dataclasses.replace(strategy.failures[0]) if strategy.failures else None
    trainer.close()
    if first is None or first.vulnerable_seconds is None:  # the second loss came inside the first's window
        return {"outcome": outcome, "window": None, "held": None, "kept": False, "samples_per_sec": None}
    return {
        "outcome": outcome,
        "window": first.vulnerable_seconds,
        "detect": first.detect_seconds,
        "pause": first.recovery_pause_seconds,  # the recovery's steps before training went on
        "rebuild": first.rebuild_seconds,  # from the recovery's start: its pause, then the stripes
        "held": first.training_held_seconds,
        "kept": first.vulnerable_within_bound,
        "samples_per_sec": report.get("samples_per_sec"),
    }


def _median(values: List[Any]) -> float:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--load", type=int, default=2, help="busy-loop processes beside the bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--within", type=float, default=2.0, help="the bounded arm's --rebuild-within")
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--fail-at", type=int, default=80)
    parser.add_argument("--second-after", type=int, default=12, help="steps to a second kill (0: none)")
    parser.add_argument("--emb-dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    results: Dict[str, List[Dict[str, Any]]] = {arm: [] for arm in ARMS}
    try:
        print(f"load beside the bench: {args.load} busy loops on {os.cpu_count()} cores; loadavg {os.getloadavg()}")
        for round_ in range(args.rounds):
            order = ARMS[round_ % 3 :] + ARMS[: round_ % 3]
            for arm in order:
                result = one_run(args, args.within if arm == "bounded" else FAR)
                results[arm].append(result)
                print(f"round {round_} {arm}: {result}", flush=True)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    print(f"\n--within {args.within:g} s, kills before steps {args.fail_at} and +{args.second_after}:")
    for arm in ARMS:
        rows = results[arm]
        windows = [r["window"] for r in rows if r["window"] is not None]
        print(
            f"  {arm:13s} window median {_median(windows):.2f} s max {max(windows, default=float('nan')):.2f} s, "
            f"pause median {_median([r.get('pause') for r in rows]):.2f} s, held median "
            f"{_median([r['held'] for r in rows]):.2f} s, within {args.within:g} s "
            f"{sum(1 for w in windows if w <= args.within)}/{len(rows)}, unrecoverable "
            f"{sum(1 for r in rows if r['outcome'] == 'unrecoverable')}/{len(rows)}, samples/s median "
            f"{_median([r['samples_per_sec'] for r in rows]):,.0f}"
        )
    base = results["unbounded"]
    for arm in ("bounded", "unbounded-aa"):
        window = _median([r["window"] for r in results[arm]]) / _median([r["window"] for r in base])
        speed = _median([r["samples_per_sec"] for r in results[arm]]) / _median([r["samples_per_sec"] for r in base])
        print(f"  {arm}/unbounded: window {window:.2f}x, samples/s {speed:.2f}x")


if __name__ == "__main__":
    main()
