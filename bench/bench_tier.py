"""Benchmark: a table with a memory budget (the disk tier, issue #48) against the same table without one, measured
in the same run. Not a test.

    PYTHONPATH=build/tier/stage python3 -P bench/bench_tier.py [--rows 20000000] [--dim 16] [--budget-share 0.1]
                                                               [--batch 65536] [--steps 4] [--rounds 20]
                                                               [--spill-dir DIR] [--aa] [--slot-bytes 4]

Two tables of ``--rows`` rows at d ``--dim`` with Adagrad hold the same rows, loaded in bulk in a random slot order
(so hot ids are scattered over the slots, as a table filled by training has them): "plain" without a budget, and
"tiered" with a ``memory_budget`` of what a tiered table keeps in RAM whatever its budget (the key index, the free
list, 4 bytes per slot: where its frame is) plus ``--budget-share`` of the rows' records,
the other rows in a spill file under ``--spill-dir``. Then turns of ``--steps`` steps, each a pull and a push
(Adagrad) of ``--batch`` ids drawn Zipf(1.1) over all rows (truncated to the rows: numpy's unbounded ``zipf`` taken
modulo the rows would spread a quarter of the draws uniformly over a table of 500k rows), one table at a time,
``--rounds`` rounds after ``--warmup`` untimed ones (the tiered table's frames start as the last rows loaded, not
the hot ones), the order alternating per round (plain-tiered, tiered-plain) so a trend
within a round cancels. Per round: the tiered/plain ratio of samples/s (ids per second) and of CPU seconds per id
(this process's CPU time, the core's pool threads included); printed as medians with a 95% bootstrap interval over
rounds. ``--aa``: the table named tiered has no budget either, so its "ratios" are the method's noise floor on this
machine. At the end both tables' exports must be equal (the tier changes no byte) and the tiered table's counts are
printed.

The spill file lives in the page cache while the machine has RAM to spare: this measures the tier's own cost
(fetch steps, frames, eviction, the syscalls), not a device's latency.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from typing import Dict, List, Tuple

import numpy as np

from xdl_ec.sparse.memory_budget import peak_rss_bytes, tier_reports
from xdl_ec.sparse.table import EmbeddingTable

ZIPF_A = 1.1
LOAD_CHUNK = 1 << 20


def key_of(ranks: np.ndarray) -> np.ndarray:
    """Scattered int64 ids for ranks (a splitmix64 step): hashed feature ids, not small integers."""
    x = ranks.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (x ^ (x >> np.uint64(31))).view(np.int64)


def zipf_ranks(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    """``size`` ranks in [0, len(cdf)) drawn with P(rank) proportional to (rank + 1) ** -ZIPF_A."""
    return np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right")


def zipf_cdf(rows: int) -> np.ndarray:
    return np.cumsum(np.arange(1, rows + 1, dtype=np.float64) ** -ZIPF_A)


def fill(tables: List[EmbeddingTable], rows: int, dim: int, seed: int) -> None:
    """The same rows into every table, in one random order of the ranks."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(rows)
    for start in range(0, rows, LOAD_CHUNK):
        ranks = order[start : start + LOAD_CHUNK]
        keys = key_of(ranks)
        values = rng.standard_normal((len(ranks), dim), dtype=np.float32) * np.float32(0.05)
        state = np.full((len(ranks), dim), 0.1, dtype=np.float32)
        for t in tables:
            t.load(keys, values, state)


TIER_SLOT_BYTES = 4  # SpillTier::kSlotOverhead: a slot's frame number


def held_bytes(table: EmbeddingTable) -> int:
    m = table.memory_stats()
    return int(m["live_rows"] * m["record_bytes"] + m["index_bytes"] + m["free_list_bytes"])


def fixed_bytes(table: EmbeddingTable, slot_bytes: int = TIER_SLOT_BYTES) -> int:
    """What a tiered table holds in RAM whatever its budget: the key index, the free list, the tier's per-slot
    words (``slot_bytes`` each)."""
    m = table.memory_stats()
    return int(m["index_bytes"] + m["free_list_bytes"] + m["slots"] * slot_bytes)


def turn(table: EmbeddingTable, batches: List[Tuple[np.ndarray, np.ndarray]], step: int) -> Tuple[float, float]:
    """Wall and CPU seconds of one turn: a pull and a push per batch."""
    wall, cpu = time.perf_counter(), time.process_time()
    for i, (keys, grads) in enumerate(batches):
        table.pull(keys)
        table.push(keys, grads, step=step + i)
    return time.perf_counter() - wall, time.process_time() - cpu


