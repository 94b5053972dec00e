"""Benchmark: the cost of ``--ft ec`` in one process, measured against ``--ft none`` in the same run. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_ft_ec.py [--code 4,1] [--steps 40] [--batch 2048] [--repeats 3]
                                                           [--fail-at 20]

1. Normal operation: steady samples/s (after the first step, which traces TF) of N = k + r servers, one sync
   worker, synthetic data, with no fault tolerance and with ``ec`` (parity forwarded in the background), runs
   alternating so drift on a shared machine hits both; medians. Overhead = 1 - ec / none.
2. Recovery: the same ``ec`` run with server 1 killed before step ``--fail-at``: the rebuild's seconds (key index,
   replay and every stripe, spread over step boundaries), samples/s while it ran against normal operation, and
   the degraded reads it served; the final model_digest is checked against the failure-free run's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.ft.ec_strategy import ErasureCoded, parse_code  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer  # noqa: E402
from xdl_ec.trainer import TrainConfig  # noqa: E402


def _run(config: TrainConfig, servers: int, strategy, kills=()) -> dict:
    trainer = PSTrainer(config, ClusterConfig(servers=servers, workers=1), strategy=strategy,
                        failures=FailureSchedule(list(kills)))
    try:
        report = trainer.fit()
        report["model_digest"] = trainer.digest()
    finally:
        trainer.close()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", default="4,1")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fail-at", type=int, default=20)
    args = parser.parse_args()
    k, r = parse_code(args.code)
    servers = k + r
    config = TrainConfig(synthetic=True, synthetic_rows=args.batch * (args.steps + 8), batch_size=args.batch,
                         steps=args.steps, deterministic=True, progress=False, seed=1)
    rates = {"none": [], "ec": []}
    digests = {}
    for _ in range(args.repeats):
        for name in ("none", "ec"):
            report = _run(config, servers, None if name == "none" else ErasureCoded(k, r))
            rates[name].append(report["steady_samples_per_sec"])
            digests[name] = report["model_digest"]
    none, ec = statistics.median(rates["none"]), statistics.median(rates["ec"])
    print(f"normal operation, {servers} servers, code k={k} r={r}, batch {args.batch}, {args.steps} steps, "
          f"median of {args.repeats}:")
    print(f"  none {none:,.0f} samples/s   ec {ec:,.0f} samples/s   overhead {100 * (1 - ec / none):.1f}%"
          f"   (runs none {[round(x) for x in rates['none']]}, ec {[round(x) for x in rates['ec']]})")
    print(f"  same model with and without parity: {digests['none'] == digests['ec']}")
    start = time.perf_counter()
    strategy = ErasureCoded(k, r)
    report = _run(config, servers, strategy, [Kill(args.fail_at, "server", 1)])
    (failure,) = report["failures"]
    during = failure["samples_per_sec_during_rebuild"]
    print(f"server 1 killed before step {args.fail_at}: rebuild {failure['rebuild_seconds'] * 1000:.0f} ms "
          f"(training went on: {during or 0:,.0f} samples/s during it = {100 * (during or 0) / ec:.0f}% of normal ec), "
          f"degraded reads {report['degraded_reads']}, parity bytes {report['parity_bytes']:,}, "
          f"digest equals failure-free: {report['model_digest'] == digests['ec']} "
          f"(run {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
