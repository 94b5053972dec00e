"""Row preload: before a run's first step, the driver has its servers create the rows of given keys in bulk.

Each chunk of keys is routed to its owners as a step's keys are, and every owner creates the rows it lacks through
its agent's pull, the path a step's first pull of a key takes: the row is its initializer's (a function of the
table's seed and the key alone), and the mutation reaches what the strategy keeps (ec's parity, a checkpoint's
change log) as a step's would. One chunk is in flight at a time, so the driver and each server hold a chunk's keys
at most, and the strategy catches up after each (ec's parity holders apply the chunk's deltas: otherwise many chunks'
deltas queue, GBs at a few servers); a budgeted server's tier makes room for the chunk's new rows before it adds
them.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.client import route
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.running_cluster import RunningCluster
from xdl_ec.sparse.table import as_keys


def preload_rows(cluster: RunningCluster, table: str, chunks: Iterable[np.ndarray]) -> int:
    """Creates the rows of every key in ``chunks`` (int64 arrays; keys that have a row keep it) on the servers
    of ``cluster``, one chunk at a time; returns how many keys were sent. The pushes are quiesced after."""
    if table not in {t.name for t in cluster.job.tables}:
        raise ValueError(f"preload: the job has no table {table!r}")
    sent = 0
    for chunk in chunks:
        keys = np.unique(as_keys(chunk, f"preload[{table!r}] keys"))  # a step's keys reach a server unique
        servers, ids = cluster.scheduler.servers, cluster.scheduler.server_ids
        parts = route(keys, len(servers), ids)
        cluster.answers(
            [
                Remote(servers[s], ServerAPI).create_rows(table, np.ascontiguousarray(keys[part]))
                for s, part in enumerate(parts)
                if part.size
            ]
        )
        sent += int(keys.size)
        cluster.strategy.catch_up()
    cluster.quiesce()
    return sent
