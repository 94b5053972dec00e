"""A Ray session for a test: the one already running, else a local one this connects (as ``xdl-ec train --backend
ray`` would) and shuts down afterwards."""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def ray_session() -> Iterator[None]:
    import ray

    from xdl_ec.ps.backend import connect_ray

    started = not ray.is_initialized()
    if started:
        connect_ray()
    try:
        yield
    finally:
        if started:
            ray.shutdown()
