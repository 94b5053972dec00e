"""FaultInjector: what the driver asks of a failure injector (implemented by :mod:`xdl_ec.ft.failure_injector`).

The driver calls ``before_step(view, step, elapsed)`` at every step boundary (no push in flight after
``view.quiesce()``, which the injector calls itself when it kills), and ``detect_seconds(role, index)`` to report
how long after a kill its death was confirmed.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol

from xdl_ec.ps.cluster_view import ClusterView


class FaultInjector(Protocol):
    def validate(self, num_servers: int, num_workers: int, total_steps: Optional[int]) -> None: ...

    def before_step(self, view: ClusterView, step: int, elapsed: float) -> None: ...

    def detect_seconds(self, role: str, index: int) -> float: ...

    def made_through(self, step: int) -> None: ...

    def injected(self) -> List[Dict[str, Any]]: ...

    def reset(self) -> None: ...
