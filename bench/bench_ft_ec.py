"""Benchmark: the cost of ``--ft ec``, measured against ``--ft none`` in the same run. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_ft_ec.py [--code 4,1] [--steps 40] [--batch 2048] [--repeats 3]
                                                           [--fail-at 20] [--rebuild-share 0.05]
                                                           [--backend local|ray]

1. Normal operation: steady samples/s (after the first step, which traces TF) of N = k + r servers, one sync
   worker, synthetic data, with no fault tolerance and with ``ec`` (parity forwarded in the background), runs
   alternating so drift on a shared machine hits both; medians. Overhead = 1 - ec / none, of the medians and
   paired (the median of each repeat's back-to-back ratio). Also the machine's busy
   CPU time per sample during training (from /proc/stat: every process, Ray's included), which drifts less than
   wall time on a shared VM.
2. Recovery, in every repeat right after its normal ``ec`` run: the same run with server 1 killed before step
   ``--fail-at``: the rebuild's seconds (recovery pause, key index, replay and every stripe, rate-limited to
   ``--rebuild-share`` of wall time over the step boundaries), samples/s while it ran against that repeat's normal
   ``ec`` run and against the same run's steps before the kill (medians and every repeat's ratio: a rebuild lasts
   a few hundred ms here, so drift on a shared machine shows), the degraded reads it served; the final
   model_digest is checked against the failure-free run's.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.ft.ec_strategy import DEFAULT_REBUILD_SHARE, ErasureCoded, parse_code  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer  # noqa: E402
from xdl_ec.trainer import TrainConfig  # noqa: E402


def _busy_cpu_seconds() -> Optional[float]:
    """CPU seconds the whole machine spent busy so far (Linux /proc/stat), None elsewhere."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def _run(config: TrainConfig, servers: int, strategy, kills=(), backend: str = "local") -> dict:
    trainer = PSTrainer(config, ClusterConfig(servers=servers, workers=1, backend=backend), strategy=strategy,
                        failures=FailureSchedule(list(kills)))
    try:
        start = _busy_cpu_seconds()
        report = trainer.fit()
        end = _busy_cpu_seconds()
        report["cpu_us_per_sample"] = None if start is None else (end - start) / report["samples"] * 1e6
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
    parser.add_argument("--rebuild-share", type=float, default=DEFAULT_REBUILD_SHARE)
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    args = parser.parse_args()
    k, r = parse_code(args.code)
    servers = k + r
    config = TrainConfig(synthetic=True, synthetic_rows=args.batch * (args.steps + 8), batch_size=args.batch,
                         steps=args.steps, deterministic=True, progress=False, seed=1)
    share = args.rebuild_share
    rates = {"none": [], "ec": []}
    cpu = {"none": [], "ec": []}
    digests = {}
    recoveries = []
    for _ in range(args.repeats):
        for name in ("none", "ec"):
            report = _run(config, servers, None if name == "none" else ErasureCoded(k, r, rebuild_share=share),
                          backend=args.backend)
            rates[name].append(report["steady_samples_per_sec"])
            cpu[name].append(report["cpu_us_per_sample"])
            digests[name] = report["model_digest"]
        strategy = ErasureCoded(k, r, rebuild_share=share)
        report = _run(config, servers, strategy, [Kill(args.fail_at, "server", 1)], backend=args.backend)
        (failure,) = report["failures"]
        recoveries.append((failure, report, strategy.boundaries_rebuilding, rates["ec"][-1]))
    none, ec = statistics.median(rates["none"]), statistics.median(rates["ec"])
    print(f"normal operation, {args.backend} backend, {servers} servers, code k={k} r={r}, batch {args.batch}, "
          f"{args.steps} steps, median of {args.repeats}:")
    paired = statistics.median(e / n for n, e in zip(rates["none"], rates["ec"]))
    print(f"  none {none:,.0f} samples/s   ec {ec:,.0f} samples/s   overhead {100 * (1 - ec / none):.1f}%"
          f"   (runs none {[round(x) for x in rates['none']]}, ec {[round(x) for x in rates['ec']]})")
    print(f"  paired: median over repeats of (1 - ec / none of the same repeat) {100 * (1 - paired):.1f}%"
          f" (each pair ran back to back, so slow drift of the machine cancels)")
    if None not in cpu["none"] + cpu["ec"]:
        cpu_none, cpu_ec = statistics.median(cpu["none"]), statistics.median(cpu["ec"])
        print(f"  busy CPU per sample: none {cpu_none:.0f} us   ec {cpu_ec:.0f} us   ratio {cpu_ec / cpu_none:.3f}"
              f"   (runs none {[round(x) for x in cpu['none']]}, ec {[round(x) for x in cpu['ec']]})")
    print(f"  same model with and without parity: {digests['none'] == digests['ec']}")
    print(f"server 1 killed before step {args.fail_at}, rebuild share {share:g}:")
    ratios, own = [], []
    for failure, report, boundaries, normal in recoveries:
        during = failure["samples_per_sec_during_rebuild"] or 0.0
        before = _before_kill(report["timeline"], args.fail_at)
        ratios.append(during / normal)
        own.append(during / before)
        print(f"  rebuild {failure['rebuild_seconds'] * 1000:.0f} ms over {boundaries} step boundaries, "
              f"{during:,.0f} samples/s during it = {100 * ratios[-1]:.0f}% of that repeat's normal ec run, "
              f"{100 * own[-1]:.0f}% of its own steps before the kill ({before:,.0f}), degraded reads "
              f"{report['degraded_reads']}, digest equals failure-free: {report['model_digest'] == digests['ec']}")
    print(f"throughput during rebuild / normal ec: median {100 * statistics.median(ratios):.0f}% "
          f"(repeats {[round(100 * x) for x in ratios]}); / the same run before the kill: median "
          f"{100 * statistics.median(own):.0f}% (repeats {[round(100 * x) for x in own]}); parity bytes "
          f"{recoveries[-1][1]['parity_bytes']:,}")


def _before_kill(timeline: list, fail_at: int) -> float:
    """Samples/s of a run's steps 2 .. fail_at - 1 (after the first, which traces TF; before the kill)."""
    rows = [row for row in timeline if row[0] < fail_at]
    return (rows[-1][2] - rows[0][2]) / (rows[-1][1] - rows[0][1])

if __name__ == "__main__":
    main()
