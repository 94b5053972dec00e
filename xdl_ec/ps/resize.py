"""Resizing a running cluster's parameter servers: ``job.resize(servers=N)`` from another thread, and
``--resize-at STEP:N[:drain=I[,J]][:code=K,R]`` (repeatable, like ``--fail-at``).

:class:`Resizer` is a trainer hook: at a step boundary with nothing in flight, the rows whose owner changes move
(``--ft none``: between the servers that keep their shards; ``--ft ec``: every row onto fresh servers whose stripes
are re-formed, spread over boundaries by :class:`~xdl_ec.ps.background_resize.BackgroundResize`), and only then do
the workers and the driver route by the new layout. A row has one owner at any time, so the model is the one of the
run never resized. A resize that cannot be done as asked is a :class:`ResizeError` that changes nothing. The
Resizer only decides when: the schedule (:mod:`xdl_ec.ps.resize_schedule`), the plan and checks
(:mod:`xdl_ec.ps.resize_plan`, :mod:`xdl_ec.ps.resize_target`) and the moves
(:mod:`xdl_ec.ps.one_pause_resize`, :mod:`xdl_ec.ps.background_resize`) are their own modules, their public names
re-exported here. Routing, drains, code changes, failures mid-move and what is refused: docs/design/elastic.md.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.background_resize import BackgroundResize
from xdl_ec.ps.boundary_pace import BoundaryPace
from xdl_ec.ps.move_hooks import NO_HOOKS, MoveHooks
from xdl_ec.ps.one_pause_resize import resize_servers
from xdl_ec.ps.resize_error import ResizeError
from xdl_ec.ps.resize_plan import plan_ids, server_ids_of
from xdl_ec.ps.resize_request import ResizeRequest
from xdl_ec.ps.resize_schedule import ResizeAt, check_fits, check_schedule, parse_resize
from xdl_ec.ps.resize_target import check_target, drain_ids
from xdl_ec.ps.resize_trainer import ResizeTrainer
from xdl_ec.ps.started_servers import StartedServers

__all__ = [
    "RESIZE_SHARE",
    "ResizeAt",
    "ResizeError",
    "Resizer",
    "StartedServers",
    "check_schedule",
    "parse_resize",
    "plan_ids",
    "resize_servers",
    "server_ids_of",
]

# the default share of the steps' time a background move may take (docs/results/resize-2026-11-29.md: training
# keeps ~0.9 of its samples/s through the move; a larger share ends it in fewer steps at a larger loss)
RESIZE_SHARE = 0.1


class Resizer:
    """The trainer hook that resizes at step boundaries: the scheduled resizes (``--resize-at``) and those
    :meth:`request` asks from another thread. One resize at a time: a request while another is asked or under way
    is a :class:`ResizeError`."""

    def __init__(
        self, schedule: Sequence[ResizeAt] = (), resize_share: Optional[float] = None, hooks: MoveHooks = NO_HOOKS
    ) -> None:
        """``resize_share``: the run's (``Cluster(resize_share=...)``, ``--resize-share``; None: the default
        :data:`RESIZE_SHARE`): the share of the median step's seconds a background move (``--ft ec``) may take
        per boundary on average, its final pause included; 0: the whole move in one pause. ``hooks``: a test's or
        benchmark's observer of the moves and fixed budget per boundary (:class:`~xdl_ec.ps.move_hooks.MoveHooks`)."""
        self._schedule = check_schedule(schedule)
        self.hooks = hooks
        self._lock = threading.Lock()
        self._request: Optional[ResizeRequest] = None
        self._trainer: Optional[ResizeTrainer] = None
        self._closed = False
        self._next: Optional[StartedServers] = None  # the next scheduled resize's servers, starting ahead
        self._move: Optional[BackgroundResize] = None  # a background move under way
        self._pace = BoundaryPace(RESIZE_SHARE if resize_share is None else float(resize_share), hooks)
        self.records: List[Dict[str, Any]] = []

    @property
    def resize_share(self) -> float:
        """The share of the median step's seconds a background move may take per boundary on average."""
        return self._pace.resize_share

    def attach(self, trainer: ResizeTrainer) -> None:
        """The run whose servers this resizes (before its first step)."""
        self._trainer = trainer

    @property
    def active(self) -> bool:
        """Whether a run is attached and not ended (:meth:`request` may be asked)."""
        return self._trainer is not None and not self._closed

    def validate(self, servers: int, code: Optional[Tuple[int, int]], total_steps: Optional[int]) -> None:
        """Checks the schedule against a cluster of ``servers`` (stripes ``code``) and the run's steps: ValueError
        names the flag and the entry."""
        check_fits(self._schedule, servers, code, total_steps)

    def request(
        self, servers: int, drain: Any = None, timeout: Optional[float] = None, code: Any = None
    ) -> Dict[str, Any]:
        """Resizes the running cluster to ``servers`` at its next step boundary, first removing the servers of id
        ``drain`` (an id or a list), its stripes re-formed with ``code`` ((k, r) or "k,r"; None: kept; ``--ft
        ec`` only), and returns the resize's record (waits for it; ``timeout`` seconds at most, None: as long as
        it takes). ResizeError, changing nothing, when the resize is impossible (a drained id not live, too few
        servers left for the code), another is under way, or the run ended first."""
        with self._lock:
            if self._trainer is None or self._closed:
                raise ResizeError("resize: no cluster run is training (resize while job.fit(cluster=...) runs)")
            if self._request is not None:
                raise ResizeError(
                    f"resize: a resize to {self._request.servers} servers is under way; wait for it to finish"
                )
            new_code = check_target(self._trainer, servers, drain, code)
            request = self._request = ResizeRequest(int(servers), drain_ids(drain), None if code is None else new_code)
        # its servers start here, while training goes on (the boundary only moves rows)
        request.servers_started = StartedServers(self._trainer, int(servers), False, request.drain, request.code)
        request.ready.set()
        if not request.done.wait(timeout):
            with self._lock:
                if self._request is request and not request.started:
                    self._request = None  # not started: withdrawn
                    if request.servers_started is not None:
                        request.servers_started.drop(self._trainer)
                    raise ResizeError(f"resize: no step boundary came within {timeout:g} s; the resize is withdrawn")
            request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.record is not None
        return request.record

    def due(self, step: int) -> bool:
        """Async mode: hold new steps so the boundary comes (a resize asked, under way, or scheduled before the
        next step)."""
        return (
            self._request is not None
            or self._move is not None
            or bool(self._schedule and self._schedule[0].step <= step + 1)
        )

    def after_step(self, trainer: ResizeTrainer) -> None:
        """A step boundary with nothing in flight: a background move's next part, the resizes due before the next
        step."""
        self._pace.boundary_began(time.perf_counter())
        try:
            self._at_boundary(trainer)
        finally:
            self._pace.boundary_ended(time.perf_counter())

    def _background(self, trainer: ResizeTrainer) -> bool:
        """Whether this cluster's resizes move in the background (a re-forming strategy and a budget)."""
        return bool(
            trainer.strategy.reforms_on_resize and (self.resize_share > 0 or self.hooks.rows or self.hooks.seconds)
        )

    def _at_boundary(self, trainer: ResizeTrainer) -> None:
        if self._move is not None:
            self._advance(trainer)
            if self._move is not None:
                return  # one resize at a time: the next ones wait for this one
        while self._schedule and self._schedule[0].step <= trainer.step + 1:
            # popped once done: a server lost during it is recovered at this boundary and the resize tried again
            due = self._schedule[0]
            if self._background(trainer):
                last = trainer.total_steps is not None and trainer.step >= trainer.total_steps
                late = self._next is None or self._next.step >= due.step - 1
                if late and not last and (self._next is None or not self._next.ready):
                    # its fresh servers were not started ahead (it came due during another move): they start now
                    # while training goes on, and the move begins at the first boundary after they answer (on Ray
                    # starting them takes seconds, a pause the boundary would else make). Servers started ahead
                    # are waited for (the move begins at the step asked), and so are any at the run's last boundary
                    if self._next is None:
                        self._next = StartedServers(trainer, due.servers, True, due.drain, due.code)
                    return
                started, self._next = self._next, None
                self._move = BackgroundResize(
                    trainer, due.servers, started, due.drain, self.hooks, schedule=True, code=due.code
                )
                self._advance(trainer)
                if self._move is not None:
                    return
                continue
            self.records.append(resize_servers(trainer, due.servers, self.hooks, self._next, due.drain, due.code))
            self._schedule.pop(0)
            self._next = None
        if self._schedule and self._next is None:  # the next one's servers start now, while training goes on
            due = self._schedule[0]
            self._next = StartedServers(trainer, due.servers, True, due.drain, due.code)
        with self._lock:
            request = self._request
            if request is None or not request.ready.is_set():
                return
            request.started = True
        try:
            if self._background(trainer):
                self._move = BackgroundResize(
                    trainer,
                    request.servers,
                    request.servers_started,
                    request.drain,
                    self.hooks,
                    request=request,
                    code=request.code,
                )
                self._advance(trainer)
                return
            request.record = resize_servers(
                trainer, request.servers, self.hooks, request.servers_started, request.drain, request.code
            )
            self.records.append(request.record)
        except RoleLost:  # recovered at this boundary by the strategy, then the resize is tried again (or goes on)
            if self._move is None:
                with self._lock:
                    request.started = False
            raise
        except BaseException as err:  # a ResizeError (the cluster changed since it was asked) or a failure
            request.error = err
            if not isinstance(err, ResizeError):
                raise
        finally:
            if self._move is None and (request.record is not None or request.error is not None):
                with self._lock:
                    self._request = None
                request.done.set()

    def _advance(self, trainer: ResizeTrainer) -> None:
        """The move's part at this boundary: a pre-copy's share, or the final boundary (every slot read once, or
        the run's last boundary); a finished move's record is kept and answered."""
        moving = self._move
        assert moving is not None
        try:
            last = trainer.total_steps is not None and trainer.step >= trainer.total_steps
            if not (moving.move.precopied or last):
                moving.move.precopy(trainer, *self._pace.budget())
                return
            record = moving.finish(trainer)
        except RoleLost:  # an old server: its strategy recovers it at this boundary, the move goes on after
            raise
        except BaseException as err:
            self._move = None
            moving.move.drop(trainer)
            if moving.request is not None:
                moving.request.error = err
                with self._lock:
                    self._request = None
                moving.request.done.set()
            if moving.request is None or not isinstance(err, ResizeError):
                raise
            return
        if record is None:
            return  # a fresh server was lost at the final boundary: the pre-copy starts over
        self._move = None
        self.records.append(record)
        if moving.schedule:
            self._schedule.pop(0)
        if moving.request is not None:
            moving.request.record = record
            with self._lock:
                self._request = None
            moving.request.done.set()

    def close(self) -> None:
        """The run ended: a resize still asked is refused, servers started ahead are stopped, a background move
        not finished is dropped (the old servers held every row throughout)."""
        with self._lock:
            self._closed = True
            request, self._request = self._request, None
        if self._move is not None and self._trainer is not None:
            self._move.move.drop(self._trainer)
            self._move = None
        if self._next is not None and self._trainer is not None:
            self._next.drop(self._trainer)
            self._next = None
        if request is not None and request.servers_started is not None and self._trainer is not None:
            request.servers_started.drop(self._trainer)
        if request is not None and not request.done.is_set():
            request.error = ResizeError(
                "resize: the run ended before the resize completed at a step boundary; nothing was changed"
            )
            request.done.set()

    def report(self) -> List[Dict[str, Any]]:
        """The resizes done, in order (the report's ``resizes``)."""
        return list(self.records)
