"""A request to stop a run at its next step boundary, made by ``xdl-ec train``'s SIGINT/SIGTERM handler: the run
(every :class:`~xdl_ec.job.job.Job` fit hooks :class:`StopAtBoundary`) makes its final save there, where it has a save
directory, and raises :class:`RunStopped`. A boundary is a point with no push in flight, so that save is as consistent
as a periodic one."""

from __future__ import annotations

from typing import Any, Callable, List, Optional


class RunStopped(KeyboardInterrupt):
    """The run stopped at step ``step`` because signal ``signum`` asked it to (a KeyboardInterrupt: whatever cleans
    up after Ctrl-C cleans up after it)."""

    def __init__(self, signum: int, step: int) -> None:
        super().__init__(signum, step)
        self.signum, self.step = int(signum), int(step)


class StopRequest:
    """Whether a stop was asked (and by which signal); ``on_boundary`` callbacks run when a run reaches the boundary
    where it stops (the CLI cancels its fallback there: the final save may take its time)."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self.on_boundary: List[Callable[[], None]] = []

    @property
    def asked(self) -> bool:
        return self.signum is not None

    def ask(self, signum: int) -> None:
        self.signum = int(signum)

    def clear(self) -> None:
        self.signum = None
        self.on_boundary = []

    def reached(self) -> None:
        for callback in self.on_boundary:
            callback()


#: the process's request (signals are per process)
STOP_REQUEST = StopRequest()


class StopAtBoundary:
    """A run hook (after its saver's): at the first step boundary after ``request`` was asked, ``finish()`` (the
    run's final save), then :class:`RunStopped`."""

    def __init__(self, request: StopRequest, finish: Callable[[], Any]) -> None:
        self.request, self.finish = request, finish

    def due(self, step: int) -> bool:  # async training holds new steps until the boundary comes
        return self.request.asked

    def after_step(self, run: Any) -> None:
        if not self.request.asked:
            return
        self.request.reached()
        self.finish()
        raise RunStopped(self.request.signum or 0, run.step)  # asked: a signal number was recorded