def bootstrap(values: List[float], seed: int) -> Tuple[float, float, float]:
    """Median and its 95% bootstrap interval."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(2000))
    return statistics.median(values), medians[50], medians[1949]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--budget-share", type=float, default=0.1)
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--spill-dir", default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--aa", action="store_true", help="no budget on either table: the noise floor")
    parser.add_argument(
        "--slot-bytes",
        type=int,
        default=TIER_SLOT_BYTES,
        help="the tier's RAM per slot in the build measured (12 before 2026-12-07b), for the same frames' room",
    )
    args = parser.parse_args()

    print(f"load average at start: {os.getloadavg()}", flush=True)
    spill_dir = args.spill_dir or tempfile.mkdtemp(prefix="bench-tier-")
    plain = EmbeddingTable("plain", args.dim, optimizer="adagrad", initializer="zeros")
    t0 = time.perf_counter()
    fill([plain], args.rows, args.dim, args.seed)
    records = int(plain.memory_stats()["live_rows"] * plain.record_bytes)
    fixed = fixed_bytes(plain, args.slot_bytes)
    budget = 0 if args.aa else fixed + int(records * args.budget_share)
    print(
        f"plain: {args.rows} rows d{args.dim} adagrad, {held_bytes(plain) / 2**20:.0f} MiB held "
        f"({records / 2**20:.0f} MiB of records), filled in {time.perf_counter() - t0:.1f} s; tiered budget "
        f"{budget / 2**20:.0f} MiB ({fixed / 2**20:.0f} MiB fixed + {args.budget_share:g} of the records; "
        f"0 with --aa) "
        f"in {spill_dir}",
        flush=True,
    )
    tiered = EmbeddingTable(
        "tiered",
        args.dim,
        optimizer="adagrad",
        initializer="zeros",
        memory_budget=budget,
        spill_dir=spill_dir if budget else None,
    )
    t0 = time.perf_counter()
    fill([tiered], args.rows, args.dim, args.seed)
    print(f"tiered filled in {time.perf_counter() - t0:.1f} s", flush=True)

    rng = np.random.default_rng(args.seed + 1)
    cdf = zipf_cdf(args.rows)
    keys_of_round = [
        [key_of(zipf_ranks(rng, cdf, args.batch)) for _ in range(args.steps)] for _ in range(args.warmup + args.rounds)
    ]
    del cdf
    grads = rng.standard_normal((args.batch, args.dim), dtype=np.float32) * np.float32(0.01)
    speed: List[float] = []
    cpu: List[float] = []
    step = 1
    tables: Dict[str, EmbeddingTable] = {"plain": plain, "tiered": tiered}
    for r, keys in enumerate(keys_of_round):
        batches = [(k, grads) for k in keys]
        order = ["plain", "tiered"] if r % 2 == 0 else ["tiered", "plain"]
        seen: Dict[str, Tuple[float, float]] = {}
        for name in order:
            seen[name] = turn(tables[name], batches, step)
        step += args.steps
        if r < args.warmup:
            continue
        (wall_p, cpu_p), (wall_t, cpu_t) = seen["plain"], seen["tiered"]
        speed.append(wall_p / wall_t)  # samples/s tiered / plain
        cpu.append(cpu_t / cpu_p)  # CPU per sample tiered / plain
        ids = args.batch * args.steps
        print(
            f"round {r:3d}: plain {ids / wall_p / 1e6:6.2f} M ids/s, tiered {ids / wall_t / 1e6:6.2f} M ids/s; "
            f"speed ratio {speed[-1]:.3f}, cpu ratio {cpu[-1]:.3f}",
            flush=True,
        )
    for what, values in (("samples/s tiered/plain", speed), ("CPU per sample tiered/plain", cpu)):
        median, low, high = bootstrap(values, args.seed)
        print(f"{what}: median {median:.3f} (95% CI {low:.3f}..{high:.3f}) over {len(values)} rounds")
    if budget:  # before the exports, whose scans of every slot would count as the steps' misses
        print(f"tiered: {tier_reports([{'tiered': tiered.tier_counts()}])['tiered']}")
    a, b = plain.export(), tiered.export()
    same = all(np.array_equal(a[k], b[k]) for k in ("keys", "values", "state"))
    print(f"exports equal: {same}")
    print(f"peak RSS of this process: {peak_rss_bytes() / 2**30:.2f} GiB; load average at end: {os.getloadavg()}")
    if not same:
        raise SystemExit("the tiered table's rows differ from the plain one's")


if __name__ == "__main__":
    main()
