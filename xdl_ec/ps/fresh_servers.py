"""FreshServers: the servers a background move copies the rows onto, with their own stripes (the resize's
strategy, attached to them alone) until the switch makes them the cluster."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.client import rows_by_owner
from xdl_ec.ps.fault_tolerance import FaultTolerance, Unrecoverable
from xdl_ec.ps.fresh_lost import FreshLost
from xdl_ec.ps.fresh_start import FreshStart
from xdl_ec.ps.fresh_targets import FreshTargets
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.move_routes import MoveRoutes
from xdl_ec.ps.old_servers import CALL_SECONDS
from xdl_ec.ps.placement import Placement
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.resize_trainer import ReformingStrategy, ResizeTrainer, wait_answers

__all__ = ["FreshServers"]


class FreshServers:
    """``servers`` fresh servers routed by ``routes``' ids, started ahead (``ready``) or here on ``placement``'s
    nodes, under ``trainer``'s strategy's successor with the stripes' ``code`` (None: the current one's). They
    start and form their stripes beside the steps (:meth:`formed`); their loss is a :class:`FreshLost`."""

    def __init__(
        self,
        trainer: ResizeTrainer,
        servers: int,
        routes: MoveRoutes,
        placement: Optional[Placement],
        ready: Optional[Sequence[Handle]],
        code: Optional[Tuple[int, int]],
    ) -> None:
        self.servers = servers
        self.routes = routes
        self.placement = placement
        self.handles: List[Handle] = []
        self.targets = FreshTargets([], [])  # the fresh servers as the old ones were told them
        self.strategy: FaultTolerance = trainer.strategy.successor(code)
        self._starting: Optional[FreshStart] = FreshStart(trainer, servers, placement, ready, self.strategy)

    @property
    def starting(self) -> bool:
        """Whether their start (or their stripes' forming) was not taken yet by :meth:`formed`."""
        return self._starting is not None

    def formed(self, trainer: ResizeTrainer, wait: bool) -> bool:
        """Whether the fresh servers are up with their stripes; a start under way is waited for when ``wait``
        (else False while it runs). Once they are, the old servers are told them (their links to them open beside
        the next steps). A start that failed, or a fresh server lost while the stripes formed: FreshLost."""
        start = self._starting
        if start is None:
            return True
        if not wait and start.is_alive():
            return False
        start.join()
        self._starting = None
        self.handles = start.handles
        if start.error is not None:
            if start.forming and not isinstance(start.error, (RoleLost, TimeoutError)):
                raise start.error  # not a loss: the strategy refused these servers
            what = "was lost while its stripes formed" if start.forming else "did not start"
            raise FreshLost(f"a fresh server {what}: {start.error}") from start.error
        self.targets = FreshTargets(self.handles, self.routes.ids)
        if trainer.link_secret is None:  # one process: no link to open, told now (boundaries not timing-dependent)
            self.targets.tell(trainer, range(len(trainer.scheduler.servers)))
        else:
            self.targets.announce(trainer)
        return True

    def wait(self, futures: List[Any]) -> List[Any]:
        """The fresh servers' answers to ``futures``; one lost or not answering in CALL_SECONDS: FreshLost."""
        try:
            return [f.result(CALL_SECONDS) for f in futures]
        except (RoleLost, TimeoutError) as err:
            raise FreshLost(f"a fresh server was lost mid-move: {err}") from err

    def load(self, table: str, rows: Dict[str, Any]) -> Tuple[int, int]:
        """Loads ``rows`` (read through the driver: a shard copied whole) into their owners, one call per owner:
        (rows, bytes)."""
        keys = np.asarray(rows["keys"], dtype=np.int64)
        if not keys.size:
            return 0, 0
        sent, loads = 0, []
        for dest, part in rows_by_owner(rows, self.routes.owners(keys)):
            sent += int(sum(part[f].nbytes for f in part))
            loads.append(Remote(self.handles[dest], ServerAPI).load_rows(table, part))
        self.wait(loads)
        return int(keys.size), sent

    def erase(self, table: str, keys: np.ndarray) -> None:
        """Removes the rows of ``keys`` from their owners (rows a recovery rolled back on the old servers)."""
        if not keys.size:
            return
        owner = self.routes.owners(keys)
        self.wait(
            [Remote(self.handles[int(d)], ServerAPI).erase_rows(table, keys[owner == d]) for d in np.unique(owner)]
        )

    def durable(self) -> None:
        """Waits until the fresh parity holds every row loaded so far."""
        try:
            cast(ReformingStrategy, self.strategy).drain()
        except (RoleLost, TimeoutError, Unrecoverable) as err:
            raise FreshLost(f"a fresh server was lost before its parity was durable: {err}") from err

    def stop(self, trainer: ResizeTrainer) -> None:
        """Stops the fresh servers (a move started over or withdrawn; the old servers are untouched)."""
        if self._starting is not None:
            self._starting.join()
            self.handles, self._starting = self._starting.handles, None
        if getattr(self.strategy, "background", None) is not None:
            self.strategy.background.stop()  # type: ignore[attr-defined]
        for handle in self.handles:
            trainer.backend.kill(handle)
        self.handles = []

    def take_over(self, trainer: ResizeTrainer, live: List[int]) -> None:
        """The fresh servers become the cluster under the resize's strategy (the clients and the ``live``
        workers routing by their ids); the old ones stop."""
        scheduler, ids = trainer.scheduler, self.routes.ids
        trainer.strategy.retire()
        old = list(scheduler.servers)
        scheduler.replace_servers(self.handles, self.placement)
        scheduler.server_ids = None if ids == list(range(self.servers)) else list(ids)
        trainer.client.set_servers(self.handles, 0, ids)
        wait_answers(trainer, [trainer.worker(i).set_servers(self.handles, 0, ids) for i in live])
        self.strategy.view = trainer.view  # the cluster's view from now on (recoveries, replays)
        wait_answers(trainer, [trainer.worker(i).enable_push_log() for i in live])
        trainer.strategy = self.strategy
        for handle in old:
            trainer.backend.kill(handle)
