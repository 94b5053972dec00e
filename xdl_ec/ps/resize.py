"""Resizing a running cluster's parameter servers: ``job.resize(servers=N)`` from another thread, and
``--resize-at STEP:N[:drain=I[,J]][:code=K,R]`` (repeatable, like ``--fail-at``).

:class:`Resizer` is a trainer hook: at a step boundary with nothing in flight, the rows whose owner changes move
(``--ft none``: between the servers that keep their shards; ``--ft ec``: every row onto fresh servers whose stripes
are re-formed, spread over boundaries by :mod:`xdl_ec.ps.background_move`), and only then do the workers and the
driver route by the new layout. A row has one owner at any time, so the model is the one of the run never resized.
A resize that cannot be done as asked is a :class:`ResizeError` that changes nothing. Routing, drains, code
changes, failures mid-move and what is refused: docs/design/elastic.md.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import statistics
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from xdl_ec import _core
from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.background_move import BackgroundMove
from xdl_ec.ps.client import owner_positions
from xdl_ec.ps.move_hooks import NO_HOOKS, MoveHooks
from xdl_ec.ps.placement import plan_placement
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.resize_trainer import ReformingStrategy, ResizeTrainer
from xdl_ec.settings.stripe_code import parse_code

__all__ = ["ResizeAt", "ResizeError", "Resizer", "parse_resize"]

_HEAD = re.compile(r"\s*(\d+)\s*:\s*(\d+)\s*")
_DRAIN = re.compile(r"\s*drain\s*=\s*(\d+(?:\s*,\s*\d+)*)\s*")
_CODE = re.compile(r"\s*code\s*=(.*)")


class ResizeError(ValueError):
    """A resize that cannot be done as asked; nothing was changed."""


@dataclasses.dataclass(frozen=True)
class ResizeAt:
    """Resize to ``servers`` servers at the boundary before step ``step`` (the first step on the new count)."""

    step: int
    servers: int
    drain: Tuple[int, ...] = ()  # server ids removed (a spot reclaim with notice), see :func:`plan_ids`
    code: Optional[Tuple[int, int]] = None  # the (k, r) the re-formed stripes take (``--ft ec``); None keeps it

    def __str__(self) -> str:
        tail = f":drain={','.join(str(i) for i in self.drain)}" if self.drain else ""
        if self.code is not None:
            tail += f":code={self.code[0]},{self.code[1]}"
        return f"{self.step}:{self.servers}{tail}"


def parse_resize(text: str, flag: str = "--resize-at") -> ResizeAt:
    """``STEP:N[:drain=I[,J...]][:code=K,R]`` -> :class:`ResizeAt`; ValueError names ``flag`` and what was wrong.
    ``code`` follows the rule of a job's ``--code`` (:func:`~xdl_ec.settings.stripe_code.parse_code`)."""
    if not isinstance(text, str):
        raise TypeError(f"{flag}: expected a string STEP:SERVERS, got {type(text).__name__}")
    usage = (
        f"{flag}: expected STEP:SERVERS[:drain=ID[,ID...]][:code=K,R] with non-negative integers, e.g. 10:3, "
        f"10:3:drain=1 or 10:5:code=3,2, got {text!r}"
    )
    parts = text.split(":")
    head = _HEAD.fullmatch(":".join(parts[:2]))
    if head is None:
        raise ValueError(usage)
    step, servers = int(head.group(1)), int(head.group(2))
    drain: Tuple[int, ...] = ()
    code: Optional[Tuple[int, int]] = None
    given: List[str] = []
    for part in parts[2:]:
        name = part.split("=", 1)[0].strip()
        if name in given:
            raise ValueError(f"{flag}: {name}= is given twice in {text!r}; give it once")
        given.append(name)
        drained, coded = _DRAIN.fullmatch(part), _CODE.fullmatch(part)
        if drained is not None:
            drain = tuple(int(i) for i in drained.group(1).split(","))
        elif coded is not None:
            try:
                code = parse_code(coded.group(1).strip())
            except ValueError as err:
                raise ValueError(f"{flag}: {err} in {text!r} (code=K,R, as --code)") from None
        else:
            raise ValueError(usage)
    if len(set(drain)) != len(drain):
        raise ValueError(f"{flag}: a server id is drained twice in {text!r}; name each once")
    if step < 2:
        raise ValueError(
            f"{flag}: STEP must be >= 2 (a resize happens at the boundary after a step; STEP is the first step on "
            f"the new count), got {text!r}"
        )
    if servers < 1:
        raise ValueError(f"{flag}: SERVERS must be >= 1, got {text!r}")
    return ResizeAt(step, servers, drain, code)


