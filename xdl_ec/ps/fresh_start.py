"""FreshStart: a background move's fresh servers made ready beside the steps: started, and the resize's strategy
attached to them alone (their stripes formed), through a :class:`FreshView` of only them."""

from __future__ import annotations

import threading
from typing import List, Optional, Sequence

from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.cluster_view import ClusterView
from xdl_ec.ps.fault_tolerance import FaultTolerance
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.placement import Placement
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.resize_trainer import ResizeTrainer

__all__ = ["FreshStart", "FreshView"]


class FreshView(ClusterView):
    """The resize's strategy's view while the fresh servers are not the cluster's yet: only them, no workers (the
    workers' push logs serve the old servers until the switch)."""

    def __init__(self, trainer: ResizeTrainer, handles: Sequence[Handle]) -> None:
        super().__init__(*trainer.view.sources())
        self._handles = list(handles)

    @property
    def num_servers(self) -> int:
        return len(self._handles)

    def server_handles(self) -> List[Handle]:
        return list(self._handles)

    def server(self, index: int) -> Remote:
        return Remote(self._handles[index], ServerAPI)

    def servers(self) -> List[Remote]:
        return [Remote(h, ServerAPI) for h in self._handles]

    def beside_handles(self) -> List[Handle]:
        return list(self._handles)

    def agent(self, index: int, api: type, beside: bool = False) -> Remote:
        return Remote(self._handles[index], api, agent=True)

    def workers(self) -> List[Remote]:
        return []


class FreshStart:
    """A move's fresh servers made ready: started (unless ``ready`` holds them) and ``strategy`` attached to them
    alone (their stripes formed). In a thread beside the steps when they must start (on Ray that takes seconds) or
    on Ray (the stripes' round of calls, not in a boundary); given servers in one process form at once (a boundary
    count that does not depend on a thread's timing). ``handles`` once done, or ``error`` (``forming``: raised
    while the stripes formed)."""

    def __init__(
        self,
        trainer: ResizeTrainer,
        servers: int,
        placement: Optional[Placement],
        ready: Optional[Sequence[Handle]],
        strategy: FaultTolerance,
    ) -> None:
        self._trainer, self._servers, self._placement, self._strategy = trainer, servers, placement, strategy
        self.handles: List[Handle] = list(ready or ())
        self.forming = False
        self.error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        if ready is not None and trainer.link_secret is None:
            self.run()
        else:
            self._thread = threading.Thread(target=self.run, name="xdl-ec-move-start", daemon=True)
            self._thread.start()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def run(self) -> None:
        try:
            if not self.handles:
                self.handles = self._trainer.scheduler.start_servers(range(self._servers), self._placement)
            self.forming = True
            self._strategy.attach(FreshView(self._trainer, self.handles))
        except BaseException as err:  # noqa: BLE001 - the move's next boundary raises it (a loss as FreshLost)
            self.error = err
