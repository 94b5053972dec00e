"""Benchmark: admission's sketch counter against the exact counter (Admit(counter="sketch" | "exact")). Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_sketch_counter.py [--steps 400] [--batch 2048] [--pool 200000]
        [--fresh 0.3] [--min-count 3] [--width 16384] [--depth 4] [--rounds 9] [--out FILE.json]

The stream: per step a batch of ``--batch`` ids, ``--fresh`` of them never seen before (an endless stream's new ids),
the rest Zipf-distributed (exponent 1.1) over a pool of ``--pool`` ids; a push applies each step's unique ids once.

1. Accuracy and memory, one pass (no halving, so count-min never under-counts): ids admitted by each counter, the
   sketch's early admissions (true count below min_count when admitted; count-min's bound: an estimate exceeds the
   true count by more than e * N / width with probability at most exp(-depth)), later ones (must be 0), and the
   records and table bytes each holds at the end (the exact counter keeps a record per pending id).
2. Cost: the same batches pushed into a fresh exact and a fresh sketch table, alternating order each round, plus an
   A/A pair (exact twice) for the noise floor; per round sketch seconds / exact seconds; the median over rounds
   with a 95% bootstrap interval of the median.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Dict, List, Tuple

import numpy as np

from xdl_ec.sparse.row_rules import Admit
from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.sparse.table_config import Table


def stream(args: argparse.Namespace) -> List[np.ndarray]:
    rng = np.random.default_rng(7)
    weights = 1.0 / np.arange(1, args.pool + 1) ** 1.1
    weights /= weights.sum()
    fresh = int(args.batch * args.fresh)
    next_new = args.pool
    out = []
    for _ in range(args.steps):
        old = rng.choice(args.pool, args.batch - fresh, p=weights)
        new = np.arange(next_new, next_new + fresh)
        next_new += fresh
        out.append(np.unique(np.concatenate([old, new]) * 7919 + 13).astype(np.int64))
    return out


def table(args: argparse.Namespace, counter: str, decay: int = 0) -> EmbeddingTable:
    if counter == "sketch":
        admit = Admit(args.min_count, "sketch", width=args.width, depth=args.depth, decay_every_steps=decay)
    else:
        admit = Admit(args.min_count)
    return EmbeddingTable.from_config(Table("t", 8, admit=admit))


def accuracy(args: argparse.Namespace, batches: List[np.ndarray]) -> Dict[str, Any]:
    exact, sketch = table(args, "exact"), table(args, "sketch")
    seen: Dict[int, int] = {}
    exact_at: Dict[int, int] = {}
    sketch_at: Dict[int, int] = {}
    early = 0
    for step, keys in enumerate(batches, 1):
        grads = np.zeros((keys.size, 8), np.float32)
        exact.push(keys, grads, step=step)
        sketch.push(keys, grads, step=step)
        in_exact, in_sketch = exact.find(keys)[1], sketch.find(keys)[1]
        for key, a, b in zip(keys.tolist(), in_exact, in_sketch):
            seen[key] = seen.get(key, 0) + 1
            if a and key not in exact_at:
                exact_at[key] = step
            if b and key not in sketch_at:
                sketch_at[key] = step
                early += seen[key] < args.min_count
    later = sum(1 for key, step in exact_at.items() if sketch_at.get(key, step + 1) > step)
    stats = {name: t.shard.policy_stats() for name, t in (("exact", exact), ("sketch", sketch))}
    return {
        "distinct_ids": len(seen),
        "admitted": {"exact": len(exact_at), "sketch": len(sketch_at)},
        "sketch_early": early,
        "sketch_early_fraction": early / max(len(sketch_at), 1),
        "sketch_later": later,
        "records": {n: int(s["rows"] + s["pending"]) for n, s in stats.items()},
        "table_bytes": {"exact": exact.bounded_report()["bytes"], "sketch": sketch.bounded_report()["bytes"]},
    }


def push_seconds(t: EmbeddingTable, batches: List[np.ndarray]) -> float:
    grads = [np.zeros((k.size, 8), np.float32) for k in batches]
    start = time.perf_counter()
    for step, (keys, g) in enumerate(zip(batches, grads), 1):
        t.push(keys, g, step=step)
    return time.perf_counter() - start


def median_interval(ratios: List[float]) -> Tuple[float, float, float]:
    rng = np.random.default_rng(0)
    values = np.array(ratios)
    medians = np.median(rng.choice(values, (2000, values.size)), axis=1)
    return float(np.median(values)), float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def cost(args: argparse.Namespace, batches: List[np.ndarray]) -> Dict[str, Any]:
    sketch_ratio, aa_ratio = [], []
    for r in range(args.rounds):
        kinds = ["exact", "sketch", "exact"] if r % 2 == 0 else ["sketch", "exact", "exact"]
        seconds: Dict[str, List[float]] = {"exact": [], "sketch": []}
        for kind in kinds:
            seconds[kind].append(push_seconds(table(args, kind, decay=100), batches))
        sketch_ratio.append(seconds["sketch"][0] / seconds["exact"][0])
        aa_ratio.append(seconds["exact"][1] / seconds["exact"][0])
    return {"sketch_over_exact": median_interval(sketch_ratio), "a_a": median_interval(aa_ratio)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--pool", type=int, default=200000)
    p.add_argument("--fresh", type=float, default=0.3)
    p.add_argument("--min-count", type=int, default=3)
    p.add_argument("--width", type=int, default=1 << 14)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out")
    args = p.parse_args()
    batches = stream(args)
    result = {"args": vars(args), "accuracy": accuracy(args, batches), "cost": cost(args, batches)}
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
