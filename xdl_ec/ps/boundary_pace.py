"""BoundaryPace: what a background move may spend at each step boundary: a test's or benchmark's fixed rows or
seconds (:class:`~xdl_ec.ps.move_hooks.MoveHooks`), else the run's ``resize_share`` of the median recent step's
seconds, timed between boundaries so that the boundaries' own work does not count as the steps'."""

from __future__ import annotations

import collections
import statistics
from typing import Deque, Optional, Tuple

from xdl_ec.ps.move_hooks import MoveHooks

__all__ = ["FIRST_PRECOPY_ROWS", "BoundaryPace"]

FIRST_PRECOPY_ROWS = 4096  # the first pre-copy boundary's slots, before a step was timed


class BoundaryPace:
    """The steps' seconds between boundaries (the last 32) and the budget they give a boundary."""

    def __init__(self, resize_share: float, hooks: MoveHooks) -> None:
        self.resize_share = resize_share
        self._hooks = hooks
        self._step_seconds: Deque[float] = collections.deque(maxlen=32)  # recent steps, boundaries' work excluded
        self._boundary_end: Optional[float] = None

    def boundary_began(self, now: float) -> None:
        """A boundary began at ``now``: the steps since the last one ended are timed."""
        if self._boundary_end is not None:
            self._step_seconds.append(now - self._boundary_end)

    def boundary_ended(self, now: float) -> None:
        self._boundary_end = now

    def budget(self) -> Tuple[Optional[int], Optional[float]]:
        """What the pre-copy may do at this boundary, (rows, seconds) with one of them given: the hooks' fixed rows
        or seconds, else ``resize_share`` of the median step's seconds (the first boundary, before a step was
        timed: FIRST_PRECOPY_ROWS records)."""
        if self._hooks.rows is not None:
            return self._hooks.rows, None
        if self._hooks.seconds is not None:
            return None, self._hooks.seconds
        if not self._step_seconds:
            return FIRST_PRECOPY_ROWS, None
        return None, self.resize_share * statistics.median(self._step_seconds)