def check_schedule(schedule: Sequence[ResizeAt], flag: str = "--resize-at") -> List[ResizeAt]:
    """The schedule sorted by step; ValueError when two resizes share a step."""
    ordered = sorted(schedule, key=lambda r: r.step)
    for a, b in zip(ordered, ordered[1:]):
        if a.step == b.step:
            raise ValueError(f"{flag}: two resizes at step {a.step} ({a} and {b}); keep one")
    return ordered


def drain_ids(drain: Any) -> Tuple[int, ...]:
    """``drain`` (None, an id or ids) as a tuple of distinct ints; ResizeError when it is not."""
    if drain is None:
        return ()
    items = [drain] if isinstance(drain, (int, np.integer)) else drain
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple)):
        raise ResizeError(f"drain: expected a server id or a list of ids, got {type(drain).__name__}")
    if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) for i in items):
        raise ResizeError(f"drain: expected int server ids, got {list(items)!r}")
    out = tuple(int(i) for i in items)
    if len(set(out)) != len(out):
        raise ResizeError(f"drain: a server id is given twice in {list(out)}; name each once")
    return out


def server_ids_of(scheduler: Any) -> List[int]:
    """The live servers' stable ids, in the cluster's order (0..n-1 until a drain leaves a hole)."""
    ids = getattr(scheduler, "server_ids", None)
    return list(range(len(scheduler.servers))) if ids is None else list(ids)


def plan_ids(ids: Sequence[int], servers: int, drain: Sequence[int] = ()) -> Tuple[List[int], List[int]]:
    """The servers a resize of a cluster with stable ``ids`` (in its order) to ``servers`` keeps and the ids it ends
    with: (positions kept, ids after: the kept ones in their order, then the new servers'). The ``drain`` ids go
    first; then, shrinking further, the highest ids; growing, new servers take the smallest free ids (a drained id
    too: draining i and growing back restores the routing). ResizeError for an id that is not live."""
    missing = [i for i in drain if i not in ids]
    if missing:
        raise ResizeError(
            f"drain: server id{'s' if len(missing) > 1 else ''} {missing} {'are' if len(missing) > 1 else 'is'} not "
            f"live (the live ids are {sorted(ids)}); nothing was changed"
        )
    kept = [p for p, i in enumerate(ids) if i not in drain]
    if servers < len(kept):
        leaving = set(sorted((ids[p] for p in kept), reverse=True)[: len(kept) - servers])
        kept = [p for p in kept if ids[p] not in leaving]
    after = [ids[p] for p in kept]
    free = (i for i in range(servers + len(ids)) if i not in after)
    after += [next(free) for _ in range(servers - len(kept))]
    return kept, after


def code_after(trainer: ResizeTrainer, code: Any) -> Optional[Tuple[int, int]]:
    """The stripes' (k, r) after a resize of ``trainer``'s cluster asked with ``code`` (None: the current one,
    kept); ResizeError when the run keeps no stripes (``--ft`` other than ec) or ``code`` breaks ``--code``'s rule."""
    current = trainer.strategy.stripe_code
    if code is None:
        return None if current is None else (int(current[0]), int(current[1]))
    if current is None:
        ft = getattr(trainer.strategy, "name", "none")
        raise ResizeError(f"code: a code needs --ft ec (this run has --ft {ft}: no stripes); nothing was changed")
    try:
        return parse_code(code)
    except (TypeError, ValueError) as err:
        raise ResizeError(f"{err}; nothing was changed") from None


