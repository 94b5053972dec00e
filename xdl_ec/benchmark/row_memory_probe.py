"""The bench's measure of what a table row costs in RAM beyond its record (the planner's
:class:`~xdl_ec.plan.measured_constants.RowMemory`): a table filled in this process, its resident bytes
read before and after, against the bytes the shard says it holds."""

from __future__ import annotations

import os
from typing import Tuple

import numpy as np

from xdl_ec.plan.measured_constants import RowMemory
from xdl_ec.sparse.table import EmbeddingTable

CHUNK = 1 << 12  # small: a load's transient arrays must not count as rows' bytes, the index's fill is seen finely


def resident_bytes() -> int:
    """This process's resident set now (not its peak): /proc/self/statm's second field in pages."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _fill(table: EmbeddingTable, rows: int, seed: int) -> Tuple[int, float]:
    """Adds ``rows`` random rows (fresh optimizer state) to ``table``: the resident bytes they added, and the most
    rows per byte of key index seen between chunks (how full the index gets before it doubles)."""
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(1, 1 << 62, size=int(rows * 1.01) + 16, dtype=np.int64))[:rows]
    before, fullest = resident_bytes(), 0.0
    for start in range(0, rows, CHUNK):
        part = keys[start : start + CHUNK]
        table.load(part, np.zeros((len(part), table.dim), dtype=np.float32))
        stats = table.memory_stats()
        fullest = max(fullest, stats["live_rows"] / stats["index_bytes"])
    return resident_bytes() - before, fullest


TIER_SLOT_BYTES = 4  # SpillTier::kSlotOverhead (cpp/include/xdl_ec/spill_tier.h): a slot's frame number


def measure_row_memory(rows: int = 400_000, dim: int = 16, optimizer: str = "adagrad", seed: int = 0) -> RowMemory:
    """RowMemory of ``rows`` rows at ``dim`` with ``optimizer``: how full the key index gets, the resident bytes
    per held byte, and the disk tier's per-slot words (a constant of the core, which its budget counts:
    docs/results/tier-2026-12-07.md)."""
    plain = EmbeddingTable("probe-plain", dim, optimizer=optimizer, initializer="zeros")
    try:
        rss, fullest = _fill(plain, rows, seed)
        stats = plain.memory_stats()
    finally:
        plain.close()
    return RowMemory(
        index_rows_per_byte=fullest,
        rss_per_held_byte=rss / float(stats["held_bytes"]),
        tier_slot_bytes=TIER_SLOT_BYTES,
    )
