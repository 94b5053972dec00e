"""Benchmark: what online training's always-on and optional parts cost a step. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_online.py [--rounds 3] [--batches 200] [--batch-size 1024]

Prints (1) progressive validation's cost: adding a step's scores to the window (every step) and computing the
window's exact AUC and log loss over 100k samples (each progress line, TensorBoard write and report); (2) one
TensorBoard write (every 10 s by default) and (3) steady samples/s of examples/user_item_tags.py's model in one
process with ``logdir`` off and on (written every ``--every`` seconds), interleaved over the rounds, with the ratio's
median and range.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List


def window_costs(batch_size: int) -> Dict[str, float]:
    import numpy as np

    from xdl_ec.model.progressive import ProgressiveWindow

    rng = np.random.default_rng(0)
    data = [
        ((rng.random(batch_size) < 0.25).astype(np.float32), rng.random(batch_size).astype(np.float32))
        for _ in range(500)
    ]
    window = ProgressiveWindow()
    start = time.perf_counter()
    for labels, probs in data:
        window.add([labels], [probs])
    add = (time.perf_counter() - start) / len(data)
    start = time.perf_counter()
    for _ in range(10):
        window.report()
    return {
        "add_us": add * 1e6,
        "report_ms": (time.perf_counter() - start) / 10 * 1e3,
        "window": window.report()["samples"],
    }


def fit_rate(example: Any, batches: int, batch_size: int, logdir: Any, every: float) -> Dict[str, float]:
    from xdl_ec.job.local_run import LocalRun
    from xdl_ec.job.tensorboard_log import TensorBoardLog

    log = example.ClickLog(batch_size=batch_size, batches=batches, eval_batches=0)
    run = LocalRun(example.make_job(log).spec)
    board = None
    try:
        if logdir is not None:
            board = TensorBoardLog(logdir, every=every)
            board.start(run)
            run.hooks.append(board)
        report = run.fit()
        out = {"samples_per_sec": float(report["steady_samples_per_sec"])}
        if board is not None:
            start = time.perf_counter()
            board.write(run)
            out["write_ms"] = (time.perf_counter() - start) * 1e3
            out["writes"] = board.writes
        return out
    finally:
        if board is not None:
            board.close()
        run.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--every", type=float, default=10.0, help="TensorBoard write interval, seconds")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # example_jobs, beside this file (python -P too)
    from example_jobs import load_example

    example = load_example("user_item_tags")
    costs = window_costs(args.batch_size)
    print(
        f"progressive window: add {costs['add_us']:.1f} us a step ({args.batch_size} samples); exact AUC and log "
        f"loss over {costs['window']:,} samples {costs['report_ms']:.1f} ms"
    )
    fit_rate(example, 20, args.batch_size, None, args.every)  # warm-up: TF tracing, first imports
    ratios: List[float] = []
    writes: List[float] = []
    for r in range(args.rounds):
        order = [False, True] if r % 2 == 0 else [True, False]
        rates: Dict[bool, float] = {}
        for on in order:
            with tempfile.TemporaryDirectory() as tmp:
                result = fit_rate(example, args.batches, args.batch_size, tmp if on else None, args.every)
            rates[on] = result["samples_per_sec"]
            if on:
                writes.append(result["write_ms"])
        ratios.append(rates[True] / rates[False])
        print(
            f"round {r + 1}: logdir off {rates[False]:,.0f} samples/s, on {rates[True]:,.0f} samples/s "
            f"(on/off {ratios[-1]:.3f})"
        )
    print(
        f"logdir on/off: median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); one "
        f"TensorBoard write {statistics.median(writes):.1f} ms, every {args.every:g} s: "
        f"{statistics.median(writes) / 1e3 / args.every * 100:.2f}% of the time"
    )


if __name__ == "__main__":
    main()
