"""Benchmark: the cost of ``--ft ec``, measured against ``--ft none`` in the same run. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_ft_ec.py [--code 4,1] [--batch 256] [--chunk 40] [--rounds 40]
                                                           [--steps 200] [--fail-at 100] [--repeats 3]
                                                           [--rebuild-share 0.05] [--backend local|ray] [--aa]
                                                           [--pairs 1]

1. Normal operation, interleaved: two clusters of N = k + r servers and one sync worker each, one without fault
   tolerance and one with ``ec``, live side by side on the same machine, training the same synthetic data in
   turns of ``--chunk`` steps (``--rounds`` turns each, after a first turn that traces TF; the order alternates
   none-ec, ec-none so a trend within a round cancels). Each ``ec`` turn ends by draining its parity pipeline
   (every push parity-durable) inside its timed span, so background work is never carried into the other
   cluster's turn: this charges ``ec`` for all the work it caused. Overhead three ways: from the medians of
   every step's seconds (ec's plus its drain per step), the median over rounds of (ec seconds / none seconds of
   the same round) - 1, each with a 95% bootstrap interval over rounds, and the ratio of the totals. Runs of whole
   jobs one after the other swing +-10-50% on a shared VM; turns a fraction of a second apart see the same machine. Also
   the machine's busy CPU time per sample (from /proc/stat: every process,
   Ray's included) and, on the local backend, this process's (the whole cluster's, blind to other processes'
   load). Both clusters must end with the same model_digest. ``--pairs P`` splits the rounds over P fresh cluster
   pairs, made none-first and ec-first in turn: one pair keeps a lasting bias of its own (A/A runs of one pair
   showed the second-made cluster up to 2.7% faster), P pairs average it out, and the intervals resample rounds
   within each pair. ``--aa`` runs the cluster named ec without parity too: the spread of that A/A "overhead"
   is the method's noise floor on the machine.
2. Recovery, ``--repeats`` runs of ``--steps`` steps: server 1 killed before step ``--fail-at``: the rebuild's
   seconds (recovery pause, key index, replay and every stripe, rate-limited to ``--rebuild-share`` of wall time
   over the step boundaries), samples/s while it ran against the same run's steps before the kill (paired) and
   against the interleaved ``ec`` rate, the degraded reads it served; the final model_digest is checked against
   a failure-free run's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.benchmark.machine_cpu import busy_cpu_seconds  # noqa: E402
from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ft.configs import parse_code  # noqa: E402
from xdl_ec.ft.ec_strategy import DEFAULT_REBUILD_SHARE, ErasureCoded  # noqa: E402
from xdl_ec.ft.failure_injector import FailureInjector  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402
from xdl_ec.ps.backend import connect_ray  # noqa: E402


def _trainer(config: TrainConfig, servers: int, strategy, kills=(), backend: str = "local") -> PSTrainer:
    return PSTrainer(
        criteo_job(config).spec,
        ClusterConfig(servers=servers, workers=1, backend=backend),
        RunSettings(config.seed, config.deterministic),
        strategy,
        FailureInjector(FailureSchedule(list(kills))) if kills else None,
    )


def _run(config: TrainConfig, servers: int, strategy, kills=(), backend: str = "local") -> dict:
    trainer = _trainer(config, servers, strategy, kills, backend)
    try:
        report = trainer.fit()
        report["model_digest"] = trainer.digest()
    finally:
        trainer.close()
    return report


@dataclasses.dataclass
class Turn:
    """One cluster's turn of the interleaved measurement."""

    seconds: float  # wall time of the turn, draining parity included
    cpu: Optional[float]  # busy CPU seconds of the whole machine during it
    own_cpu: float  # CPU seconds of this process (every thread): the whole cluster on the local backend
    samples: int
    steps: List[float]  # each step's wall seconds (from the trainer's timeline)
    drain: float  # seconds spent waiting for parity after the last step (0 without ec)


def _turn(trainer: PSTrainer, steps: int) -> Turn:
    """Trains ``steps`` steps of ``trainer`` and, under ``ec``, waits until they are parity-durable."""
    cpu, own, start = busy_cpu_seconds(), time.process_time(), time.perf_counter()
    report = trainer.fit(steps=steps)
    trained = time.perf_counter()
    if isinstance(trainer.strategy, ErasureCoded):
        trainer.strategy.drain()
    end, cpu_end, own_end = time.perf_counter(), busy_cpu_seconds(), time.process_time()
    ends = [row[1] for row in report["timeline"]]
    return Turn(
        end - start,
        None if cpu is None else cpu_end - cpu,
        own_end - own,
        report["samples"],
        [b - a for a, b in zip([0.0] + ends, ends)],
        end - trained,
    )


