"""SyncSteps: the pushes of a sync step (``participants > 1``) buffered on a server until every worker's arrived.

A step's parts are applied as ONE shard push of their concatenation in worker order, each worker's gradients
divided by ``participants`` (the mean over the global batch, like the dense gradients). The shard sums duplicate
keys in that fixed order, so the result does not depend on which worker's push arrived first.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.sparse.table import MAX_REPEATS

# a worker's part of a sync step, buffered: (keys, grads, seq, repeats, ttl_before)
_Part = Tuple[np.ndarray, np.ndarray, int, Optional[np.ndarray], int]


@dataclasses.dataclass(frozen=True)
class MergedStep:
    """A sync step's parts of one table, merged: what the server applies as one push."""

    keys: np.ndarray
    grads: np.ndarray
    pushes: Dict[int, int]  # {worker: its push seq}: the pushes the merged one contains
    repeats: Optional[np.ndarray]
    ttl_before: int


class SyncSteps:
    """The parts of sync steps not complete yet, per (table, step)."""

    def __init__(self) -> None:
        self._pending: Dict[Tuple[str, int], Dict[int, _Part]] = {}

    def __len__(self) -> int:
        """The steps waiting for parts."""
        return len(self._pending)

    def clear(self) -> None:
        """Drops every buffered part (restored shards: the steps are pushed again)."""
        self._pending.clear()

    def add(
        self,
        table: str,
        keys: np.ndarray,
        grads: np.ndarray,
        step: int,
        worker: int,
        seq: int,
        participants: int,
        repeats: Optional[np.ndarray],
        ttl_before: int,
        server: int,
    ) -> Optional[MergedStep]:
        """Buffers one worker's part of ``step``; the step's parts merged once all ``participants`` arrived
        (None before). ValueError, buffering nothing, for a worker's second part or another cutoff (naming
        ``server``)."""
        pending = self._pending.setdefault((table, step), {})
        if worker in pending:
            raise ValueError(f"worker {worker} already pushed step {step} of table {table!r} to server {server}")
        cutoffs = {p[4] for p in pending.values()}
        if cutoffs and ttl_before not in cutoffs:  # one driver gives every worker the step's cutoffs
            raise ValueError(
                f"worker {worker}: step {step} of table {table!r} has ttl_before {ttl_before}, another worker's "
                f"part {cutoffs.pop()}; nothing buffered"
            )
        pending[worker] = (keys, grads, seq, repeats, ttl_before)
        if len(pending) < participants:
            return None
        del self._pending[(table, step)]
        order = sorted(pending)
        keys = np.concatenate([pending[w][0] for w in order])
        grads = np.concatenate([pending[w][1] / np.float32(participants) for w in order])
        merged_repeats = None  # only when some worker sent counts: a plain sync step stays the plain path, bit for bit
        if any(pending[w][3] is not None for w in order):
            keys, grads, merged_repeats = _merge_repeats(keys, grads, [(pending[w][0], pending[w][3]) for w in order])
        return MergedStep(keys, grads, {w: pending[w][2] for w in order}, merged_repeats, ttl_before)


def _merge_repeats(
    keys: np.ndarray, grads: np.ndarray, parts: Sequence[Tuple[np.ndarray, Optional[np.ndarray]]]
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A sync step's parts merged where some carry repeat counts: each key once, its gradients summed (already
    divided by the participants), its count the most any one worker's part gives it: W workers that each held a
    row for c steps stand for c steps of the mean over workers, not W * c."""
    unique, inverse = np.unique(keys, return_inverse=True)
    summed = np.zeros((unique.size, grads.shape[1]), np.float32)
    np.add.at(summed, inverse, grads)
    counts = np.zeros(unique.size, np.int64)
    start = 0
    for part_keys, part_repeats in parts:
        mine = np.zeros(unique.size, np.int64)
        np.add.at(
            mine, inverse[start : start + part_keys.size], 1 if part_repeats is None else part_repeats.astype(np.int64)
        )
        counts = np.maximum(counts, mine)
        start += part_keys.size
    return unique, summed, np.minimum(counts, MAX_REPEATS).astype(np.uint32)
