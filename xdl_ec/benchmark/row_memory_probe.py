"""The bench's measure of what a table row costs in RAM beyond its record (the planner's
:class:`~xdl_ec.plan.measured_constants.RowMemory`): a table filled in this process, its resident bytes
read before and after, against the bytes the shard says it holds."""

from __future__ import annotations

import os

import numpy as np

from xdl_ec.plan.measured_constants import RowMemory
from xdl_ec.sparse.table import EmbeddingTable

CHUNK = 1 << 14  # small: the transient arrays of a load must not count as rows' bytes


def resident_bytes() -> int:
    """This process's resident set now (not its peak): /proc/self/statm's second field in pages."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _filled_rss(table: EmbeddingTable, rows: int, seed: int) -> int:
    """Resident bytes ``rows`` random rows added to ``table`` (fresh optimizer state)."""
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(1, 1 << 62, size=int(rows * 1.01) + 16, dtype=np.int64))[:rows]
    before = resident_bytes()
    for start in range(0, rows, CHUNK):
        part = keys[start : start + CHUNK]
        table.load(part, np.zeros((len(part), table.dim), dtype=np.float32))
    return resident_bytes() - before


TIER_SLOT_BYTES = 12  # SpillTier::kSlotOverhead (cpp/include/xdl_ec/spill_tier.h): a slot's frame and its key


def measure_row_memory(rows: int = 400_000, dim: int = 16, optimizer: str = "adagrad", seed: int = 0) -> RowMemory:
    """RowMemory of ``rows`` rows at ``dim`` with ``optimizer``: the key index's bytes per row as the shard counts
    them, the resident bytes per held byte, and a tiered row's RAM (the same index plus the tier's per-slot
    words, which the core's budget counts the same way: docs/results/tier-2026-12-07.md)."""
    plain = EmbeddingTable("probe-plain", dim, optimizer=optimizer, initializer="zeros")
    try:
        rss = _filled_rss(plain, rows, seed)
        stats = plain.memory_stats()
    finally:
        plain.close()
    index = float(stats["index_bytes_per_row"])
    return RowMemory(
        index_bytes_per_row=index,
        rss_per_held_byte=rss / float(stats["held_bytes"]),
        tier_ram_bytes_per_row=index + TIER_SLOT_BYTES,
    )