def check_target(
    trainer: ResizeTrainer, servers: int, drain: Any = None, code: Any = None
) -> Optional[Tuple[int, int]]:
    """ResizeError when ``trainer``'s cluster cannot be resized to ``servers`` with the ``drain`` ids removed and
    its stripes re-formed with ``code`` (None: kept; see the module docstring); else the code after."""
    drained = drain_ids(drain)
    if isinstance(servers, bool) or not isinstance(servers, (int, np.integer)):
        raise ResizeError(f"servers: expected an int, got {type(servers).__name__}")
    current = len(trainer.scheduler.servers)
    if servers < 1:
        raise ResizeError(f"servers: a cluster needs at least 1 server, got {servers}")
    new_code = code_after(trainer, code)
    if new_code is not None and servers < sum(new_code):
        k, r = new_code
        raise ResizeError(
            f"servers: the code k={k}, r={r} needs at least k + r = {k + r} servers, got {servers}; keep at least "
            f"{k + r}"
        )
    if servers == current and not drained and new_code == code_after(trainer, None):
        kept = "" if new_code is None else f" with the code k={new_code[0]}, r={new_code[1]}"
        raise ResizeError(f"servers: the cluster has {current} servers already{kept}")
    plan_ids(server_ids_of(trainer.scheduler), int(servers), drained)
    ft = getattr(trainer.strategy, "name", "none")
    if ft not in ("none", "ec"):
        raise ResizeError(f"resize: not supported with --ft {ft} yet (--ft none or ec); nothing was changed")
    bounded = [t.name for t in trainer.job.tables if t.bounded]
    if bounded:
        raise ResizeError(
            f"resize: tables {bounded} have admit / evict rules, whose row caps are shared per server; they cannot "
            f"be resized"
        )
    if trainer.scheduler.placement is not None and not trainer.strategy.reforms_on_resize:
        raise ResizeError("resize: the servers are placed by a failure domain but form no stripes to re-form")
    return new_code


def _row_bytes(rows: Dict[str, np.ndarray]) -> int:
    return int(sum(np.asarray(rows[f]).nbytes for f in ("keys", "values", "state")))


def _rows_of(rows: Dict[str, np.ndarray], mine: np.ndarray) -> Dict[str, np.ndarray]:
    return {f: np.ascontiguousarray(np.asarray(rows[f])[mine]) for f in ("keys", "values", "state")}


def _wait(trainer: ResizeTrainer, futures: List[Any]) -> List[Any]:
    answers, lost = trainer.drain(futures)
    if lost:
        raise lost[0]
    return answers


class StartedServers:
    """Servers a resize needs, started ahead of its boundary while training goes on (on Ray a server process takes
    seconds to start: not in the pause): for a count of ``before`` servers, the new ones (indices before..servers-1)
    or, for a strategy that re-forms, ``servers`` fresh ones with their placement. :meth:`take` waits for them."""

    def __init__(
        self,
        trainer: ResizeTrainer,
        servers: int,
        background: bool,
        drain: Sequence[int] = (),
        code: Optional[Tuple[int, int]] = None,
    ) -> None:
        self.before = len(trainer.scheduler.servers)
        self.step = int(trainer.step)  # the boundary they started at
        self.ids = server_ids_of(trainer.scheduler)  # the cluster they were started for
        self.code_before = trainer.strategy.stripe_code  # ... and the code it had (the placement's, code None)
        self.servers = servers
        self.drain = tuple(drain)
        self.code = code  # the re-formed stripes' (None: kept)
        self.handles: Optional[List[Any]] = None
        self.placement: Any = None
        self.error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        if background:
            self._thread = threading.Thread(target=self._start, args=(trainer,), name="xdl-ec-resize-start")
            self._thread.daemon = True
            self._thread.start()
        else:
            self._start(trainer)

    def _start(self, trainer: ResizeTrainer) -> None:
        try:
            scheduler = trainer.scheduler
            if trainer.strategy.reforms_on_resize:
                self.placement = _placement_of(trainer, self.servers, self.code)
                self.handles = scheduler.start_servers(range(self.servers), self.placement)
            else:
                kept, _ = plan_ids(self.ids, self.servers, self.drain)
                self.handles = scheduler.start_servers(range(len(kept), max(self.servers, len(kept))))
        except BaseException as err:  # noqa: BLE001 - the boundary starts them itself instead
            self.error = err

    @property
    def ready(self) -> bool:
        """Whether the start is over (:meth:`take` would not wait)."""
        return self._thread is None or not self._thread.is_alive()

    def take(self, trainer: ResizeTrainer) -> Optional["StartedServers"]:
        """Waits for the start; self when every server answered for this cluster's count now, else None (the
        caller starts them at the boundary; any started here are stopped)."""
        if self._thread is not None:
            self._thread.join()
        fits = (
            self.error is None
            and self.ids == server_ids_of(trainer.scheduler)
            and self.code_before == trainer.strategy.stripe_code
        )
        if not fits:
            self.drop(trainer)
            return None
        return self

    def drop(self, trainer: ResizeTrainer) -> None:
        """Stops servers started but not used (a refused or withdrawn resize)."""
        if self._thread is not None:
            self._thread.join()
        for handle in self.handles or []:
            trainer.backend.kill(handle)
        self.handles = None


