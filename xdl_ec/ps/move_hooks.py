"""MoveHooks: what a test or a benchmark gives a run's resizes: an observer of a move's phases and a fixed pace.

A run's resizes are built inside ``Job.fit`` (:class:`~xdl_ec.ps.resize.Resizer`); a test that kills a server
mid-move, or a benchmark that times a move of a given size, hands its hooks to the job (``job.move_hooks``), which
gives them to the run's Resizer and from there to each move, instead of patching the classes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional, Protocol

from xdl_ec.ps.resize_trainer import ResizeTrainer
from xdl_ec.settings import checks

# a move's phases, in order: "precopy" / "precopied" (a background move's pre-copy boundary begins / ends),
# "export" (the final boundary, before the old servers are read), "load" (a table's rows are on the fresh layout)
PHASES = ("precopy", "precopied", "export", "load")


class MoveObserver(Protocol):
    """Called at each phase of a resize's move (:data:`PHASES`) with the run and the move (the
    :class:`~xdl_ec.ps.background_move.BackgroundMove`, not imported here: it imports this module; None: a move in
    one pause, :func:`~xdl_ec.ps.one_pause_resize.resize_servers`); it may kill servers there (a test's failure
    mid-move)."""

    def __call__(self, phase: str, trainer: ResizeTrainer, move: Any) -> None: ...


@dataclasses.dataclass(frozen=True)
class MoveHooks:
    """``observer``: see :class:`MoveObserver`. ``rows`` / ``seconds``: a background move's budget per step
    boundary, fixed (slot records, or seconds on ``clock``) instead of the run's ``resize_share`` of the median
    step, so a test knows how many boundaries a move spans. ``clock``: what a budget in seconds is counted by."""

    observer: Optional[MoveObserver] = None
    rows: Optional[int] = None
    seconds: Optional[float] = None
    clock: Callable[[], float] = time.perf_counter

    def __post_init__(self) -> None:
        if self.rows is not None and self.seconds is not None:
            raise ValueError("MoveHooks: give rows or seconds per boundary, not both")
        if self.rows is not None:
            checks.positive_int("rows", self.rows)
        if self.seconds is not None:
            checks.number("seconds", self.seconds, 0.0, low_open=True)
        if self.observer is not None and not callable(self.observer):
            raise TypeError(f"observer: expected a callable (phase, trainer, move), got {type(self.observer).__name__}")

    def phase(self, name: str, trainer: ResizeTrainer, move: Any) -> None:
        """Tells the observer, if any, that a move reached phase ``name``."""
        if self.observer is not None:
            self.observer(name, trainer, move)


NO_HOOKS = MoveHooks()  # a run nobody observes: moves paced by its resize_share
