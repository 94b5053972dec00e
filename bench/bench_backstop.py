"""Benchmark: what the ec backstop (incremental background saves) costs on top of ``--ft ec``. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_backstop.py [--every 5s] [--rounds 30] [--chunk 20]
                                                              [--batch 512] [--pairs 2] [--aa] [--plot FILE.png]

Two clusters of 3 servers (``ec``, code 2+1) and one sync worker each live side by side and train the built-in
job's synthetic Criteo-shaped data in turns of ``--chunk`` steps, the order alternating every round; one of them
also runs a :class:`~xdl_ec.keep.backstop.Backstop` every ``--every`` (steps or seconds) into a temporary directory.
Each backstop turn ends by waiting for its write in flight, so the background writing is charged to the backstop
side, never to the other cluster's turn. Overhead = median over rounds of (backstop seconds / ec seconds) - 1,
with a 95% bootstrap interval; ``--pairs`` splits the rounds over fresh cluster pairs; ``--aa`` runs both sides
without a backstop: that spread is the method's noise floor. Both clusters end at the same model_digest.

Then the increments: rows and bytes of every cut, against the table's rows at that cut (``--plot`` draws bytes
per increment against rows changed, with the full saves' table-size bytes beside them).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from typing import Any, Dict, List, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ft.configs import EcConfig  # noqa: E402
from xdl_ec.ft.factory import make_strategy  # noqa: E402
from xdl_ec.keep.backstop import Backstop  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402


def make_trainer(job: Any, seed: int) -> PSTrainer:
    return PSTrainer(
        job.spec,
        ClusterConfig(servers=3),
        RunSettings(seed=seed, deterministic=True),
        make_strategy(EcConfig(code=(2, 1))),
    )


def bootstrap(ratios: List[float], seed: int = 0, n: int = 2000) -> Tuple[float, float]:
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(n))
    return medians[int(0.025 * n)], medians[int(0.975 * n)]


def run_pair(args: argparse.Namespace, rounds: int, backstop_first: bool, directory: str) -> Dict[str, Any]:
    config = TrainConfig(
        synthetic=True,
        synthetic_rows=args.rows,
        batch_size=args.batch,
        seed=args.seed,
        steps=(rounds + 1) * args.chunk,
        deterministic=True,
        progress=False,
    )
    job = criteo_job(config)
    made = []
    for side in ("backstop", "ec") if backstop_first else ("ec", "backstop"):
        made.append((side, make_trainer(job, args.seed)))
    trainers = dict(made)
    backstop = None
    if not args.aa:
        backstop = Backstop(directory, job.spec, seed=args.seed, deterministic=True, workers=1, every=args.every)
        trainers["backstop"].hooks.append(backstop)
    try:
        for trainer in trainers.values():  # the first turn traces TF: not timed
            trainer.fit(args.chunk)
        if backstop is not None:
            backstop.start(trainers["backstop"].step)
        seconds: Dict[str, List[float]] = {"ec": [], "backstop": []}
        for r in range(rounds):
            order = ["ec", "backstop"] if (r % 2 == 0) == backstop_first else ["backstop", "ec"]
            for side in order:
                start = time.perf_counter()
                trainers[side].fit(args.chunk)
                if side == "backstop" and backstop is not None:
                    backstop.wait()  # its background write is charged to this side
                seconds[side].append(time.perf_counter() - start)
        digests = {side: t.digest() for side, t in trainers.items()}
        assert digests["ec"] == digests["backstop"], "the two clusters trained different models"
        tables = trainers["backstop"].scheduler.server_stats()
        return {
            "seconds": seconds,
            "increments": [] if backstop is None else list(backstop.increments),
            "rows": sum(sum(s["rows"].values()) for s in tables),
        }
    finally:
        if backstop is not None:
            backstop.close()
        for trainer in trainers.values():
            trainer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", default="5s", help="backstop interval: N steps or Ns (default 5s)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--chunk", type=int, default=20)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rows", type=int, default=200_000, help="synthetic rows (the data cycle)")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--aa", action="store_true", help="no backstop on either side: the noise floor")
    parser.add_argument("--plot", help="write bytes per increment against rows changed to this PNG")
    args = parser.parse_args()
    ratios: List[float] = []
    increments: List[Dict[str, Any]] = []
    totals = {"ec": 0.0, "backstop": 0.0}
    for pair in range(args.pairs):
        rounds = args.rounds // args.pairs + (1 if pair < args.rounds % args.pairs else 0)
        with tempfile.TemporaryDirectory(prefix="xdl-ec-backstop-bench-") as directory:
            result = run_pair(args, rounds, backstop_first=pair % 2 == 1, directory=directory)
        for a, b in zip(result["seconds"]["ec"], result["seconds"]["backstop"]):
            ratios.append(b / a)
            totals["ec"] += a
            totals["backstop"] += b
        increments += result["increments"]
        print(
            f"pair {pair + 1}/{args.pairs}: {rounds} rounds, median ratio "
            f"{statistics.median(r for r in ratios[-rounds:]):.4f}, table rows {result['rows']:,}"
        )
    low, high = bootstrap(ratios)
    what = "A/A (no backstop on either side)" if args.aa else f"backstop every {args.every}"
    print(f"\n{what}, batch {args.batch}, {args.chunk}-step turns, {len(ratios)} rounds over {args.pairs} pair(s):")
    print(
        f"  overhead on top of ec: median {statistics.median(ratios) - 1:+.2%} "
        f"(95% CI {low - 1:+.2%} .. {high - 1:+.2%}), totals {totals['backstop'] / totals['ec'] - 1:+.2%}"
    )
    if increments:
        print("  increments (step, full, rows, bytes, write s):")
        for i in increments:
            print(
                f"    {i['step']:>6} {'full' if i['full'] else 'incr':>4} {i['rows']:>9,} {i['bytes']:>12,} "
                f"{i['write_seconds']:.3f}"
            )
        partial = [i for i in increments if not i["full"] and i["rows"]]
        if partial:
            per_row = [i["bytes"] / i["rows"] for i in partial]
            print(f"  bytes per changed row in increments: {min(per_row):.1f} .. {max(per_row):.1f}")
    if args.plot and increments:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for full, marker, label in ((False, "o", "increment"), (True, "s", "full (compaction)")):
            points = [(i["rows"], i["bytes"]) for i in increments if i["full"] == full]
            if points:
                ax.scatter(*zip(*points), marker=marker, label=label)
        ax.set_xlabel("rows written (changed since the previous cut; all rows for a full one)")
        ax.set_ylabel("bytes written")
        ax.set_title(f"ec backstop every {args.every}: bytes per cut")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"  plot: {args.plot}")


if __name__ == "__main__":
    main()