def resize_servers(
    trainer: ResizeTrainer,
    servers: int,
    hooks: MoveHooks = NO_HOOKS,
    started: Optional[StartedServers] = None,
    drain: Sequence[int] = (),
    code: Optional[Tuple[int, int]] = None,
) -> Dict[str, Any]:
    """Resizes ``trainer``'s cluster to ``servers`` at this step boundary (see the module docstring); returns the
    resize's record: step (the first on the new count), servers before and after, rows held, ``rows_moved`` (rows
    whose route changed: the minimum any move must carry; ``moved_fraction`` of the rows), ``ideal_fraction``
    |m - n| / max(m, n) (what a perfectly balanced placement must move), ``rows_copied`` and ``bytes_copied``
    (what crossed between servers: the moved rows, or every row when the stripes are re-formed on fresh servers),
    ``restarts`` (re-forming moves started over after a fresh server was lost) and seconds (the pause). ``started``:
    the servers started ahead (:class:`StartedServers`), else they start here. ``hooks``: a test's or benchmark's
    observer, told the move's phases ("export": before the old servers are read, "load": after a table's rows are
    loaded onto the fresh servers). ``drain``: server ids that leave (their rows move to their new owners first);
    the record then gives ``drained`` and the ids after (``server_ids``), and ``ideal_fraction`` is the share of
    the route table's buckets whose owner changes. ``code``: the (k, r) the re-formed stripes take (None: kept;
    the record names ``code_before`` and ``code`` under stripes)."""
    try:
        check_target(trainer, servers, drain, code)
    except ResizeError:
        if started is not None:
            started.drop(trainer)
        raise
    if trainer.strategy.reforms_on_resize:
        _placement_of(trainer, servers, code)  # nodes too few for the new count: refused before anything moves
    code_before = trainer.strategy.stripe_code
    start = time.perf_counter()
    before = len(trainer.scheduler.servers)
    ids_before = server_ids_of(trainer.scheduler)
    kept, ids_after = plan_ids(ids_before, servers, drain)
    trainer.quiesce()
    live = [i for i, w in enumerate(trainer.live_workers()) if w is not None]
    _wait(trainer, [trainer.worker(i).settle_pulls() for i in live])
    ready = started.take(trainer) if started is not None else None
    if trainer.strategy.reforms_on_resize:
        ids_after = sorted(ids_after)  # all servers are fresh: in id order, dense again once the holes are filled
        placement = ready.placement if ready is not None else _placement_of(trainer, servers, code)
        held, moved, copied, copied_bytes, restarts = _move_onto_fresh_servers(
            trainer,
            servers,
            live,
            hooks,
            placement,
            None if ready is None else ready.handles,
            ids_after,
            drain,
            code,
        )
    else:
        held, moved, copied, copied_bytes = _move_changed_rows(
            trainer, kept, ids_after, live, None if ready is None else ready.handles
        )
        restarts = 0
    trainer.cluster = dataclasses.replace(trainer.cluster, servers=servers)
    ideal = _ideal_fraction(ids_before, kept, ids_after, servers, drain)
    return {
        "step": int(trainer.step) + 1,
        "servers_before": before,
        "servers_after": servers,
        "rows": held,
        "rows_moved": moved,
        "moved_fraction": moved / held if held else 0.0,
        "ideal_fraction": ideal,
        "drained": sorted(int(i) for i in drain),
        "server_ids": list(ids_after),
        "rows_copied": copied,
        "bytes_copied": copied_bytes,
        "restarts": restarts,
        "seconds": time.perf_counter() - start,
        **_code_fields(code_before, trainer.strategy.stripe_code),
    }


