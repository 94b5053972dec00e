"""RebuildDeadline: the bound in seconds on ``--ft ec``'s vulnerable window (``--rebuild-within S``).

While r servers are being rebuilt one more loss is fatal (I9). A rebuild paced against training's speed, or flat
out beside training on a machine another job saturates, leaves that window as long as the CPU it happens to get:
measured on 2 shared cores, a first rebuild of ``--code 2,1`` was not done 12 steps later, and a second kill then
ended the run. So the window gets a deadline, counted from the loss (its detection included): the rebuild
measures its own progress (seconds per stripe while it works, under whatever load the machine has) and asks for
the share of wall time that finishes the stripes left by AIM of the bound: its duty rises to that
(:meth:`duty`), and when even working all the time beside training would miss it, the training steps are held
until full redundancy (:meth:`must_hold`): the only lever left on a saturated machine is to stop competing with
the rebuild for this process's share of it.

The clock is injectable (tests drive the prediction without waiting).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Deque, Optional, Tuple

from xdl_ec.settings import checks

DEFAULT_REBUILD_WITHIN = 10.0  # seconds: the soak's kills come ~20 s apart; measured rebuilds alone take 0.3-3 s
AIM = 0.8  # the rebuild plans to be whole by this share of the bound (margin for a prediction from few stripes)
RECENT_BATCHES = 16  # the rebuild's latest batches, whose seconds per stripe predict the stripes left


class RebuildDeadline:
    """The vulnerable window's deadline: ``within`` seconds from the loss that opened it (:meth:`open`); the duty
    a rebuild needs to keep it from its measured progress (:meth:`progress`), and whether training must be held.
    The driver opens, refines and closes it; the rebuild thread reports progress and reads the duty."""

    def __init__(self, within: float = DEFAULT_REBUILD_WITHIN, clock: Callable[[], float] = time.perf_counter):
        self.within = checks.positive_number("rebuild_within", within)
        self.clock = clock
        self.since: Optional[float] = None  # clock time of the loss that opened the window (None: none open)
        self._lock = threading.Lock()
        self._recent: Deque[Tuple[int, float]] = collections.deque(maxlen=RECENT_BATCHES)  # (stripes, seconds)

    @property
    def is_open(self) -> bool:
        return self.since is not None

    def open(self, since: float) -> None:
        """A loss at ``since`` left one more loss fatal. A window already open stays as it is: a recovery that
        starts over (a replacement lost meanwhile) does not move the deadline of the loss that opened it."""
        with self._lock:
            if self.since is None:
                self.since = since
                self._recent.clear()

    def starts_at(self, since: float) -> None:
        """The loss that opened the window happened at ``since`` (earlier than it was opened: its detection)."""
        with self._lock:
            if self.since is not None:
                self.since = min(self.since, since)

    def close(self) -> None:
        """Full redundancy again."""
        with self._lock:
            self.since = None
            self._recent.clear()

    def progress(self, stripes: int, seconds: float) -> None:
        """The rebuild did ``stripes`` stripes in ``seconds`` of work (its pauses excluded)."""
        if stripes > 0 and seconds >= 0.0:
            with self._lock:
                self._recent.append((stripes, seconds))

    def seconds_per_stripe(self) -> Optional[float]:
        """The recent work's seconds per stripe (None: nothing measured since the window opened)."""
        with self._lock:
            stripes = sum(n for n, _ in self._recent)
            return sum(s for _, s in self._recent) / stripes if stripes else None

    def seconds_left(self) -> float:
        """Seconds until the rebuild's aim (AIM of the bound after the loss); negative once it passed."""
        since = self.since
        return float("inf") if since is None else since + AIM * self.within - self.clock()

    def duty(self, remaining: int) -> float:
        """The share of wall time the rebuild must work to rebuild ``remaining`` stripes by its aim: 0.0 when no
        window is open or nothing is measured yet (the other pacing rules decide), above 1.0 when it cannot
        even working all the time, infinite once the aim passed."""
        if self.since is None or remaining <= 0:
            return 0.0
        left = self.seconds_left()
        if left <= 0.0:
            return float("inf")
        per_stripe = self.seconds_per_stripe()
        return 0.0 if per_stripe is None else remaining * per_stripe / left

    def must_hold(self, remaining: int, next_chance: float = 0.0) -> bool:
        """Whether training's steps must wait for the rebuild: even working all the time beside them, the
        ``remaining`` stripes are predicted to miss the aim (or it has passed). ``next_chance``: seconds until
        training could be held next (a step's length: not holding now means a step more beside training)."""
        if self.since is None or remaining <= 0:
            return False
        per_stripe = self.seconds_per_stripe()
        left = self.seconds_left() - next_chance
        return left <= 0.0 or (per_stripe is not None and remaining * per_stripe > left)
