"""OldServers: the calls a background move makes of the servers it moves rows from, one call per old server.

The copy asks every old server at once (one call each, every table it holds in it), so a round's fixed part is one
round of calls however many shards it reads; a call goes to the cluster's server at that position now (a rebuilt
one's replacement).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.fresh_lost import FreshLost
from xdl_ec.ps.fresh_targets import FreshTargets
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.resize_trainer import ResizeTrainer, wait_answers

__all__ = ["CALL_SECONDS", "OldServers"]

CALL_SECONDS = 120.0  # a fresh server's answer; longer is taken for a loss


class OldServers:
    """The old servers of ``trainer``'s cluster as a move calls them: their rows forwarded to the fresh layout
    (:meth:`forward`), their rows' clocks (:meth:`clocks`) and a single call (:meth:`call`). An old server's loss
    is confirmed by the scheduler and raised (its strategy recovers it at the boundary)."""

    def __init__(self, trainer: ResizeTrainer) -> None:
        self._trainer = trainer

    def forward(self, reads: Sequence[Tuple[int, str, Any]], targets: FreshTargets) -> List[Dict[str, Any]]:
        """Each (position, table, slots) of ``reads`` sent by that old server to its rows' owners among ``targets``,
        one forward_slots call per old server, asked at once (on Ray over the driver's links beside the steps'): per
        read, what forward_slots answers. A fresh server lost: FreshLost."""
        targets.tell(self._trainer, sorted({p for p, _, _ in reads}))

        def lost(answer: List[Any]) -> None:
            if answer and "lost" in answer[0]:
                raise FreshLost(f"a fresh server was lost mid-move: {answer[0]['lost']}")

        return self._each(reads, lambda old, mine: old.forward_slots(mine, CALL_SECONDS), lost)

    def clocks(self, asks: Sequence[Tuple[int, str, np.ndarray]]) -> List[Tuple[int, np.ndarray]]:
        """Per (position, table, keys) of ``asks``: that old server's row count of the table and the keys' clocks,
        one clocks_many call per old server, asked at once."""
        return self._each(asks, lambda old, mine: old.clocks_many(mine))

    def call(self, position: int, method: str, *args: Any) -> Any:
        """A call of the old server at ``position``, waited for."""
        handle = self._trainer.scheduler.servers[position]
        return wait_answers(self._trainer, [getattr(Remote(handle, ServerAPI), method)(*args)])[0]

    def _each(
        self,
        items: Sequence[Tuple[Any, ...]],
        ask: Callable[[Remote, List[Tuple[Any, ...]]], Any],
        check: Callable[[List[Any]], None] = lambda answer: None,
    ) -> List[Any]:
        """Each (position, *rest) of ``items`` asked of the old server at ``position``, one call per server
        (``ask(server, [rest, ...])``, answering a part per rest), all at once; each answer ``check``-ed before it
        is split: per item, its part."""
        by_server: Dict[int, List[int]] = {}
        for i, item in enumerate(items):
            by_server.setdefault(item[0], []).append(i)
        calls = [ask(self._beside(p), [items[i][1:] for i in mine]) for p, mine in by_server.items()]
        out: List[Any] = [None] * len(items)
        for mine, answer in zip(by_server.values(), wait_answers(self._trainer, calls)):
            check(answer)
            for i, part in zip(mine, answer):
                out[i] = part
        return out

    def _beside(self, position: int) -> Remote:
        """The old server at ``position`` for the copy's calls: on Ray over the driver's link beside the steps' (a
        call's arrays sent from their memory, not through the object store), in one process on the server's own
        thread (a call beside would run in the driver's)."""
        trainer = self._trainer
        if trainer.link_secret is None:
            return Remote(trainer.scheduler.servers[position], ServerAPI)
        return Remote(trainer.server_beside(position), ServerAPI, beside=True)