def _code_fields(before: Optional[Tuple[int, int]], after: Optional[Tuple[int, int]]) -> Dict[str, Any]:
    """A record's ``code_before`` and ``code`` ([k, r]) under stripes, nothing without them."""
    if before is None or after is None:
        return {}
    return {"code_before": [int(x) for x in before], "code": [int(x) for x in after]}


def _move_changed_rows(
    trainer: ResizeTrainer, kept: List[int], ids_after: List[int], live: List[int], ready: Optional[List[Any]] = None
) -> tuple:
    """The servers keep their shards: the cluster becomes the ``kept`` positions (in order) then new servers, with
    stable ids ``ids_after``; each row whose owner changed goes from its old server to its new one (loaded there
    before it is erased here), and the servers that leave (drained or past the new count) stop last, emptied."""
    scheduler = trainer.scheduler
    old = list(scheduler.servers)
    added = len(ids_after) - len(kept)
    if ready is not None:
        started = ready
    else:
        started = scheduler.start_servers(range(len(kept), len(ids_after))) if added > 0 else []
    handles = [old[p] for p in kept] + list(started)
    new_of_old = {p: n for n, p in enumerate(kept)}  # an old position's new one (absent: it leaves)
    dense = ids_after == list(range(len(ids_after)))
    held = moved = moved_bytes = 0
    for table in trainer.job.tables:
        exports = _wait(trainer, [Remote(h, ServerAPI).export(table.name) for h in old])
        loads, erases = [], []
        for source, rows in enumerate(exports):
            keys = np.asarray(rows["keys"], dtype=np.int64)
            held += keys.size
            owner = np.asarray(_core.server_of(keys, len(ids_after)) if dense else owner_positions(keys, ids_after))
            leaving = owner != new_of_old.get(source, -1)
            if not leaving.any():
                continue
            for dest in np.unique(owner[leaving]):
                part = _rows_of(rows, leaving & (owner == dest))
                moved += part["keys"].size
                moved_bytes += _row_bytes(part)
                loads.append(Remote(handles[int(dest)], ServerAPI).load_rows(table.name, part))
            erases.append((source, keys[leaving]))
        _wait(trainer, loads)  # every moving row is at its new owner before any old copy goes
        _wait(trainer, [Remote(old[s], ServerAPI).erase_rows(table.name, k) for s, k in erases])
    stopped = [h for p, h in enumerate(old) if p not in new_of_old]
    scheduler.arrange_servers(handles, ids_after, stopped)
    origin = list(kept) + [-1] * added
    trainer.client.set_servers(handles, None, ids_after, origin)
    _wait(trainer, [trainer.worker(i).set_servers(handles, None, ids_after, origin) for i in live])
    return held, moved, moved, moved_bytes


FRESH_ATTEMPTS = 3  # times a re-forming move starts over on fresh servers when one of them dies mid-move


def _placement_of(trainer: ResizeTrainer, servers: int, code: Optional[Tuple[int, int]] = None) -> Any:
    """The failure-domain placement of ``servers`` re-formed servers with stripes of ``code`` (None: the current
    one) (None where Ray places them): the alive nodes must hold them with at most r members of a stripe on a
    node, else ResizeError."""
    if trainer.scheduler.placement is None:
        return None
    stripes = trainer.strategy.stripe_code if code is None else code
    try:
        return plan_placement(trainer.backend, trainer.cluster.failure_domain, servers, stripes)
    except ValueError as err:
        raise ResizeError(f"resize to {servers} servers: {err}") from err


