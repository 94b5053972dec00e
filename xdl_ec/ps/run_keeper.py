"""RunRecord and RunKeeper: what a reattaching driver needs to find a run's roles again, and the detached Ray actor
that keeps it while no driver runs (docs/design/reattach.md).

The record is written when the cluster starts and again at a boundary where its roles changed (a server replaced,
a worker restarted), never on the step's path; the keeper only stores it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

KEEPER_NAME = "keeper"  # the keeper's actor name in the run's namespace


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """A reattachable run as its driver left it: the roles' handles (servers in index order, idle spares,
    workers), the servers' stable ids (None: 0..n-1), the direct links' secret and the strategy's own (ec's parity
    links'), the shape the run was started with (a rerun with another is refused), and the driver's count at the
    last time the workers' readers were set (``base``: step, samples, losses and the workers' batches then)."""

    servers: List[Any]
    spares: List[Any]
    workers: List[Any]
    server_ids: Optional[List[int]]
    link_secret: Any
    strategy_secret: Any
    shape: Dict[str, Any]
    base: Dict[str, Any]


class RunKeeper:
    """A detached actor holding the run's :class:`RunRecord` (None until the first driver writes it)."""

    def __init__(self) -> None:
        self.record: Optional[RunRecord] = None

    def ping(self) -> int:
        return 0

    def put(self, record: RunRecord) -> None:
        self.record = record

    def get(self) -> Optional[RunRecord]:
        return self.record
