"""StartedServers: the servers a resize needs, started ahead of its boundary while training goes on (on Ray a
server process takes seconds to start: not in the pause)."""

from __future__ import annotations

import threading
from typing import List, Optional, Sequence, Tuple

from xdl_ec.ps.handle import Handle
from xdl_ec.ps.placement import Placement
from xdl_ec.ps.resize_plan import placement_of, plan_ids, server_ids_of
from xdl_ec.ps.resize_trainer import ResizeTrainer

__all__ = ["StartedServers"]


class StartedServers:
    """Servers a resize needs, started ahead of its boundary while training goes on (on Ray a server process takes
    seconds to start: not in the pause): for a count of ``before`` servers, the new ones (indices before..servers-1)
    or, for a strategy that re-forms, ``servers`` fresh ones with their placement. :meth:`take` waits for them."""

    def __init__(
        self,
        trainer: ResizeTrainer,
        servers: int,
        background: bool,
        drain: Sequence[int] = (),
        code: Optional[Tuple[int, int]] = None,
    ) -> None:
        self.before = len(trainer.scheduler.servers)
        self.step = int(trainer.step)  # the boundary they started at
        self.ids = server_ids_of(trainer.scheduler)  # the cluster they were started for
        self.code_before = trainer.strategy.stripe_code  # ... and the code it had (the placement's, code None)
        self.servers = servers
        self.drain = tuple(drain)
        self.code = code  # the re-formed stripes' (None: kept)
        self.handles: Optional[List[Handle]] = None
        self.placement: Optional[Placement] = None
        self.error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        if background:
            self._thread = threading.Thread(target=self._start, args=(trainer,), name="xdl-ec-resize-start")
            self._thread.daemon = True
            self._thread.start()
        else:
            self._start(trainer)

    def _start(self, trainer: ResizeTrainer) -> None:
        try:
            scheduler = trainer.scheduler
            if trainer.strategy.reforms_on_resize:
                self.placement = placement_of(trainer, self.servers, self.code)
                self.handles = scheduler.start_servers(range(self.servers), self.placement)
            else:
                kept, _ = plan_ids(self.ids, self.servers, self.drain)
                self.handles = scheduler.start_servers(range(len(kept), max(self.servers, len(kept))))
        except BaseException as err:  # noqa: BLE001 - the boundary starts them itself instead
            self.error = err

    @property
    def ready(self) -> bool:
        """Whether the start is over (:meth:`take` would not wait)."""
        return self._thread is None or not self._thread.is_alive()

    def take(self, trainer: ResizeTrainer) -> Optional["StartedServers"]:
        """Waits for the start; self when every server answered for this cluster's count now, else None (the
        caller starts them at the boundary; any started here are stopped)."""
        if self._thread is not None:
            self._thread.join()
        fits = (
            self.error is None
            and self.ids == server_ids_of(trainer.scheduler)
            and self.code_before == trainer.strategy.stripe_code
        )
        if not fits:
            self.drop(trainer)
            return None
        return self

    def drop(self, trainer: ResizeTrainer) -> None:
        """Stops servers started but not used (a refused or withdrawn resize)."""
        if self._thread is not None:
            self._thread.join()
        for handle in self.handles or []:
            trainer.backend.kill(handle)
        self.handles = None