def _move_onto_fresh_servers(
    trainer: ResizeTrainer,
    servers: int,
    live: List[int],
    hooks: MoveHooks = NO_HOOKS,
    placement: Any = None,
    ready: Optional[List[Any]] = None,
    ids_after: Optional[List[int]] = None,
    drain: Sequence[int] = (),
    code: Optional[Tuple[int, int]] = None,
) -> tuple:
    """A strategy whose redundancy depends on the count (``ec``'s stripes rotate over the servers) re-forms it on
    ``servers`` fresh servers. Every row is read from the old servers while their strategy still protects them (a
    server lost then is recovered by it as at any boundary, and the resize tried again); then the old strategy
    stops, the fresh servers become the cluster under its successor (stripes over the new count), every row is
    loaded into its owner there (reaching the new parity as a push does) and made parity-durable, and only then do
    the old servers stop. A fresh server lost before that is no loss: every row is still in hand and on the old
    servers, so the move starts over on new fresh servers. ``ids_after``: the fresh servers' stable ids (None:
    0..servers-1), a drain's hole kept; a row of a ``drain`` id counts as moved even when a new server takes its id.
    ``code``: the successor's (k, r), its stripes formed with it (None: the old strategy's)."""
    scheduler = trainer.scheduler
    ids = list(range(servers)) if ids_after is None else list(ids_after)
    old_ids = server_ids_of(scheduler)
    old_strategy = trainer.strategy
    old_strategy.finish_rebuild()  # no shard under restore: every export is whole
    hooks.phase("export", trainer, None)
    exports = {
        t.name: _wait(trainer, [Remote(h, ServerAPI).export(t.name) for h in scheduler.servers])
        for t in trainer.job.tables
    }
    old_strategy.retire()
    old = list(scheduler.servers)
    restarts = 0
    while True:
        fresh = ready if ready is not None and restarts == 0 else scheduler.start_servers(range(servers), placement)
        scheduler.replace_servers(fresh, placement)
        scheduler.server_ids = None if ids == list(range(servers)) else ids
        try:
            trainer.client.set_servers(fresh, 0, ids)
            _wait(trainer, [trainer.worker(i).set_servers(fresh, 0, ids) for i in live])
            trainer.strategy = old_strategy.successor(code)
            trainer.strategy.attach(trainer.view)
            held = moved = copied_bytes = 0
            for table, parts in exports.items():
                loads = []
                for source, rows in enumerate(parts):
                    keys = np.asarray(rows["keys"], dtype=np.int64)
                    held += keys.size
                    owner = np.asarray(owner_positions(keys, ids))
                    if old_ids[source] in drain:  # every row of a drained server goes to another
                        moved += keys.size
                    else:
                        moved += int(np.count_nonzero(np.asarray(ids)[owner] != old_ids[source]))
                    for dest in np.unique(owner):
                        part = _rows_of(rows, owner == dest)
                        copied_bytes += _row_bytes(part)
                        loads.append(Remote(fresh[int(dest)], ServerAPI).load_rows(table, part))
                _wait(trainer, loads)
                hooks.phase("load", trainer, None)
            cast(ReformingStrategy, trainer.strategy).drain()  # every row durable on the new layout: the old may go
            break
        except RoleLost as err:
            if err.role != "server" or restarts + 1 >= FRESH_ATTEMPTS:
                raise
            restarts += 1
            for handle in fresh:  # the successor's agents go with them
                trainer.backend.kill(handle)
    for handle in old:
        trainer.backend.kill(handle)
    return held, moved, held, copied_bytes, restarts


# the default share of the steps' time a background move may take (docs/results/resize-2026-11-29.md: training
# keeps ~0.9 of its samples/s through the move; a larger share ends it in fewer steps at a larger loss)
RESIZE_SHARE = 0.1
FIRST_PRECOPY_ROWS = 4096  # the first pre-copy boundary's slots, before a row's copy has been timed


