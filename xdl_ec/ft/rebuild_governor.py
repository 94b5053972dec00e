"""RebuildGovernor: how much of its wall time a background rebuild may work, set from training's own speed.

A fixed share (``--rebuild-share``, md RAID's resync limit) must be small enough for the busiest machine, so it
leaves redundancy reduced longer than needed where training would not notice a faster rebuild. The governor keeps
the share as the least the rebuild gets and raises it while training keeps ``keeps`` (default 95%) of its
samples/s before the failure, lowering it again when it does not (additive-increase / multiplicative-decrease,
as TCP shares a link): the rebuild takes what training does not miss. Measured per window of step boundaries
(at least WINDOW_SECONDS and WINDOW_STEPS long): the samples trained over the window's seconds. "Normal" is the
rate of the last NORMAL_STEPS step intervals before the failure, without intervals over OUTLIER times their median
(a TF trace, the gap between two ``fit`` calls, an earlier recovery's pause).

The driver reports step boundaries (:meth:`step`); the rebuild thread reads :attr:`duty`.
"""

from __future__ import annotations

import collections
import statistics
import threading
from typing import Deque, Optional, Tuple

from xdl_ec.settings import checks

DEFAULT_REBUILD_KEEPS = 0.95  # of its samples/s before a failure, training keeps under a rebuild that is not urgent
NORMAL_STEPS = 64  # step intervals before a failure whose rate is training's normal one
OUTLIER = 3.0  # a step interval this many times the median is not a normal step
WINDOW_SECONDS = 0.2  # training's rate under the rebuild is judged over windows at least this long ...
WINDOW_STEPS = 6  # ... and of at least this many step intervals
RAISE = 1.5  # the duty's growth per window in which training kept its rate
BACK_OFF = 0.5  # the duty's cut per window in which it did not
MARGIN = 0.02  # raise only while training runs this much above the bound (a dead band against noise)


class RebuildGovernor:
    """The duty (share of wall time spent rebuilding) of a background rebuild: at least ``floor``, raised while
    training keeps ``keeps`` of its normal samples/s (see the module docstring). ``keeps`` 0 disables the
    governor: the duty stays ``floor``."""

    def __init__(self, floor: float, keeps: float = DEFAULT_REBUILD_KEEPS) -> None:
        self.floor = checks.number("rebuild_share", floor, 0.0, 1.0, low_open=True)
        self.keeps = checks.number("rebuild_keeps", keeps, 0.0, 1.0, high_open=True)
        self.duty = floor
        self.normal: Optional[float] = None  # samples/s before the failure (None: not measured, the duty stays)
        self.windows = self.raised = self.cut = 0  # windows judged, and those that raised or cut the duty
        self._lock = threading.Lock()
        self._steps: Deque[Tuple[float, float]] = collections.deque(maxlen=NORMAL_STEPS)  # (seconds, samples)
        self._last: Optional[Tuple[float, int]] = None  # the last boundary (time, samples)
        self._window: Optional[Tuple[float, int, int]] = None  # governing: its window's (start, samples, steps)

    @property
    def governing(self) -> bool:
        return self._window is not None

    def step(self, now: float, samples: int) -> None:
        """A step boundary at ``now`` (seconds) with ``samples`` trained so far."""
        with self._lock:
            last, self._last = self._last, (now, samples)
            if self._window is None:
                if last is not None and now > last[0] and samples >= last[1]:
                    self._steps.append((now - last[0], samples - last[1]))
                return
            start, start_samples, steps = self._window
            if last is None:  # the first boundary after the recovery's pause opens the first window
                self._window = (now, samples, 0)
                return
            steps += 1
            if now - start < WINDOW_SECONDS or steps < WINDOW_STEPS:
                self._window = (start, start_samples, steps)
                return
            self._judge((samples - start_samples) / (now - start))
            self._window = (now, samples, 0)

    def _judge(self, rate: float) -> None:
        if self.normal is None or self.keeps == 0.0:
            return
        self.windows += 1
        if rate < self.keeps * self.normal:
            self.duty = max(self.floor, self.duty * BACK_OFF)
            self.cut += 1
        elif rate >= (self.keeps + MARGIN) * self.normal and self.duty < 1.0:
            self.duty = min(1.0, self.duty * RAISE)
            self.raised += 1

    def start(self) -> None:
        """A rebuild begins (after its recovery's pause): the normal rate is that of the steps recorded since the
        last one ended; the duty starts at the floor."""
        with self._lock:
            self.normal = self._normal_rate()
            self.duty = self.floor
            self.windows = self.raised = self.cut = 0
            self._window = (0.0, 0, 0)
            self._last = None  # the step holding the pause is not measured

    def stop(self) -> None:
        """The rebuild ended: the steps from here on are normal ones again."""
        with self._lock:
            self._window = None
            self._steps.clear()
            self._last = None

    def _normal_rate(self) -> Optional[float]:
        if len(self._steps) < WINDOW_STEPS:
            return None
        median = statistics.median(seconds for seconds, _ in self._steps)
        kept = [(seconds, samples) for seconds, samples in self._steps if seconds <= OUTLIER * median]
        seconds = sum(s for s, _ in kept)
        return sum(n for _, n in kept) / seconds if seconds > 0 else None
