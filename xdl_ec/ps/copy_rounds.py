"""CopyRounds: a background move's pre-copy reads, one :class:`CopiedShard` per old server's shard of a table.

A round reads every unfinished shard at once (:func:`plan_round` splits its slots), one call per old server, which
sends the rows to their fresh owners itself, so the round's fixed part is one round of calls, not one per shard.
What each shard's reads found (keys, slots, clocks) is kept: the final boundary copies again only what changed.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.ps.fresh_targets import FreshTargets
from xdl_ec.ps.move_routes import MoveRoutes
from xdl_ec.ps.old_servers import OldServers

__all__ = ["CopiedShard", "CopyRounds", "plan_round"]

ShardKey = Tuple[str, int]  # (table, the old server's position)


class CopiedShard:
    """What the pre-copy read of one old server's shard of one table: the slot it reached and, per copied row,
    its key, slot and clock then."""

    def __init__(self) -> None:
        self.next_slot = 0  # where the next read starts (past the high-water mark once the end was reached)
        self.end: Optional[int] = None  # the shard's slot end at the last read (None: not read yet)
        self.reached_end = False
        self.keys: List[np.ndarray] = []
        self.slots: List[np.ndarray] = []
        self.clocks: List[np.ndarray] = []
        self.moved: List[np.ndarray] = []  # per copied row: whether its owner's id changes

    @property
    def done(self) -> bool:
        return self.reached_end

    def joined(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(keys, slots, clocks, moved) of every copied row, in the order read."""

        def cat(parts: List[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

        joined = cat(self.keys, np.int64), cat(self.slots, np.int64), cat(self.clocks, np.int32), cat(self.moved, bool)
        if self.reached_end:  # nothing is added after the end was reached: kept joined (asked again at each reserve)
            self.keys, self.slots, self.clocks, self.moved = ([part] for part in joined)
        return joined


def plan_round(copied: Dict[ShardKey, CopiedShard], slots: int) -> List[Tuple[str, int, int]]:
    """The reads of a round of ``slots`` slots: (table, position, slots) per unfinished shard of ``copied``, in
    its order, ``slots`` split evenly over them (a shard whose end is known asks at most what it has left, at
    least 1, and what it leaves goes to the others)."""
    todo = [(key, c) for key, c in copied.items() if not c.done]
    asks = {key: 0 for key, _ in todo}
    left, open_ = int(slots), list(todo)
    while open_ and left > 0:
        share = max(1, -(-left // len(open_)))
        still, capped = [], False
        for key, c in open_:
            rest = None if c.end is None else max(1, c.end - c.next_slot - asks[key])
            take = share if rest is None else min(share, rest)
            asks[key] += take
            left -= take
            capped = capped or take < share
            if rest is None or take < rest:
                still.append((key, c))
        if not capped:
            break
        open_ = still
    return [(table, p, max(1, asks[(table, p)])) for (table, p), _ in todo]


class CopyRounds:
    """The pre-copy of ``tables`` from ``positions`` old servers: its shards (:attr:`shards`, in table then
    position order), the reads that advance them and the bytes they sent (:attr:`bytes`, those of a round a loss
    cut short included)."""

    def __init__(self, tables: Sequence[str], positions: int, old: OldServers, routes: MoveRoutes) -> None:
        self.shards: Dict[ShardKey, CopiedShard] = {(t, p): CopiedShard() for t in tables for p in range(positions)}
        self._old, self._routes = old, routes
        self.bytes = 0

    def unfinished(self) -> int:
        """The shards not read to their end yet."""
        return sum(not c.done for c in self.shards.values())

    def by_rows(self, targets: FreshTargets, budget: int) -> Tuple[int, int]:
        """At most ``budget`` slots read, a shard after another: (rows loaded, slots read)."""
        loaded = slots_read = 0
        for (table, p), copied in self.shards.items():
            if copied.done:
                continue
            if budget <= 0:
                break
            n, read = self.round(targets, [(table, p, budget)])
            budget -= read
            loaded, slots_read = loaded + n, slots_read + read
        return loaded, slots_read

    def round(self, targets: FreshTargets, plan: List[Tuple[str, int, int]]) -> Tuple[int, int]:
        """Has the old servers send ``plan``'s (table, position, slots) to the fresh layout themselves, one call
        per old server (``forward_slots``: the rows go from old server to fresh owner, not through the driver),
        and waits: (rows loaded, slots read)."""
        reads = [(p, table, (self.shards[(table, p)].next_slot, ask)) for table, p, ask in plan]
        parts = self._old.forward(reads, targets)
        slots_read = loaded = 0
        for (table, p, ask), part in zip(plan, parts):
            copied = self.shards[(table, p)]
            end = int(part["end"])
            read = max(0, min(ask, end - copied.next_slot))
            slots_read += max(read, 1)
            live = np.asarray(part["slots"])
            copied.end = end
            if live.size < read or read == 0:
                # a free slot: the high-water mark (no row is erased under ec, so slots fill in order); rows
                # inserted from now on come after it, and the final boundary reads on from there
                copied.next_slot = int(live[-1]) + 1 if live.size else copied.next_slot
                copied.reached_end = True
            else:
                copied.next_slot += read
                # read up to the shard's end: rows inserted from now on come after it (saves a read of none)
                copied.reached_end = copied.next_slot >= end
            loaded += int(np.asarray(part["keys"]).size)
            self.bytes += int(part["bytes"])
            copied.keys.append(part["keys"])
            copied.slots.append(part["slots"])
            copied.clocks.append(part["clocks"])
            copied.moved.append(self._routes.moves(part["keys"], p, np.asarray(part["owner"], np.int64)))
        return loaded, slots_read
