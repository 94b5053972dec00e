"""Benchmark: the built disk tier's hit rate at steady state (issue #48), which bench_tier.py's short runs do not
reach: its frames start as the last rows loaded, and at 20M rows the hand goes round once per ~140 steps. Not a
test; hit rates do not depend on timing (the same seed gives the same figures), the CPU seconds do.

    PYTHONPATH=build/stage python3 -P bench/bench_tier_steady.py [--rows 20000000] [--steps 600] [--batch 65536]
                                                                [--spill-dir DIR]

One table of ``--rows`` rows at d16 with Adagrad, filled as bench_tier.py fills it (a random order of the ranks),
with bench_tier.py's budget (the fixed part plus 10% of the records), then ``--steps`` steps of a pull and a push of
``--batch`` ids drawn Zipf(1.1) over the rows. Prints the tier's hit rate (per id asked, as its counters count) and
this process's CPU seconds over the second half of the steps.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_tier's fill, stream and budget
from bench_tier import fill, fixed_bytes, key_of, zipf_cdf, zipf_ranks  # noqa: E402

from xdl_ec.sparse.table import EmbeddingTable  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--spill-dir", default=None)
    args = parser.parse_args()
    spill_dir = args.spill_dir or tempfile.mkdtemp(prefix="bench-tier-steady-")
    sizing = EmbeddingTable("sizing", 16, optimizer="adagrad", initializer="zeros")
    fill([sizing], args.rows, 16, args.seed)
    budget = fixed_bytes(sizing) + int(sizing.memory_stats()["live_rows"] * sizing.record_bytes * 0.1)
    del sizing
    table = EmbeddingTable(
        "tiered", 16, optimizer="adagrad", initializer="zeros", memory_budget=budget, spill_dir=spill_dir
    )
    fill([table], args.rows, 16, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    cdf = zipf_cdf(args.rows)
    grads = np.full((args.batch, 16), 0.01, dtype=np.float32)
    half = args.steps // 2
    for step in range(args.steps):
        if step == half:
            before = table.memory_stats()
            cpu = time.process_time()
        keys = key_of(zipf_ranks(rng, cdf, args.batch))
        table.pull(keys)
        table.push(keys, grads, step=step + 1)
    cpu = time.process_time() - cpu
    after = table.memory_stats()
    hits = after["memory_hits"] - before["memory_hits"]
    misses = after["memory_misses"] - before["memory_misses"]
    print(
        f"{args.rows} rows, budget {budget / 2**20:.0f} MiB, {after['rows_in_memory']} rows in memory; the last "
        f"{args.steps - half} of {args.steps} steps: hit rate {hits / (hits + misses):.4f} ({misses} misses), "
        f"CPU {cpu:.1f} s"
    )


if __name__ == "__main__":
    main()