def _robust_ratio(none: List[Turn], ec: List[Turn]) -> float:
    """ec / none cost of a step from the medians of every step's seconds (a GC pause or a neighbour's burst
    moves a median little); ec's includes its parity drain per step (its turns' median drain over the turn's
    steps), i.e. the background work still queued when its last step ended."""
    median = statistics.median
    drain = median(t.drain / len(t.steps) for t in ec)
    return (median(s for t in ec for s in t.steps) + drain) / median(s for t in none for s in t.steps)


def _bootstrap(pairs: List[List[Tuple[Turn, Turn]]], estimate: Callable, seed: int = 7, draws: int = 1000) -> tuple:
    """95% interval of ``estimate(none turns, ec turns)`` over rounds drawn with replacement (seeded), within each
    cluster pair (each pair's own bias stays in every draw in its share)."""
    rng = random.Random(seed)
    values = []
    for _ in range(draws):
        drawn = [r for rounds in pairs for r in rng.choices(rounds, k=len(rounds))]
        values.append(estimate([n for n, _ in drawn], [e for _, e in drawn]))
    values.sort()
    return values[int(0.025 * draws)], values[int(0.975 * draws) - 1]


def _normal_operation(args: argparse.Namespace, k: int, r: int) -> float:
    """Part 1 (see the module docstring); prints it and returns the interleaved ec samples/s."""
    if not 1 <= args.pairs <= args.rounds:
        raise SystemExit(f"--pairs: must be in [1, --rounds={args.rounds}], got {args.pairs}")
    pairs: List[List[Tuple[Turn, Turn]]] = []
    same_model = True
    for pair in range(args.pairs):
        rounds = args.rounds // args.pairs + (pair < args.rounds % args.pairs)
        pair_turns = _pair(args, k, r, rounds, ec_first=pair % 2 == 1)
        same_model &= pair_turns["same_model"]
        pairs.append(list(zip(pair_turns["none"], pair_turns["ec"])))
    turns = {name: [turn[i] for rounds in pairs for turn in rounds] for i, name in enumerate(("none", "ec"))}
    per_round = lambda none, ec: statistics.median(e.seconds / n.seconds for n, e in zip(none, ec))  # noqa: E731
    seconds = {name: sum(t.seconds for t in turns[name]) for name in turns}
    samples = {name: sum(t.samples for t in turns[name]) for name in turns}
    print(
        f"normal operation, {args.backend} backend, {k + r} servers, code k={k} r={r}, batch {args.batch}, "
        f"{args.rounds} rounds of {args.chunk} steps per cluster, interleaved, over {args.pairs} cluster pair(s)"
        f"{' (A/A: the cluster named ec runs without parity)' if args.aa else ''}:"
    )
    print(
        f"  none {samples['none'] / seconds['none']:,.0f} samples/s   ec {samples['ec'] / seconds['ec']:,.0f} "
        f"samples/s (ec turns include draining parity: median "
        f"{1000 * statistics.median(t.drain for t in turns['ec']):.2f} ms)"
    )
    for label, estimate in (("per-step medians", _robust_ratio), ("per-round turn seconds", per_round)):
        low, high = _bootstrap(pairs, estimate)
        print(
            f"  overhead from {label}: {100 * (estimate(turns['none'], turns['ec']) - 1):+.2f}% "
            f"(95% bootstrap interval over rounds {100 * (low - 1):+.2f}% .. {100 * (high - 1):+.2f}%)"
        )
    print(f"  overhead from total seconds: {100 * (seconds['ec'] / seconds['none'] - 1):+.2f}%")
    if all(t.cpu is not None for t in turns["none"] + turns["ec"]):
        cpu = {name: sum(t.cpu for t in turns[name]) / samples[name] * 1e6 for name in turns}
        print(
            f"  busy CPU per sample (whole machine): none {cpu['none']:.1f} us   ec {cpu['ec']:.1f} us   ratio "
            f"{cpu['ec'] / cpu['none']:.3f}"
        )
    if args.backend == "local":  # the whole cluster is this process: its CPU time ignores other processes' load
        own = {name: sum(t.own_cpu for t in turns[name]) / samples[name] * 1e6 for name in turns}
        print(
            f"  CPU per sample of this process: none {own['none']:.1f} us   ec {own['ec']:.1f} us   ratio "
            f"{own['ec'] / own['none']:.3f}"
        )
    print(f"  same model with and without parity: {same_model}")
    return samples["ec"] / seconds["ec"]


