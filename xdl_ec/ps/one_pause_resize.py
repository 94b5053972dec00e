"""resize_servers: a resize in one pause at a step boundary (``--ft none``, or ``--ft ec`` with a resize share of
0): the cluster stands while the rows whose owner changes move, and only then do the workers and the driver route
by the new layout."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from xdl_ec import _core
from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.client import owner_positions
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.move_hooks import NO_HOOKS, MoveHooks
from xdl_ec.ps.placement import Placement
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.resize_error import ResizeError
from xdl_ec.ps.resize_plan import code_fields, ideal_fraction, placement_of, plan_ids, server_ids_of
from xdl_ec.ps.resize_target import check_target
from xdl_ec.ps.resize_trainer import ReformingStrategy, ResizeTrainer, wait_answers
from xdl_ec.ps.started_servers import StartedServers

__all__ = ["resize_servers"]

FRESH_ATTEMPTS = 3  # times a re-forming move starts over on fresh servers when one of them dies mid-move


def _row_bytes(rows: Dict[str, np.ndarray]) -> int:
    return int(sum(np.asarray(rows[f]).nbytes for f in ("keys", "values", "state")))


def _rows_of(rows: Dict[str, np.ndarray], mine: np.ndarray) -> Dict[str, np.ndarray]:
    return {f: np.ascontiguousarray(np.asarray(rows[f])[mine]) for f in ("keys", "values", "state")}


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
        placement_of(trainer, servers, code)  # nodes too few for the new count: refused before anything moves
    code_before = trainer.strategy.stripe_code
    start = time.perf_counter()
    before = len(trainer.scheduler.servers)
    ids_before = server_ids_of(trainer.scheduler)
    kept, ids_after = plan_ids(ids_before, servers, drain)
    trainer.quiesce()
    live = [i for i, w in enumerate(trainer.live_workers()) if w is not None]
    wait_answers(trainer, [trainer.worker(i).settle_pulls() for i in live])
    ready = started.take(trainer) if started is not None else None
    if trainer.strategy.reforms_on_resize:
        ids_after = sorted(ids_after)  # all servers are fresh: in id order, dense again once the holes are filled
        placement = ready.placement if ready is not None else placement_of(trainer, servers, code)
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
    ideal = ideal_fraction(ids_before, kept, ids_after, servers, drain)
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
        **code_fields(code_before, trainer.strategy.stripe_code),
    }


def _move_changed_rows(
    trainer: ResizeTrainer, kept: List[int], ids_after: List[int], live: List[int], ready: Optional[List[Handle]] = None
) -> Tuple[int, int, int, int]:
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
        exports = wait_answers(trainer, [Remote(h, ServerAPI).export(table.name) for h in old])
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
        wait_answers(trainer, loads)  # every moving row is at its new owner before any old copy goes
        wait_answers(trainer, [Remote(old[s], ServerAPI).erase_rows(table.name, k) for s, k in erases])
    stopped = [h for p, h in enumerate(old) if p not in new_of_old]
    scheduler.arrange_servers(handles, ids_after, stopped)
    origin = list(kept) + [-1] * added
    trainer.client.set_servers(handles, None, ids_after, origin)
    wait_answers(trainer, [trainer.worker(i).set_servers(handles, None, ids_after, origin) for i in live])
    return held, moved, moved, moved_bytes


def _move_onto_fresh_servers(
    trainer: ResizeTrainer,
    servers: int,
    live: List[int],
    hooks: MoveHooks = NO_HOOKS,
    placement: Optional[Placement] = None,
    ready: Optional[List[Handle]] = None,
    ids_after: Optional[List[int]] = None,
    drain: Sequence[int] = (),
    code: Optional[Tuple[int, int]] = None,
) -> Tuple[int, int, int, int, int]:
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
        t.name: wait_answers(trainer, [Remote(h, ServerAPI).export(t.name) for h in scheduler.servers])
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
            wait_answers(trainer, [trainer.worker(i).set_servers(fresh, 0, ids) for i in live])
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
                wait_answers(trainer, loads)
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
