"""Benchmark: ``--ft ec``'s recovery pause under another job's load, this build against another build of the core
(e.g. the commit before a change to the forwarder's priorities). Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_recovery_pause.py --baseline-stage /tmp/stage-before \\
        [--load 2] [--rounds 4] [--steps 160] [--fail-at 80] [--emb-dim 128] [--batch 512]

``--load P`` busy-loop processes run beside the whole bench. Each round trains, in a rotating order and each in a
fresh process, a (2, 1) cluster of 3 servers with server 1 killed before step ``--fail-at``: once with this build
("candidate"), once with the build staged in ``--baseline-stage`` ("baseline"), and once more with this build
("candidate-aa": the A/A noise floor). Per arm: the recovery's pause (detection, the survivors' drain, rollback,
replay: the part of the vulnerable window no pacing of the rebuild shortens) and the whole window; the ratios
candidate/baseline and candidate-aa/candidate of the medians over the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any, Dict, List

ARMS = ("candidate", "baseline", "candidate-aa")


def _child(args: argparse.Namespace) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_vulnerable_window import one_run  # the same run as the window bench's, one kill

    print("RESULT " + json.dumps(one_run(args, args.within)), flush=True)


def _run_arm(args: argparse.Namespace, stage: str) -> Dict[str, Any]:
    command = [sys.executable, "-P", os.path.abspath(__file__), "--child"]
    for name in ("steps", "fail_at", "emb_dim", "batch", "within"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    env = dict(os.environ, PYTHONPATH=stage, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[len("RESULT ") :])


def _median(rows: List[Dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-stage", help="PYTHONPATH of the build to compare against")
    parser.add_argument("--load", type=int, default=2, help="busy-loop processes beside the bench")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--fail-at", type=int, default=80)
    parser.add_argument("--emb-dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--within", type=float, default=10.0, help="--rebuild-within of every arm")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.second_after = 0
        _child(args)
        return
    if not args.baseline_stage:
        parser.error("--baseline-stage DIR is required: the PYTHONPATH of the build to compare against")
    stages = {"candidate": os.environ.get("PYTHONPATH", ""), "baseline": args.baseline_stage}
    stages["candidate-aa"] = stages["candidate"]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    results: Dict[str, List[Dict[str, Any]]] = {arm: [] for arm in ARMS}
    try:
        print(f"load beside the bench: {args.load} busy loops on {os.cpu_count()} cores; loadavg {os.getloadavg()}")
        for round_ in range(args.rounds):
            for arm in ARMS[round_ % 3 :] + ARMS[: round_ % 3]:
                results[arm].append(_run_arm(args, stages[arm]))
                print(f"round {round_} {arm}: {results[arm][-1]}", flush=True)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    print(f"\nserver 1 killed before step {args.fail_at}; loadavg at the end {os.getloadavg()}")
    for arm in ARMS:
        rows = results[arm]
        print(
            f"  {arm:13s} pause median {_median(rows, 'pause'):.2f} s (max "
            f"{max((r['pause'] for r in rows if r.get('pause') is not None), default=float('nan')):.2f}), "
            f"window median {_median(rows, 'window'):.2f} s"
        )
    for arm, against in (("candidate", "baseline"), ("candidate-aa", "candidate")):
        num, den = results[arm], results[against]
        print(
            f"  {arm}/{against}: pause {_median(num, 'pause') / _median(den, 'pause'):.2f}x, "
            f"window {_median(num, 'window') / _median(den, 'window'):.2f}x"
        )


if __name__ == "__main__":
    main()
