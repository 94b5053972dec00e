"""Benchmark: which rows a disk tier should keep in RAM (issue #48): the hit rate of CLOCK (SpillTier's first policy),
GCLOCK (CLOCK with a 2-bit use count: frequency, at CLOCK's cost; SpillTier's since tier-policy-2026-12-07) and
LRU at equal budget on the same Zipf stream. Not a test; a replay of the replacement policies, not of the tier's
bytes (hit rates do not depend on timing, so there is no noise floor to measure: the same seed gives the same
figures).

    python3 -P bench/bench_tier_policy.py [--rows 2000000] [--frames-share 0.0875] [--batch 65536] [--steps 40]
                                          [--warmup 16] [--seed 1]

The stream is bench_tier.py's: ``--rows`` ids drawn Zipf(1.1) truncated to the rows, each step a pull of
``--batch`` ids (repeats included) and a push of its distinct ids, both asked of the tier as its fetch steps ask
(hits and misses counted per id asked, as SpillTier::stats() counts them). The frames held start as the last rows
loaded (bench_tier.py fills in a random order of the ranks, the same permutation), ``--frames-share`` of the rows:
bench_tier.py's budget of its fixed part plus 10% of the records holds 0.1 * 140 / 160 of the rows as frames at
d16 with Adagrad (a 140-byte record in a 160-byte frame). Every policy evicts only between a fetch step's hits and
its reads, never a row of the step's own batch, as SpillTier does. Rounds after ``--warmup`` warm-up steps count.
"""

from __future__ import annotations

import argparse
from collections import OrderedDict
from typing import Dict, List, Set

import numpy as np

ZIPF_A = 1.1


class Clock:
    """SpillTier's hand: it walks the frames in their order, a referenced bit set on a hit (``max_count`` > 1: a use
    count, GCLOCK, which SpillTier raises once per fetch step and this replay per row asked), skipping the batch's
    own frames; a freed frame takes a missed row where it is."""

    def __init__(self, resident: List[int], capacity: int, max_count: int = 1) -> None:
        self.capacity = capacity
        self.max_count = max_count  # 1: CLOCK's bit; 3: GCLOCK's 2-bit count
        self.frames: List[int] = list(resident)
        self.frame_of: Dict[int, int] = {row: i for i, row in enumerate(self.frames)}
        self.count: List[int] = [1] * len(self.frames)
        self.epoch: List[int] = [0] * len(self.frames)
        self.now = 0
        self.hand = 0

    def fetch(self, rows: np.ndarray) -> int:
        """Makes rows resident; returns the hits (per row asked)."""
        self.now += 1
        hits = 0
        miss: Set[int] = set()
        for row in rows.tolist():
            f = self.frame_of.get(row)
            if f is None:
                miss.add(row)
                continue
            self.count[f] = min(self.count[f] + 1, self.max_count)
            self.epoch[f] = self.now
            hits += 1
        excess = len(self.frame_of) + len(miss) - self.capacity
        free: List[int] = []
        sweep = 0
        while len(free) < excess and sweep < (self.max_count + 1) * len(self.frames):
            sweep += 1
            if self.hand >= len(self.frames):
                self.hand = 0
            f = self.hand
            self.hand += 1
            if self.epoch[f] == self.now:
                continue
            if self.count[f]:
                self.count[f] -= 1
                continue
            self.epoch[f] = self.now
            del self.frame_of[self.frames[f]]
            free.append(f)
        for row in sorted(miss):
            if free:
                f = free.pop()
                self.frames[f] = row
            else:
                f = len(self.frames)
                self.frames.append(row)
                self.count.append(0)
                self.epoch.append(0)
            self.frame_of[row] = f
            self.count[f] = 1
            self.epoch[f] = self.now
        return hits


class Lru:
    """Least recently used: a hit moves the row to the recent end; misses evict from the old end, skipping none
    of the batch (its rows were all just moved to the recent end)."""

    def __init__(self, resident: List[int], capacity: int) -> None:
        self.capacity = capacity
        self.order: "OrderedDict[int, None]" = OrderedDict((row, None) for row in resident)

    def fetch(self, rows: np.ndarray) -> int:
        hits = 0
        miss: Set[int] = set()
        for row in rows.tolist():
            if row in self.order:
                self.order.move_to_end(row)
                hits += 1
            else:
                miss.add(row)
        # The batch's own rows are the most recent: at most the others go.
        batch_rows = len(set(rows.tolist())) - len(miss)
        excess = min(len(self.order) + len(miss) - self.capacity, len(self.order) - batch_rows)
        for _ in range(max(0, excess)):
            self.order.popitem(last=False)
        for row in sorted(miss):
            self.order[row] = None
        return hits


class Hottest:
    """Not a policy: the ``capacity`` hottest rows (ranks 0..capacity-1) always resident, the other rows a pull asks
    for read in for its step only (its push finds them, as every policy's push does). No eviction order holds more
    of a Zipf stream's ids at this budget: the bound the others are read against. Fetches come as pull, push."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.pulled: Set[int] = set()
        self.pushing = False  # the next fetch is the step's push

    def fetch(self, rows: np.ndarray) -> int:
        hot = rows < self.capacity
        if self.pushing:
            hits = int(np.count_nonzero(hot)) + sum(1 for row in rows[~hot].tolist() if row in self.pulled)
        else:
            hits = int(np.count_nonzero(hot))
            self.pulled = set(rows[~hot].tolist())
        self.pushing = not self.pushing
        return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--frames-share", type=float, default=0.1 * 140 / 160)
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    capacity = max(64, int(args.rows * args.frames_share))
    order = np.random.default_rng(args.seed).permutation(args.rows)  # bench_tier.py's fill order
    resident = order[-capacity:].tolist()
    cdf = np.cumsum(np.arange(1, args.rows + 1, dtype=np.float64) ** -ZIPF_A)
    rng = np.random.default_rng(args.seed + 1)
    policies = {
        "CLOCK": Clock(resident, capacity),
        "GCLOCK (2-bit count)": Clock(resident, capacity, max_count=3),
        "LRU": Lru(resident, capacity),
        "the hottest rows (a bound)": Hottest(capacity),
    }
    asked = {name: 0 for name in policies}
    hit = {name: 0 for name in policies}
    print(f"{args.rows} rows, {capacity} frames ({capacity / args.rows:.4f} of the rows), batch {args.batch}")
    for step in range(args.warmup + args.steps):
        pull = np.searchsorted(cdf, rng.random(args.batch) * cdf[-1], side="right")
        push = np.unique(pull)
        for name, policy in policies.items():
            h = policy.fetch(pull) + policy.fetch(push)
            if step >= args.warmup:
                asked[name] += len(pull) + len(push)
                hit[name] += h
    for name in policies:
        print(f"{name}: hit rate {hit[name] / asked[name]:.4f} over {args.steps} steps after {args.warmup}")


if __name__ == "__main__":
    main()
