"""RunRecord and RunKeeper: what a reattaching driver needs to find a run's roles again, and the detached Ray actor
that keeps it while no driver runs (docs/design/reattach.md).

The record is written when the cluster starts and again at a boundary where its roles changed (a server replaced,
a worker restarted), never on the step's path; the keeper only stores it. Beside it the keeper journals the
replacement servers a recovery started, each as soon as it exists (mid-recovery, no boundary's record yet), until
a boundary finds their rebuild over: a driver that died meanwhile leaves replacements its successor cannot prove
whole, and the journal names them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from xdl_ec.ps.kept_handle import KeptHandle, LostHandle

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

    def kept(self) -> "RunRecord":
        """This record as the keeper keeps it: each role's handle pickled alone (:class:`KeptHandle`), so that a role
        dead by the time a driver reads it cannot keep the others from being read."""
        return dataclasses.replace(
            self,
            servers=[KeptHandle(h) for h in self.servers],
            spares=[KeptHandle(h) for h in self.spares],
            workers=[KeptHandle(h) for h in self.workers],
        )

    def opened(self) -> "RunRecord":
        """A kept record with each handle opened alone: a role that died meanwhile is a LostHandle (it answers no
        call, as a dead actor), and a dead spare is no spare."""
        spares = [k.open() for k in self.spares]
        return dataclasses.replace(
            self,
            servers=[k.open() for k in self.servers],
            spares=[h for h in spares if not isinstance(h, LostHandle)],
            workers=[k.open() for k in self.workers],
        )


class RunKeeper:
    """A detached actor holding the run's :class:`RunRecord` (None until the first driver writes it; kept, see
    :meth:`RunRecord.kept`) and the journal of replacement servers not known whole yet ((index, KeptHandle) in the
    order they were started)."""

    def __init__(self) -> None:
        self.record: Optional[RunRecord] = None
        self.journal: List[Tuple[int, Any]] = []

    def ping(self) -> int:
        return 0

    def put(self, record: Optional[RunRecord]) -> None:
        """The run's record (None: the run is abandoned, its journal with it)."""
        self.record = record
        if record is None:
            self.journal = []

    def get(self) -> Optional[RunRecord]:
        return self.record

    def add_replacement(self, index: int, handle: Any) -> None:
        self.journal.append((int(index), handle))

    def replacements(self) -> List[Tuple[int, Any]]:
        return list(self.journal)

    def rebuilt(self) -> None:
        """Every journaled replacement is whole (a boundary found the rebuild over)."""
        self.journal = []
