"""StepTimes: when each step of a run started, by the driver's clock: the wall time in which an
``Evict(ttl_seconds=S)`` measures a row's age (:mod:`xdl_ec.sparse.row_rules`).

The servers never read a clock: a rebuilt server and a replayed push must decide exactly as the original did. So
the driver turns wall time into a step number: for the push of a step T that ends with an eviction pass, the
cutoff ``ttl_before`` is one more than the newest step that started more than S seconds before step T did (0 when
none did). The pass frees the records last updated at a step below it: a row's age is the time since the start of
the step that last updated it. The cutoff travels in the push's part of that table (``PSClient``), so a replayed
push and the parity path carry the decision; a server applies it as ``EmbeddingShard::Push``'s ``ttl_before``.

- A step's time is when it first started: a step trained again (a retry, a rollback to a checkpoint) keeps it, so
  its push carries the cutoff the first one did, and a run killed and recovered evicts what its failure-free run
  with the same step times evicts.
- A resumed run does not know the times of the steps before the resume: they count as started when the first step
  after it did (a row last updated before the resume lives S seconds of this run).
- Ages are wall time, so two runs (``--deterministic`` ones too) may evict different rows.
- The record holds 8 bytes per step of this process's run.
"""

from __future__ import annotations

import bisect
import time
from array import array
from typing import Callable, Dict, Optional, Sequence

from xdl_ec.sparse.table_config import Table

# The driver's clock, read once per new step. A module attribute so that a test can put a fake clock here and make
# the eviction of a run by wall time reproducible (two runs given the same step times evict the same rows).
CLOCK: Callable[[], float] = time.monotonic


class StepTimes:
    """The start time of each step of a run whose ``tables`` include one with ``Evict(ttl_seconds=...)``, and the
    cutoffs of their passes (:meth:`start`). Without such a table it records nothing."""

    def __init__(self, tables: Sequence[Table]) -> None:
        # {table: (ttl_seconds, every_steps)}
        self._rules: Dict[str, tuple] = {
            t.name: (float(t.evict.ttl_seconds), int(t.evict.every_steps))
            for t in tables
            if t.evict is not None and t.evict.ttl_seconds is not None
        }
        self._first = 1  # the step of _times[0]; the steps before it (a resume's) count as started at _times[0]
        self._times = array("d")

    @property
    def active(self) -> bool:
        """Whether a table evicts by wall time."""
        return bool(self._rules)

    def resume(self, step: int) -> None:
        """The run continues after ``step`` (a resumed save): steps 1..step count as started with step + 1."""
        if step < 0:
            raise ValueError(f"resume: step must be >= 0, got {step}")
        self._first = step + 1
        self._times = array("d")

    def start(self, step: int) -> Optional[Dict[str, int]]:
        """Notes that ``step`` starts now (the first time only) and returns {table: ttl_before} for the tables whose
        pass ends this step's push with a cutoff above 0; None when there is none."""
        if not self._rules:
            return None
        if step < self._first:
            raise ValueError(
                f"step {step}: the run's step times start at step {self._first} (resumed after {self._first - 1})"
            )
        last = self._first + len(self._times) - 1  # the newest step with a time
        if step > last:
            now = float(CLOCK())
            if self._times:
                now = max(now, self._times[-1])  # a clock that steps back (NTP) must not reorder the steps
            # steps never started here (none in a run's loop, which numbers steps one by one) count as now
            self._times.extend([now] * (step - last))
        out = {}
        for table, (seconds, every) in self._rules.items():
            if step % every:
                continue
            before = self.ttl_before(step, seconds)
            if before:
                out[table] = before
        return out or None

    def ttl_before(self, step: int, seconds: float) -> int:
        """One more than the newest step that started more than ``seconds`` before ``step`` did; 0 when none did.
        ``step`` must have started (:meth:`start`)."""
        end = step - self._first + 1  # the steps up to `step` are _times[:end]
        if not 0 < end <= len(self._times):
            raise ValueError(
                f"step {step}: no start time recorded (steps {self._first}..{self._first + len(self._times) - 1})"
            )
        threshold = self._times[end - 1] - seconds
        # times never decrease: the steps that started before the threshold are a prefix
        older = bisect.bisect_left(self._times, threshold, 0, end)
        return self._first + older if older else 0
