"""FreshTargets: the fresh servers of a background move as the old servers were told them, so that each old
server forwards its rows to their fresh owners itself (``forward_to`` opens its links to them)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.resize_trainer import ResizeTrainer, wait_answers

__all__ = ["FreshTargets"]


class FreshTargets:
    """The fresh servers (handles, stable ids) the old servers forward to: each old server process is told them
    once (``forward_to``, which opens its links to them) before its first forward; a rebuilt one's replacement
    anew. :meth:`announce` tells them all without waiting, so the links open beside the steps."""

    def __init__(self, fresh: List[Handle], ids: List[int]) -> None:
        self.fresh, self.ids = fresh, ids
        self._told: Dict[int, Handle] = {}  # old position -> the handle told
        self._telling: Dict[int, Tuple[Handle, Any]] = {}  # old position -> (handle, its forward_to in flight)

    def announce(self, trainer: ResizeTrainer) -> None:
        """Every old server told, not waited for (the answers are taken by :meth:`tell`)."""
        for p, handle in enumerate(trainer.scheduler.servers):
            self._telling[p] = (handle, Remote(handle, ServerAPI).forward_to(self.fresh, self.ids))

    @property
    def announced(self) -> bool:
        """Whether every forward_to sent by :meth:`announce` was answered (a failed one too: :meth:`tell` says)."""
        return all(future.done() for _, future in self._telling.values())

    def tell(self, trainer: ResizeTrainer, positions: Sequence[int]) -> None:
        """The old servers at ``positions`` told, and their answers waited for (a loss raised), unless told
        already: a rebuilt server's replacement is told anew."""
        servers = trainer.scheduler.servers
        telling, self._telling = self._telling, {}
        due: Dict[int, Any] = {}
        for p in positions:
            if self._told.get(p) is servers[p]:
                continue
            handle, future = telling.get(p, (None, None))
            due[p] = future if handle is servers[p] else Remote(servers[p], ServerAPI).forward_to(self.fresh, self.ids)
        wait_answers(trainer, list(due.values()))
        for p in due:
            self._told[p] = servers[p]
