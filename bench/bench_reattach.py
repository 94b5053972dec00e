"""Benchmark: what a reattachable run (``--backend ray --run-dir DIR``, docs/design/reattach.md) costs per step.
Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_reattach.py [--rounds 12] [--chunk 20] [--code 2,1]

One cluster on the run's own Ray head (detached roles, ec), one sync worker, the driver's hooks as a reattachable
run has them. Training goes in turns of ``--chunk`` steps, alternating (order flipped every round) between turns
WITH the run's step hook (its heartbeat record and the run-record check: everything a reattachable run adds on
the step's path; the dense state stays in the worker, nothing is sent per step) and turns WITHOUT it; each turn's
seconds per step, the median over rounds of the with/without ratio with a 95% bootstrap interval, and the same
for an A/A split (both turns without the hook: the method's noise floor on this machine). The load average is
printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from typing import List, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ft.configs import parse_code  # noqa: E402
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402
from xdl_ec.ps.reattachable_run import ReattachableRun  # noqa: E402


class TimedHook:
    """The run's own step hook, each call's seconds recorded (the work a reattachable run adds to a step's path,
    measured directly: the interleaved ratio's noise floor on a shared machine is far above it)."""

    def __init__(self, hook: ReattachableRun) -> None:
        self.hook = hook
        self.seconds: List[float] = []

    def due(self, step: int) -> bool:
        return self.hook.due(step)

    def after_step(self, run: object) -> None:
        start = time.perf_counter()
        self.hook.after_step(run)
        self.seconds.append(time.perf_counter() - start)


def _turn(trainer: PSTrainer, steps: int) -> float:
    """Seconds per step of ``steps`` steps."""
    before = trainer.step
    start = time.perf_counter()
    trainer.fit(steps)
    seconds = time.perf_counter() - start
    if trainer.step - before != steps:
        raise RuntimeError(f"a turn trained {trainer.step - before} steps of {steps}: the input ran out")
    return seconds / steps


def _bootstrap(ratios: List[float], seed: int = 7, draws: int = 2000) -> Tuple[float, float]:
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def _rounds(trainer: PSTrainer, hook: TimedHook, rounds: int, chunk: int, aa: bool) -> List[float]:
    """Per round, (seconds per step with the hook) / (without); ``aa``: both turns without it."""
    ratios = []
    for i in range(rounds):
        with_first = i % 2 == 0
        times = {}
        for with_hook in (with_first, not with_first):
            if with_hook and not aa:
                trainer.hooks.append(hook)
            try:
                times[with_hook] = _turn(trainer, chunk)
            finally:
                if hook in trainer.hooks:
                    trainer.hooks.remove(hook)
        ratios.append(times[True] / times[False])
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--chunk", type=int, default=20)
    parser.add_argument("--code", default="2,1")
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    k, r = parse_code(args.code)
    turns = 4 * args.rounds + 4  # the warm-up, the A/B and A/A rounds, the median step's three
    rows = int(1.25 * args.batch * args.chunk * turns)  # every turn trains whole (a hold-out share comes off)
    config = TrainConfig(synthetic=True, synthetic_rows=rows, batch_size=args.batch, seed=1, deterministic=True)
    with tempfile.TemporaryDirectory(prefix="xdl-ec-bench-reattach-") as directory:
        t0 = time.perf_counter()
        run = ReattachableRun(directory, 60.0)
        head_seconds = time.perf_counter() - t0
        try:
            cluster = ClusterConfig(servers=k + r, workers=1, backend="ray", address=run.address, detached=True)
            trainer = PSTrainer(
                criteo_job(config).spec,
                cluster,
                RunSettings(config.seed, config.deterministic),
                ErasureCoded(k, r),
            )
            try:
                shape = {"servers": k + r, "bench": True}
                t0 = time.perf_counter()
                run.keep(trainer, shape)
                keep_seconds = time.perf_counter() - t0
                trainer.fit(args.chunk)  # TF traced, caches warm
                timed = TimedHook(run)
                ab = _rounds(trainer, timed, args.rounds, args.chunk, aa=False)
                aa = _rounds(trainer, timed, args.rounds, args.chunk, aa=True)
                step_seconds = statistics.median(_turn(trainer, args.chunk) for _ in range(3))
            finally:
                trainer.close()
        finally:
            run.end()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (cores {os.cpu_count()})")
    print(f"run head started and connected in {head_seconds:.1f} s; run record written in {1000 * keep_seconds:.1f} ms")
    hook_us = 1e6 * statistics.median(timed.seconds)
    print(
        f"the run's step hook: median {hook_us:.1f} us per step (p90 "
        f"{1e6 * sorted(timed.seconds)[int(0.9 * len(timed.seconds))]:.1f} us, {len(timed.seconds)} steps), "
        f"{100 * hook_us / 1e6 / step_seconds:.3f}% of a median step ({1000 * step_seconds:.1f} ms); dense state sent "
        "per step: 0 bytes (the worker holds it)"
    )
    for name, ratios in (("with/without the run's step hook", ab), ("A/A (both without)", aa)):
        low, high = _bootstrap(ratios)
        median = statistics.median(ratios)
        print(
            f"{name}: median ratio {median:.4f} ({100 * (median - 1):+.2f}%), 95% interval "
            f"{100 * (low - 1):+.2f}% .. {100 * (high - 1):+.2f}% over {len(ratios)} rounds of {args.chunk} steps"
        )


if __name__ == "__main__":
    main()
