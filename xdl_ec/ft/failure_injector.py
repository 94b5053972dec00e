"""FailureInjector: kills roles for real at step boundaries, as a :class:`~xdl_ec.ft.failure_schedule.
FailureSchedule` says (the driver's :class:`~xdl_ec.ps.fault_injector.FaultInjector`).

A kill lands at a clean boundary: the previous step's pushes are all applied first (``view.quiesce()``), so the
failed step either never reached the dead role or is retried whole.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from xdl_ec.ft.failure_schedule import FailureSchedule

if TYPE_CHECKING:
    from xdl_ec.ps.cluster_view import ClusterView

log = logging.getLogger(__name__)


class FailureInjector:
    """The kills of ``schedule``, made at the step boundaries they are due (and when each was made, for the
    detection time of the failure it causes)."""

    def __init__(self, schedule: FailureSchedule) -> None:
        if not isinstance(schedule, FailureSchedule):
            raise TypeError(f"schedule: expected a FailureSchedule, got {type(schedule).__name__}")
        self.schedule = schedule
        self._injected: List[Dict[str, Any]] = []
        self._due: List[Any] = []  # kills due and not made yet (a quiesce before them met a lost role)

    def validate(self, num_servers: int, num_workers: int, total_steps: Optional[int]) -> None:
        self.schedule.validate(num_servers, num_workers, total_steps)

    def reset(self) -> None:
        """A new fit call: its report lists the kills made during it."""
        self._injected = []

    def before_step(self, view: ClusterView, step: int, elapsed: float) -> None:
        if self.schedule.empty and not self._due:
            return
        self._due += self.schedule.due(step, elapsed, view.num_servers)
        if self._due:
            # a role lost meanwhile (not by this schedule) raises here: the driver recovers it and calls again, and
            # the kills still due are made then
            view.quiesce()
            while self._due:
                k = self._due[0]
                killed_at = time.perf_counter()  # detection is timed from the kill, which waits for the death
                view.kill(k.role, k.index)
                self._due.pop(0)
                log.warning("injected failure: %s %d killed before step %d", k.role, k.index, step)
                self._injected.append({"step": step, "role": k.role, "index": k.index, "time": killed_at})

    def made_through(self, step: int) -> None:
        """A reattached driver continues a run whose dead driver made the kills due through ``step``."""
        self.schedule.made_through(step)

    def detect_seconds(self, role: str, index: int) -> float:
        """Seconds from the injected kill of (role, index) to now (0.0 when its death was not injected)."""
        for k in reversed(self._injected):
            if k["role"] == role and k["index"] == index:
                return time.perf_counter() - k["time"]
        return 0.0

    def injected(self) -> List[Dict[str, Any]]:
        return list(self._injected)
