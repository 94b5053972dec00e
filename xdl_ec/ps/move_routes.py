"""MoveRoutes: where a background move's rows go: each key's owner among the fresh servers and whether its route
changes (what the record's ``rows_moved`` counts: a row whose owner's id changes or whose old server is drained)."""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from xdl_ec.ps.client import owner_positions

__all__ = ["MoveRoutes"]


class MoveRoutes:
    """The fresh servers' stable ``ids`` (in order), the old ones' ``old_ids`` and the ids ``drain``-ed."""

    def __init__(self, ids: Sequence[int], old_ids: Sequence[int], drain: Sequence[int] = ()) -> None:
        self.ids: List[int] = list(ids)
        self.old_ids: List[int] = list(old_ids)
        self.drain = set(int(i) for i in drain)

    def owners(self, keys: np.ndarray) -> np.ndarray:
        """Each key's owner as a position among the fresh servers."""
        return np.asarray(owner_positions(np.asarray(keys, dtype=np.int64), self.ids), dtype=np.int64)

    def moves(self, keys: np.ndarray, position: int, owner: Optional[np.ndarray] = None) -> np.ndarray:
        """Per key of the old server at ``position``: whether its owner's id changes (every key of a drained one);
        ``owner``: the keys' positions among the fresh servers, if known."""
        keys = np.asarray(keys, dtype=np.int64)
        if self.old_ids[position] in self.drain:
            return np.ones(keys.size, bool)
        return np.asarray(self.ids)[self.owners(keys) if owner is None else owner] != self.old_ids[position]