class _Moving:
    """A background move (``--ft ec``, :class:`~xdl_ec.ps.background_move.BackgroundMove`) and what its record
    needs: checked and started at the boundary that asks for it (the servers started ahead, if they fit)."""

    def __init__(
        self,
        trainer: ResizeTrainer,
        servers: int,
        started: Optional[StartedServers],
        drain: Sequence[int],
        hooks: MoveHooks,
        schedule: bool = False,
        request: Optional["_Request"] = None,
        code: Optional[Tuple[int, int]] = None,
    ) -> None:
        try:
            check_target(trainer, servers, drain, code)
            placement = _placement_of(trainer, servers, code)  # nodes too few for the new count: refused here
        except ResizeError:
            if started is not None:
                started.drop(trainer)
            raise
        self.schedule, self.request = schedule, request
        self.servers, self.drain = servers, tuple(drain)
        self.before = len(trainer.scheduler.servers)
        self.code_before = trainer.strategy.stripe_code
        self.ids_before = server_ids_of(trainer.scheduler)
        kept, ids_after = plan_ids(self.ids_before, servers, self.drain)
        self.kept = kept
        self.ids_after = sorted(ids_after)  # all servers are fresh: in id order, dense again once holes are filled
        ready = started.take(trainer) if started is not None else None
        if ready is not None:
            placement = ready.placement
        self.move = BackgroundMove(
            trainer,
            servers,
            self.ids_after,
            placement,
            None if ready is None else ready.handles,
            hooks,
            self.ids_before,
            self.drain,
            code,
        )

    def finish(self, trainer: ResizeTrainer) -> Optional[Dict[str, Any]]:
        """The final boundary: quiesce, the rest copied, the switch; the record (None: a fresh server was lost
        here and the pre-copy starts over)."""
        start = time.perf_counter()
        trainer.quiesce()
        live = [i for i, w in enumerate(trainer.live_workers()) if w is not None]
        _wait(trainer, [trainer.worker(i).settle_pulls() for i in live])
        figures = self.move.finish(trainer, live)
        if figures is None:
            return None
        trainer.cluster = dataclasses.replace(trainer.cluster, servers=self.servers)
        move = self.move
        held, moved = figures["rows"], figures["rows_moved"]
        pause = time.perf_counter() - start
        return {
            "step": int(trainer.step) + 1,
            "servers_before": self.before,
            "servers_after": self.servers,
            "rows": held,
            "rows_moved": moved,
            "moved_fraction": moved / held if held else 0.0,
            "ideal_fraction": _ideal_fraction(self.ids_before, self.kept, self.ids_after, self.servers, self.drain),
            "drained": sorted(int(i) for i in self.drain),
            "server_ids": list(self.ids_after),
            "rows_copied": move.rows_precopied + figures["rows_final"],
            "bytes_copied": move.bytes_copied,
            "restarts": move.restarts,
            "seconds": move.precopy_seconds + pause,
            "started_step": move.started_step,
            "precopy_boundaries": move.boundaries,
            "precopy_seconds": move.precopy_seconds,
            "rows_precopied": move.rows_precopied,
            "rows_recopied": figures["rows_recopied"],
            "rows_final": figures["rows_final"],
            "shards_copied_whole": figures["shards_copied_whole"],
            "final_pause_s": pause,
            "final_pause_predicted_s": float(move.final_reserve or 0.0),
            **_code_fields(self.code_before, trainer.strategy.stripe_code),
        }


def _ideal_fraction(ids_before: List[int], kept: List[int], ids_after: List[int], servers: int, drain: Any) -> float:
    """|m - n| / max(m, n), or with a drain the share of the route table's buckets whose owner changes."""
    if drain:  # buckets whose owner is another server after: another id, or a drained id given to a new server
        old_owner = np.asarray(_core.RouteTable(ids_before).owners)
        left = ~np.isin(old_owner, [ids_before[p] for p in kept])
        return float(np.mean((old_owner != np.asarray(_core.RouteTable(ids_after).owners)) | left))
    before = len(ids_before)
    return abs(servers - before) / max(servers, before)