def _pair(args: argparse.Namespace, k: int, r: int, rounds: int, ec_first: bool) -> dict:
    """One none / ec cluster pair (made in that order, or ec first), ``rounds`` interleaved rounds of turns:
    {"none": turns, "ec": turns, "same_model": digests equal} (``--pairs`` in the module docstring)."""
    steps = args.chunk * (rounds + 1)
    config = TrainConfig(
        synthetic=True,
        synthetic_rows=args.batch * (steps + 8),
        batch_size=args.batch,
        steps=steps,
        deterministic=True,
        progress=False,
        seed=1,
    )
    trainers: Dict[str, PSTrainer] = {}
    try:
        for name in ("ec", "none") if ec_first else ("none", "ec"):
            strategy = None if name == "none" or args.aa else ErasureCoded(k, r, rebuild_share=args.rebuild_share)
            trainers[name] = _trainer(config, k + r, strategy, backend=args.backend)
        for trainer in trainers.values():
            _turn(trainer, args.chunk)  # traces TF and inserts the first rows: not measured
        turns: Dict[str, List[Turn]] = {"none": [], "ec": []}
        for i in range(rounds):
            for name in ("none", "ec") if i % 2 == 0 else ("ec", "none"):
                turns[name].append(_turn(trainers[name], args.chunk))
        digests = {name: t.digest() for name, t in trainers.items()}
    finally:
        for trainer in trainers.values():
            trainer.close()
    return {**turns, "same_model": digests["none"] == digests["ec"]}


def _recovery(args: argparse.Namespace, k: int, r: int, normal_ec: float) -> None:
    """Part 2 (see the module docstring)."""
    config = TrainConfig(
        synthetic=True,
        synthetic_rows=args.batch * (args.steps + 8),
        batch_size=args.batch,
        steps=args.steps,
        deterministic=True,
        progress=False,
        seed=1,
    )
    share = args.rebuild_share
    reference = _run(config, k + r, ErasureCoded(k, r, rebuild_share=share), backend=args.backend)["model_digest"]
    print(f"server 1 killed before step {args.fail_at} of {args.steps}, rebuild share {share:g}:")
    own, vs_normal = [], []
    for _ in range(args.repeats):
        strategy = ErasureCoded(k, r, rebuild_share=share)
        report = _run(config, k + r, strategy, [Kill(args.fail_at, "server", 1)], backend=args.backend)
        (failure,) = report["failures"]
        during = failure["samples_per_sec_during_rebuild"] or 0.0
        before = _before_kill(report["timeline"], args.fail_at)
        own.append(during / before)
        vs_normal.append(during / normal_ec)
        print(
            f"  rebuild {failure['rebuild_seconds'] * 1000:.0f} ms over {strategy.boundaries_rebuilding} step "
            f"boundaries, {during:,.0f} samples/s during it = {100 * own[-1]:.0f}% of its own steps before the "
            f"kill ({before:,.0f}), degraded reads {report['degraded_reads']}, digest equals failure-free: "
            f"{report['model_digest'] == reference}"
        )
    print(
        f"throughput during rebuild / the same run before the kill: median {100 * statistics.median(own):.0f}% "
        f"(repeats {[round(100 * x) for x in own]}); / interleaved normal ec: median "
        f"{100 * statistics.median(vs_normal):.0f}%; parity bytes {report['parity_bytes']:,}"
    )


REDUNDANCY_VARIANTS = {  # label -> ErasureCoded keyword arguments
    "unthrottled": dict(rebuild="boundary", rebuild_share=1.0),  # the whole rebuild at the first boundary
    "boundary 0.05": dict(rebuild="boundary", rebuild_share=DEFAULT_REBUILD_SHARE),  # the step-boundary pacing
    # beside the steps at a fixed share (as before the governor)
    "background 0.05": dict(rebuild="background", rebuild_share=DEFAULT_REBUILD_SHARE, rebuild_keeps=0.0),
    # the default: beside the steps, at least the share and more while training keeps 95% of its speed
    "background": dict(rebuild="background", rebuild_share=DEFAULT_REBUILD_SHARE),
}


