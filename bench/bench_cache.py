"""Benchmark: the worker embedding cache (HET) against no cache, in the same run. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_cache.py [--steps 300] [--batch 512] [--servers 3]
        [--emb-dim 64] [--shares 1,5,10] [--staleness 0,1,10,100] [--data synthetic-1.1,synthetic-1.3,criteo]
        [--ray-pairs 2] [--net-rates none,1gbit] [--aa] [--policy lfu|lru] [--out DIR]

For each data set (synthetic Criteo-shaped data at Zipf 1.1 and 1.3; the real Criteo sample from ../shared/data
when present) the built-in DLRM trains on ``--servers`` local servers and one worker: without a cache, then with a
cache of each share of the table's rows and each staleness. Reported per run: embedding bytes moved per sample
(pulled + pushed, clocks and keys included, as ``bytes_*_per_sample`` count them) and the reduction against no
cache, hit rate, observed staleness, samples/s, hold-out AUC and its difference from no cache. Bytes and AUC are
deterministic for the seed; samples/s of whole runs swing on this VM, so the no-cache run is repeated between the
cached ones and each cached run is compared with the mean of the no-cache runs next to it (the spread of the
no-cache runs is the noise floor). ``--ray-pairs P``: P interleaved pairs of no cache / cache 10% S=10 on Ray
(one worker, ``--servers`` server actors): samples/s ratio per pair, on loopback as it is ("none") and with the
loopback limited to each other rate of ``--net-rates`` (``tc``, root only: :mod:`shaped_loopback`), where bytes
cost what they cost on a cluster's network; ``--aa`` adds a third run per pair, no cache again, whose ratio to the
first is the noise floor. Each data set also gets its static oracle: the hit rate of a cache
that holds, from their first use, the share of the run's keys seen in the most batches (hindsight), against which
the policy's hit rate compares. Writes results.json and a plot of traffic and AUC against S.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, str(Path(__file__).resolve().parent))  # shaped_loopback, beside this file (python -P too)

import numpy as np  # noqa: E402
from shaped_loopback import ShapedLoopback  # noqa: E402

import xdl_ec  # noqa: E402
from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job, open_training_data, train_batch_stream  # noqa: E402

CRITEO = Path(__file__).resolve().parents[2] / "shared" / "data" / "criteo_kaggle_train_head10k.tsv.gz"


def config_for(data: str, args: argparse.Namespace) -> Optional[TrainConfig]:
    common = dict(
        steps=args.steps,
        batch_size=args.batch,
        seed=args.seed,
        deterministic=True,
        progress=False,
        emb_dim=args.emb_dim,
    )
    if data.startswith("synthetic-"):
        return TrainConfig(
            synthetic=True, synthetic_zipf=float(data.split("-", 1)[1]), synthetic_rows=args.rows, **common
        )
    if data == "criteo":
        return TrainConfig(data=str(CRITEO), **common) if CRITEO.is_file() else None
    raise ValueError(f"--data: unknown data set {data!r}")


def run(config: TrainConfig, args: argparse.Namespace, cache: Optional[xdl_ec.Cache], backend: str = "local") -> dict:
    job = criteo_job(config)
    cluster = xdl_ec.Cluster(servers=args.servers, backend=backend, cache=cache)
    start = time.perf_counter()
    report = job.fit(steps=args.steps, cluster=cluster, deterministic=True, seed=args.seed)
    moved = report["bytes_pulled_per_sample"] + report["bytes_pushed_per_sample"]
    stats = (report.get("cache") or {}).get("criteo_categorical", {})
    return {
        "bytes_per_sample": moved,
        "samples_per_sec": report["samples_per_sec"],
        "auc": report.get("auc"),
        "hit_rate": stats.get("hit_rate"),
        "staleness_max": stats.get("staleness_max"),
        "staleness_mean": stats.get("staleness_mean"),
        "wall_seconds": time.perf_counter() - start,
    }


def oracle_hit_rate(config: TrainConfig, share: float) -> float:
    """Hit rate over the batches' unique keys of the static oracle: the ``share`` % of the run's distinct keys
    that occur in the most batches, each missing once (its first use inserts the row) and hitting after."""
    batches = train_batch_stream(open_training_data(config), config, config.steps)
    _, counts = np.unique(np.concatenate([np.unique(b.sparse) for b in batches]), return_counts=True)
    hottest = np.sort(counts)[::-1][: int(counts.size * share / 100)]
    return float((hottest - 1).sum() / counts.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--emb-dim", type=int, default=64, help="row width (HET's headline runs use 128)")
    parser.add_argument("--rows", type=int, default=200_000, help="synthetic rows (the data cycle)")
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--shares", default="1,5,10", help="cache sizes in percent of the table's rows")
    parser.add_argument("--staleness", default="0,1,10,100")
    parser.add_argument("--data", default="synthetic-1.1,synthetic-1.3,criteo")
    parser.add_argument("--policy", default="lfu", choices=("lfu", "lru"))
    parser.add_argument("--ray-pairs", type=int, default=0)
    parser.add_argument(
        "--net-rates",
        default="none",
        help="loopback rates for the Ray pairs: none (as it is) and/or tc rates such as 1gbit",
    )
    parser.add_argument(
        "--aa",
        action="store_true",
        help="also an A/A pair (no cache twice) per rate and pair: the noise floor of the ratios",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="bench-cache-out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shares = [float(s) for s in args.shares.split(",")]
    stalenesses = [int(s) for s in args.staleness.split(",")]
    results: Dict[str, Any] = {"args": vars(args), "data": {}}
    for data in args.data.split(","):
        config = config_for(data, args)
        if config is None:
            print(f"{data}: skipped ({CRITEO} not found)")
            continue
        rows: List[dict] = []
        oracle = {share: oracle_hit_rate(config, share) for share in shares}
        baselines = [run(config, args, None)]
        print(
            f"{data}: no cache {baselines[0]['bytes_per_sample']:.0f} B/sample, "
            f"{baselines[0]['samples_per_sec']:.0f} samples/s, AUC {baselines[0]['auc']:.4f}; static oracle's "
            f"hit rate " + ", ".join(f"{oracle[s]:.3f} at {s:g}%" for s in shares)
        )
        for share in shares:
            for s in stalenesses:
                cached = run(config, args, xdl_ec.Cache(rows=f"{share:g}%", staleness=s, policy=args.policy))
                baselines.append(run(config, args, None))  # a no-cache run beside every cached one
                near = statistics.mean(b["samples_per_sec"] for b in baselines[-2:])
                base = baselines[0]
                row = {
                    "share": share,
                    "staleness": s,
                    **cached,
                    "traffic_reduction": 1 - cached["bytes_per_sample"] / base["bytes_per_sample"],
                    "auc_delta": None if cached["auc"] is None else cached["auc"] - base["auc"],
                    "speed_ratio": cached["samples_per_sec"] / near,
                }
                rows.append(row)
                print(
                    f"  cache {share:g}% S={s:<3}: traffic saved {row['traffic_reduction']:+.1%}, hit rate "
                    f"{row['hit_rate']:.3f}, AUC {row['auc_delta']:+.4f}, samples/s x{row['speed_ratio']:.2f}"
                )
        speeds = [b["samples_per_sec"] for b in baselines]
        results["data"][data] = {
            "no_cache": baselines[0],
            "cached": rows,
            "oracle_hit_rate": oracle,
            "no_cache_samples_per_sec": {"min": min(speeds), "max": max(speeds), "runs": len(speeds)},
        }
    if args.ray_pairs:
        config = config_for(args.data.split(",")[0], args)
        results["ray"] = {}
        for rate in args.net_rates.split(","):
            pairs = []
            for pair in range(args.ray_pairs):
                with ShapedLoopback(rate):
                    plain = run(config, args, None, backend="ray")
                    cached = run(
                        config, args, xdl_ec.Cache(rows="10%", staleness=10, policy=args.policy), backend="ray"
                    )
                    again = run(config, args, None, backend="ray") if args.aa else None
                pairs.append(
                    {
                        "no_cache": plain["samples_per_sec"],
                        "cache": cached["samples_per_sec"],
                        "ratio": cached["samples_per_sec"] / plain["samples_per_sec"],
                    }
                )
                aa = ""
                if again is not None:
                    pairs[-1]["aa_ratio"] = again["samples_per_sec"] / plain["samples_per_sec"]
                    aa = f"; A/A (no cache again) x{pairs[-1]['aa_ratio']:.2f}"
                print(
                    f"ray, loopback {rate}, pair {pair + 1}: no cache {plain['samples_per_sec']:.0f}, cache 10% "
                    f"S=10 {cached['samples_per_sec']:.0f} samples/s (x{pairs[-1]['ratio']:.2f}); traffic saved "
                    f"{1 - cached['bytes_per_sample'] / plain['bytes_per_sample']:+.1%}{aa}"
                )
            results["ray"][rate] = pairs
    (out / "results.json").write_text(json.dumps(results, indent=2))
    plot(results, out / "cache.png", stalenesses)
    print(f"wrote {out / 'results.json'} and {out / 'cache.png'}")


def plot(results: Dict[str, Any], path: Path, stalenesses: List[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (traffic, auc) = plt.subplots(1, 2, figsize=(11, 4))
    for data, result in results["data"].items():
        for share in sorted({r["share"] for r in result["cached"]}):
            rows = [r for r in result["cached"] if r["share"] == share]
            xs = [max(r["staleness"], 0.5) for r in rows]  # S = 0 drawn at 0.5 on the log axis
            label = f"{data}, {share:g}%"
            traffic.plot(xs, [100 * r["traffic_reduction"] for r in rows], marker="o", label=label)
            auc.plot(xs, [r["auc_delta"] for r in rows], marker="o", label=label)
    for ax, title in ((traffic, "embedding traffic saved (%)"), (auc, "AUC - AUC without cache")):
        ax.set_xscale("log")
        ax.set_xticks([max(s, 0.5) for s in stalenesses], [str(s) for s in stalenesses])
        ax.set_xlabel("staleness S")
        ax.set_title(title)
    auc.axhline(-0.002, color="grey", linestyle=":")
    traffic.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
