"""predict_pause: the seconds a background move's final pause would take now, so that the move saves them up
before it comes and the pause, like the pre-copy, keeps to the move's share of the steps' time."""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from xdl_ec.ps.copy_rounds import CopiedShard, ShardKey
from xdl_ec.ps.old_servers import OldServers

__all__ = ["predict_pause"]

SAMPLE_EVERY = 64  # the copied keys whose clocks predict the final pause (one in this many,
SAMPLE_MOST = 16384  # and at most this many a shard: a share within ~1% either way, whatever the table's size)


def predict_pause(old: OldServers, shards: Dict[ShardKey, CopiedShard], fixed: float, per_slot: float) -> float:
    """The final pause's seconds for the rows it would copy now: those whose clock changed since their copy
    (estimated from every SAMPLE_EVERY-th copied key's clock, SAMPLE_MOST a shard at most) and those inserted since
    the pre-copy passed (the old servers' row counts tell), at ``per_slot`` seconds a row (the pre-copy's own, its
    parity's drain included), plus a round's ``fixed`` part; 0 when no row would be copied. A job whose steps touch
    few rows saves up little; one that rewrites most of them about the pre-copy's own cost again."""
    asks: List[Tuple[int, str, np.ndarray]] = []
    sampled, copied_rows = [], []
    for (table, p), copied in shards.items():
        keys, _, clocks, _ = copied.joined()
        every = max(SAMPLE_EVERY, -(-keys.size // SAMPLE_MOST))
        asks.append((p, table, keys[::every]))
        sampled.append(clocks[::every])
        copied_rows.append(keys.size)
    rows = 0.0
    for (count, now), clocks, n in zip(old.clocks(asks), sampled, copied_rows):
        now = np.asarray(now, np.int32)
        changed, gone = (
            (np.count_nonzero((now != clocks) & (now >= 0)) / now.size, np.count_nonzero(now < 0) / now.size)
            if now.size
            else (0.0, 0.0)
        )
        rows += changed * n + max(0.0, int(count) - n * (1.0 - gone))  # changed, and inserted since
    return fixed + per_slot * rows if rows >= 1 else 0.0