def _redundancy(args: argparse.Namespace, k: int, r: int) -> None:
    """``--redundancy``: server 1 killed before step ``--fail-at``; for each rebuild variant, interleaved (the
    order rotates every repeat), the seconds from the kill to full redundancy and samples/s of the steps after the
    failed one until then, against the same run's steps before the kill (the failed step, which holds the
    recovery pause, excluded from both). Goal: background <= 2x unthrottled, >= 95% of normal."""
    config = TrainConfig(
        synthetic=True,
        synthetic_rows=args.batch * (args.steps + 8),
        batch_size=args.batch,
        steps=args.steps,
        deterministic=True,
        progress=False,
        seed=1,
        emb_dim=args.emb_dim,
    )
    reference = _run(config, k + r, None, backend=args.backend)["model_digest"]
    labels = list(REDUNDANCY_VARIANTS)
    ttfr: Dict[str, List[float]] = {label: [] for label in labels}
    during: Dict[str, List[float]] = {label: [] for label in labels}
    print(f"time to full redundancy, k={k} r={r}, server 1 killed before step {args.fail_at} of {args.steps}:")
    for repeat in range(args.repeats):
        for label in labels[repeat % len(labels) :] + labels[: repeat % len(labels)]:
            strategy = ErasureCoded(k, r, **REDUNDANCY_VARIANTS[label])
            report = _run(config, k + r, strategy, [Kill(args.fail_at, "server", 1)], backend=args.backend)
            (failure,) = report["failures"]
            ttfr[label].append(failure["seconds_to_full_redundancy"])
            kill_at = report["injected"][0]["seconds"]
            end = kill_at + failure["seconds_to_full_redundancy"]
            timeline = report["timeline"]
            times = {row[0]: row[1] for row in timeline}
            after = [
                (row[0], row[1] - times[row[0] - 1])
                for row in timeline
                if row[0] > args.fail_at + 1 and row[0] - 1 in times and row[1] <= end
            ]
            before = [
                row[1] - times[row[0] - 1] for row in timeline if 2 < row[0] < args.fail_at and row[0] - 1 in times
            ]
            ratio = (statistics.mean(before) / statistics.mean([s for _, s in after])) if after else None
            if ratio is not None:
                during[label].append(ratio)
            print(
                f"  {label:>14}: full redundancy {1000 * ttfr[label][-1]:6.0f} ms after the kill, "
                f"{len(after)} normal steps during it at "
                f"{'n/a' if ratio is None else f'{100 * ratio:.0f}%'} of the steps before, digest equals "
                f"failure-free: {report['model_digest'] == reference}"
            )
    base = statistics.median(ttfr["unthrottled"])
    for label in labels:
        rates = during[label]
        print(
            f"{label:>14}: median {1000 * statistics.median(ttfr[label]):.0f} ms to full redundancy = "
            f"{statistics.median(ttfr[label]) / base:.2f}x unthrottled; samples/s during it "
            f"{'n/a' if not rates else f'{100 * statistics.median(rates):.0f}% (median of {len(rates)})'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", default="4,1")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=40, help="steps per turn in the interleaved measurement")
    parser.add_argument("--rounds", type=int, default=40, help="turns per cluster in the interleaved measurement")
    parser.add_argument(
        "--pairs",
        type=int,
        default=1,
        help="fresh none/ec cluster pairs the rounds are split over, made in alternating order",
    )
    parser.add_argument("--steps", type=int, default=200, help="steps of each recovery run")
    parser.add_argument("--fail-at", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="recovery runs")
    parser.add_argument("--rebuild-share", type=float, default=DEFAULT_REBUILD_SHARE)
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument(
        "--aa",
        action="store_true",
        help="A/A run: the cluster named ec has no fault tolerance either (the method's noise floor)",
    )
    parser.add_argument(
        "--emb-dim",
        type=int,
        default=TrainConfig.emb_dim,
        help="--redundancy: embedding dimension (a larger one makes a longer rebuild)",
    )
    parser.add_argument(
        "--redundancy",
        action="store_true",
        help="only the time to full redundancy of each rebuild variant (see _redundancy)",
    )
    args = parser.parse_args()
    k, r = parse_code(args.code)
    if args.redundancy:
        _redundancy(args, k, r)
        return
    if args.backend == "ray":
        connect_ray()  # both clusters in one Ray, started here so that neither trainer stops it when it closes
    normal_ec = _normal_operation(args, k, r)
    if args.repeats > 0 and not args.aa:
        _recovery(args, k, r, normal_ec)


def _before_kill(timeline: list, fail_at: int) -> float:
    """Samples/s of a run's steps 2 .. fail_at - 1 (after the first, which traces TF; before the kill)."""
    rows = [row for row in timeline if row[0] < fail_at]
    return (rows[-1][2] - rows[0][2]) / (rows[-1][1] - rows[0][1])


if __name__ == "__main__":
    main()
