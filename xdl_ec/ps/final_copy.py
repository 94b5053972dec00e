"""FinalCopy: the copy at a background move's final boundary (the workers quiesced): only the rows changed or
inserted since their pre-copy (their clocks and the old servers' row counts tell), or a shard whole where that
cannot be told exactly, so the pause copies the least the move still needs."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Tuple

import numpy as np

from xdl_ec.ps.copy_rounds import CopiedShard, ShardKey
from xdl_ec.ps.fresh_servers import FreshServers
from xdl_ec.ps.move_routes import MoveRoutes
from xdl_ec.ps.old_servers import OldServers

__all__ = ["FinalCopy", "FinalFigures"]

Joined = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # CopiedShard.joined: keys, slots, clocks, moved


@dataclasses.dataclass
class FinalFigures:
    """What the final copy found and did: rows held by the old servers and those whose route changes, rows copied
    again (changed since their copy) and at this boundary in all, and shards copied whole."""

    rows: int = 0
    rows_moved: int = 0
    rows_recopied: int = 0
    rows_final: int = 0
    shards_copied_whole: int = 0


class FinalCopy:
    """The final boundary's copy from ``old`` onto ``fresh`` (routed by ``routes``); :attr:`bytes` counts what
    it sent, also when a loss cut it short."""

    def __init__(self, old: OldServers, fresh: FreshServers, routes: MoveRoutes) -> None:
        self._old, self._fresh, self._routes = old, fresh, routes
        self.bytes = 0

    def run(self, shards: List[Tuple[ShardKey, CopiedShard]]) -> FinalFigures:
        """The rest of ``shards`` copied (the fresh servers formed; their parity not waited for)."""
        joined = [copied.joined() for _, copied in shards]
        # every copied row's clock now and every shard's row count: one call per old server
        answers = self._old.clocks([(p, table, keys) for ((table, p), _), (keys, *_) in zip(shards, joined)])
        counts = [int(n) for n, _ in answers]
        nows = [np.asarray(now, np.int32) for _, now in answers]
        # the rows inserted since the pre-copy passed (the slots past where it reached) and those changed since
        # their copy, sent by the old servers themselves: one call per old server
        reads: List[Tuple[int, str, Any]] = []
        for ((table, p), copied), (_, slots, clocks, _), now in zip(shards, joined, nows):
            changed = (now != clocks) & (now >= 0)
            reads.append((p, table, (copied.next_slot, 1 << 62)))
            reads.append((p, table, slots[changed]))
        sent = self._old.forward(reads, self._fresh.targets)
        figures = FinalFigures()
        for i, ((table, p), _) in enumerate(shards):
            self._settle(figures, table, p, joined[i], nows[i], counts[i], sent[2 * i], sent[2 * i + 1])
        return figures

    def _settle(
        self,
        figures: FinalFigures,
        table: str,
        p: int,
        joined: Joined,
        now: np.ndarray,
        count: int,
        tail: Dict[str, Any],
        again: Dict[str, Any],
    ) -> None:
        """One shard's figures from its rows inserted since (``tail``) and copied again (``again``), or the shard
        copied whole when they do not account for its ``count`` rows exactly."""
        keys, _, clocks, moves = joined
        self.bytes += int(tail["bytes"]) + int(again["bytes"])
        gone = now < 0  # a row a recovery rolled back (inserted after the stripes' durable point)
        changed = (now != clocks) & ~gone
        tail_keys, again_keys = np.asarray(tail["keys"]), np.asarray(again["keys"])
        figures.rows_final += int(tail_keys.size) + int(again_keys.size)
        exact = count == int(np.count_nonzero(~gone)) + int(tail_keys.size)
        if not exact or not np.array_equal(again_keys, keys[changed]):
            # a row inserted into a slot freed before the copy passed it (or a slot that holds another row now):
            # this shard is copied whole here, exact either way
            rows = self._old.call(p, "export", table)
            self._fresh.erase(table, np.setdiff1d(keys, np.asarray(rows["keys"], np.int64)))
            loaded, nbytes = self._fresh.load(table, rows)
            self.bytes += nbytes
            figures.rows_final += loaded
            figures.rows += int(np.asarray(rows["keys"]).size)
            figures.rows_moved += int(np.count_nonzero(self._routes.moves(rows["keys"], p)))
            figures.shards_copied_whole += 1
            return
        figures.rows_recopied += int(again_keys.size)
        self._fresh.erase(table, keys[gone])
        figures.rows += count
        figures.rows_moved += int(np.count_nonzero(moves[~gone]))
        figures.rows_moved += int(
            np.count_nonzero(self._routes.moves(tail_keys, p, np.asarray(tail["owner"], np.int64)))
        )
