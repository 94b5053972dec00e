"""ResizeRequest: a resize asked from another thread (``job.resize``), answered by the training thread at a step
boundary."""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Tuple

from xdl_ec.ps.started_servers import StartedServers

__all__ = ["ResizeRequest"]


class ResizeRequest:
    """A resize asked by :meth:`Resizer.request`, answered by the training thread at a boundary."""

    def __init__(self, servers: int, drain: Tuple[int, ...] = (), code: Optional[Tuple[int, int]] = None) -> None:
        self.servers = servers
        self.drain = drain
        self.code = code  # the re-formed stripes' (k, r), None: kept
        self.done = threading.Event()
        self.started = False  # the training thread took it (set under the Resizer's lock)
        self.servers_started: Optional[StartedServers] = None  # started by the asker, ahead of the boundary
        self.ready = threading.Event()  # its servers are started: a boundary may take it
        self.record: Optional[Dict[str, Any]] = None
        self.error: Optional[BaseException] = None
