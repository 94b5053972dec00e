"""ServerMemory: the RAM one parameter server needs for its share of a job's tables, broken down, and the disk its
spill file needs when the rows do not fit (the disk tier: docs/results/tier-2026-12-07.md).

Tables are hash-sharded over every server, so a server holds ceil(rows / servers) rows of each table. In RAM each
row costs its record (key and words, values, optimizer state: :class:`~xdl_ec.plan.row_layout.RowLayout`) plus
its share of the key index, times the resident bytes per held byte the bench measured (allocator slack, slot
capacity). Under ec a server also holds parity: r / k of its records (stripes rotate RAID-5/6 style, so every
server holds data and parity in the same proportion); the parity holder's blocks are not tiered, so parity stays
in RAM. With the disk tier every record lives in the spill file, and RAM keeps the key index and the tier's
per-slot words for every row plus frames for as many records as the rest of the budget holds."""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Mapping, Optional, Tuple

from xdl_ec.plan.measured_constants import RowMemory
from xdl_ec.plan.row_layout import RowLayout


@dataclasses.dataclass(frozen=True)
class ServerMemory:
    """Bytes of RAM per server: ``rows`` (records' keys, words and values in RAM), ``optimizer_state``,
    ``key_index``, ``parity``, ``disk_tier`` (the tier's per-slot words), ``slack`` (allocator and capacity beyond
    what the shard counts); ``disk_bytes``: the spill file (0 without the tier); ``tiered``: whether it is used."""

    rows: int
    optimizer_state: int
    key_index: int
    parity: int
    disk_tier: int
    slack: int
    disk_bytes: int = 0
    tiered: bool = False

    @property
    def total(self) -> int:
        return self.rows + self.optimizer_state + self.key_index + self.parity + self.disk_tier + self.slack

    def to_json(self) -> Dict[str, int]:
        return {
            "rows": self.rows,
            "optimizer_state": self.optimizer_state,
            "key_index": self.key_index,
            "parity": self.parity,
            "disk_tier": self.disk_tier,
            "slack": self.slack,
            "total": self.total,
        }


def rows_per_server(rows: Mapping[str, int], servers: int) -> Dict[str, int]:
    """Each table's rows on one server (the fullest: rounded up)."""
    return {name: math.ceil(n / servers) for name, n in rows.items()}


def in_memory(
    rows: Mapping[str, int], layouts: Mapping[str, RowLayout], row_memory: RowMemory, parity_share: float
) -> ServerMemory:
    """One server's RAM with every record in memory; ``rows``: its rows per table; ``parity_share``: r / k (0
    without ec)."""
    header = sum(n * (layouts[t].header_bytes + layouts[t].value_bytes) for t, n in rows.items())
    state = sum(n * layouts[t].state_bytes for t, n in rows.items())
    index = sum(row_memory.index_bytes(n) for n in rows.values())
    held = header + state + index
    parity = math.ceil(parity_share * (header + state))
    return ServerMemory(
        rows=header,
        optimizer_state=state,
        key_index=index,
        parity=parity,
        disk_tier=0,
        slack=max(0, math.ceil(held * (row_memory.rss_per_held_byte - 1.0))),
    )


# The budget's share the tier leaves to the spill file's mapped pages (SpillTier::kWindowShare).
TIER_WINDOW_SHARE = 8


def with_disk_tier(
    rows: Mapping[str, int],
    layouts: Mapping[str, RowLayout],
    row_memory: RowMemory,
    parity_share: float,
    memory_bytes: int,
) -> Optional[ServerMemory]:
    """One server's RAM when its records live in the spill file and ``memory_bytes`` is its RAM: the fixed part
    (key index, the tier's slot words and, its file past the page cache, its mapping's eighth: spill_tier.h;
    parity) plus frames filling the rest, up to every record; None when the fixed part alone does not fit."""
    whole = in_memory(rows, layouts, row_memory, parity_share)
    index = whole.key_index
    slot_words = sum(rows.values()) * row_memory.tier_slot_bytes + memory_bytes // TIER_WINDOW_SHARE
    fixed = index + slot_words + whole.parity
    if fixed > memory_bytes:
        return None
    records = whole.rows + whole.optimizer_state
    frames = min(records, memory_bytes - fixed)
    share = frames / records if records else 0.0
    return ServerMemory(
        rows=math.floor(whole.rows * share),
        optimizer_state=math.floor(whole.optimizer_state * share),
        key_index=index,
        parity=whole.parity,
        disk_tier=slot_words,
        slack=0,  # the tier's budget counts frames, index and slot words: the core holds it to the budget
        disk_bytes=records,
        tiered=True,
    )


def fits(memory: ServerMemory, memory_bytes: int, disk_bytes: Optional[int]) -> Tuple[bool, str]:
    """Whether ``memory`` fits a server of ``memory_bytes`` RAM and ``disk_bytes`` disk, and what is short."""
    if memory.total > memory_bytes:
        return False, f"RAM {memory.total:,} B > {memory_bytes:,} B"
    if memory.tiered and (disk_bytes is None or memory.disk_bytes > disk_bytes):
        return False, f"disk {memory.disk_bytes:,} B > {disk_bytes or 0:,} B"
    return True, ""