class _Request:
    """A resize asked by :meth:`Resizer.request`, answered by the training thread at a boundary."""

    def __init__(self, servers: int, drain: Tuple[int, ...] = (), code: Optional[Tuple[int, int]] = None) -> None:
        self.servers = servers
        self.drain = drain
        self.code = code  # the re-formed stripes' (k, r), None: kept
        self.done = threading.Event()
        self.started = False  # the training thread took it (set under the Resizer's lock)
        self.servers_started: Optional[StartedServers] = None  # started by the asker, ahead of the boundary
        self.ready = threading.Event()  # its servers are started: a boundary may take it
        self.record: Optional[Dict[str, Any]] = None
        self.error: Optional[BaseException] = None


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
        self.resize_share = RESIZE_SHARE if resize_share is None else float(resize_share)
        self.hooks = hooks
        self._lock = threading.Lock()
        self._request: Optional[_Request] = None
        self._trainer: Optional[ResizeTrainer] = None
        self._closed = False
        self._next: Optional[StartedServers] = None  # the next scheduled resize's servers, starting ahead
        self._move: Optional[_Moving] = None  # a background move under way
        self._step_seconds: Deque[float] = collections.deque(maxlen=32)  # recent steps, boundaries' work excluded
        self._boundary_end: Optional[float] = None
        self.records: List[Dict[str, Any]] = []

    def attach(self, trainer: ResizeTrainer) -> None:
        """The run whose servers this resizes (before its first step)."""
        self._trainer = trainer

    @property
    def active(self) -> bool:
        """Whether a run is attached and not ended (:meth:`request` may be asked)."""
        return self._trainer is not None and not self._closed

    def validate(self, servers: int, code: Optional[tuple], total_steps: Optional[int]) -> None:
        """Checks the schedule against a cluster of ``servers`` (stripes ``code``) and the run's steps: ValueError
        names the flag and the entry."""
        count = servers
        ids = list(range(servers))
        for r in self._schedule:
            text = f"--resize-at {r}"
            if total_steps is not None and r.step > total_steps:
                raise ValueError(f"{text}: the run has only {total_steps} steps; pick a step in 2..{total_steps}")
            if r.code is not None and code is None:
                raise ValueError(f"{text}: a code needs --ft ec (code=K,R re-forms the stripes; this run has none)")
            new_code = code if r.code is None else r.code
            if new_code is not None and r.servers < sum(new_code):
                raise ValueError(
                    f"{text}: the code k={new_code[0]}, r={new_code[1]} needs at least {sum(new_code)} servers"
                )
            if r.servers == count and not r.drain and new_code == code:
                same = "" if code is None else f" with the code k={code[0]}, r={code[1]}"
                raise ValueError(f"{text}: the cluster has {count} servers then already{same}")
            try:
                kept, after = plan_ids(ids, r.servers, r.drain)
            except ResizeError as err:
                raise ValueError(f"{text}: {err}") from None
            ids = [ids[p] for p in kept] + after[len(kept) :]
            count, code = r.servers, new_code

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
            request = self._request = _Request(int(servers), drain_ids(drain), None if code is None else new_code)
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
        now = time.perf_counter()
        if self._boundary_end is not None:
            self._step_seconds.append(now - self._boundary_end)
        try:
            self._at_boundary(trainer)
        finally:
            self._boundary_end = time.perf_counter()

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
                self._move = _Moving(trainer, due.servers, started, due.drain, self.hooks, schedule=True, code=due.code)
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
                self._move = _Moving(
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

    def _budget(self, move: BackgroundMove) -> Dict[str, Any]:
        """What the pre-copy may do at this boundary: the hooks' fixed rows or seconds, else ``resize_share`` of
        the median step's seconds (the first boundary, before a step was timed: FIRST_PRECOPY_ROWS records)."""
        if self.hooks.rows is not None:
            return {"rows": self.hooks.rows}
        if self.hooks.seconds is not None:
            return {"seconds": self.hooks.seconds}
        if not self._step_seconds:
            return {"rows": FIRST_PRECOPY_ROWS}
        return {"seconds": self.resize_share * statistics.median(self._step_seconds)}

    def _advance(self, trainer: ResizeTrainer) -> None:
        """The move's part at this boundary: a pre-copy's share, or the final boundary (every slot read once, or
        the run's last boundary); a finished move's record is kept and answered."""
        moving = self._move
        assert moving is not None
        try:
            last = trainer.total_steps is not None and trainer.step >= trainer.total_steps
            if not (moving.move.precopied or last):
                moving.move.precopy(trainer, **self._budget(moving.move))
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
