"""BoundaryPacer: ``--ft ec``'s rebuild run at step boundaries, on the step's path (``ErasureCoded(...,
rebuild="boundary")``, and ``rebuild_stripes_per_step``: a fixed count per boundary, which tests use to place a
failure inside a rebuild deterministically). The default runs it off the step's path instead
(:mod:`xdl_ec.ft.background_rebuild`).

Rate limit, like md RAID's resync speed limit: the rebuild may take ``share`` of wall time until it is done, so
each boundary earns ``share / (1 - share)`` times the mean of the recent steps' seconds (measured between
boundaries, the rebuild's own time excluded) and spends it on whole stripes; a stripe that overruns is repaid at
the next boundaries. A boundary with credit rebuilds at least one stripe, and credit grows every boundary, so the
rebuild always finishes.
"""

from __future__ import annotations

import collections
import time
from typing import Deque, Optional

from xdl_ec.ft.ec_recovery import EcRecovery

STEP_WINDOW = 8  # recent step boundaries whose mean paces the rebuild
CREDIT_CAP_STEPS = 1.0  # unspent rebuild credit is capped at one mean step (no burst after idle boundaries)


class BoundaryPacer:
    """Spends step boundaries on ``coordinator``'s rebuild (a :class:`~xdl_ec.ft.ec_recovery.EcRecovery`):
    ``stripes_per_step`` stripes per boundary when given, else ``share`` of wall time (see the module docstring)."""

    def __init__(self, coordinator: EcRecovery, share: float, stripes_per_step: Optional[int] = None) -> None:
        self.coordinator = coordinator
        self.share = share
        self.stripes_per_step = stripes_per_step
        self.step_seconds: Deque[float] = collections.deque(maxlen=STEP_WINDOW)
        self._boundary_end: Optional[float] = None
        self._credit = 0.0  # rebuild seconds earned, not spent (negative: an overrun, repaid next boundaries)
        self.boundaries_rebuilding = 0  # step boundaries that rebuilt stripes (the rebuild's spread, for tests)

    def restart(self) -> None:
        """A recovery just ran: the step holding it is not a normal step (not measured), no credit carried."""
        self._credit = 0.0
        self._boundary_end = None

    def step_boundary(self) -> None:
        """Measures the step that just ended; the caller then calls :meth:`rebuild` and :meth:`boundary_end`."""
        if self._boundary_end is not None:
            self.step_seconds.append(time.perf_counter() - self._boundary_end)

    def boundary_end(self) -> None:
        self._boundary_end = time.perf_counter()

    def rebuild(self) -> None:
        """Rebuilds this boundary's share of the plan."""
        if not self.coordinator.plan:
            return
        if self.stripes_per_step is not None:
            self._rebuild_some(stripes=self.stripes_per_step)
            self.boundaries_rebuilding += 1
            return
        if self.share >= 1.0 or not self.step_seconds:
            budget = None if self.share >= 1.0 else 0.0  # no step measured yet: one stripe
        else:
            mean = sum(self.step_seconds) / len(self.step_seconds)
            self._credit = min(self._credit + self.share / (1.0 - self.share) * mean, CREDIT_CAP_STEPS * mean)
            if self._credit <= 0.0:
                return  # still repaying an overrun
            budget = self._credit
        start = time.perf_counter()
        self._rebuild_some(seconds=budget)
        self.boundaries_rebuilding += 1
        if budget is not None:
            self._credit -= time.perf_counter() - start

    def wants_boundary(self) -> bool:
        """Async mode: whether the driver should let the steps in flight finish for a boundary: while stripes are
        missing and the rebuild has earned the time of a stripe since the last boundary."""
        if not self.coordinator.plan:
            return False
        if self.stripes_per_step is not None or self._boundary_end is None or self.share >= 1.0:
            return True
        earned = (time.perf_counter() - self._boundary_end) * self.share / (1.0 - self.share)
        return self._credit + earned >= self.coordinator.stripe_seconds

    def _rebuild_some(self, stripes: Optional[int] = None, seconds: Optional[float] = None) -> None:
        """At most ``stripes`` stripes, none after ``seconds`` are spent (at least one either way)."""
        coordinator = self.coordinator
        deadline = None if seconds is None else time.perf_counter() + seconds
        if coordinator.plan and coordinator.view.backend == "ray":
            # remote links batch their sends (parity_link): have every survivor's parity delivered once here,
            # instead of each stripe's decode finding it behind the data and waiting for a flush
            coordinator.drain([s for s in range(coordinator.n) if s not in coordinator.rebuilding])
        done = 0
        while coordinator.plan:
            if done and (
                (stripes is not None and done >= stripes) or (deadline is not None and time.perf_counter() >= deadline)
            ):
                break
            coordinator.rebuild_next()
            done += 1
