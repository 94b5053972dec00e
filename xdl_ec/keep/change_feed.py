"""ChangeFeed: the rows changed since a consumer's previous take, for every consumer of one run.

Each shard keeps one set of dirty slots (the rows changed since its last ``take_dirty``); a take empties it. A
run may have two consumers of it, the backstop's increments (:mod:`xdl_ec.keep.backstop`) and the serving deltas
(:mod:`xdl_ec.job.export_schedule`): the feed takes from the shards for whichever asks and keeps what the others
have not seen yet (per server, a key's newest row wins), so each gets every row changed since its own previous
take. The cost stays the rows changed, not the tables (a table cut whole replaces what a consumer had pending of it).

A take returns, per server, ``{"full": bool, "tables": {name: rows}}`` as
:meth:`~xdl_ec.ps.server.ParameterServer.take_changes` does (``full``: every row of that server, which a consumer's
first take always is). A run in this process (:class:`~xdl_ec.job.local_run.LocalRun`) is one "server" whose tables
the feed reads itself, by the same rules.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

Changes = List[Dict[str, Any]]

_feeds: "weakref.WeakKeyDictionary[Any, ChangeFeed]" = weakref.WeakKeyDictionary()


class ChangeFeed:
    """The changes of one run (a PSTrainer, or a LocalRun) for each of its consumers (see the module docstring)."""

    def __init__(self, run: Any) -> None:
        self._run = weakref.ref(run)
        self._pending: Dict[int, Optional[Changes]] = {}  # id(consumer): what it has not taken yet

    @classmethod
    def of(cls, run: Any) -> "ChangeFeed":
        """The run's feed (made on first use; it goes with the run)."""
        feed = _feeds.get(run)
        if feed is None:
            feed = _feeds[run] = cls(run)
        return feed

    def take(self, consumer: object, full: bool) -> Changes:
        """The rows changed since ``consumer``'s previous take (every row when ``full``, or on its first take)."""
        first = id(consumer) not in self._pending
        changes = self._take_from_run(full or first)
        for other, pending in self._pending.items():
            if other != id(consumer):
                self._pending[other] = changes if pending is None else _merged(pending, changes)
        pending = self._pending.get(id(consumer))
        self._pending[id(consumer)] = None
        return changes if pending is None else _merged(pending, changes)

    def leave(self, consumer: object) -> None:
        """``consumer`` takes no more: the feed stops keeping rows for it."""
        self._pending.pop(id(consumer), None)

    def _take_from_run(self, full: bool) -> Changes:
        run = self._run()
        if run is None:
            raise RuntimeError("change feed: its run is gone")
        if hasattr(run, "take_changes"):
            return run.take_changes(full)
        return [local_changes(run.tables.tables, full)]


def local_changes(tables: Mapping[str, Any], full: bool) -> Dict[str, Any]:
    """The cut of tables held in this process (EmbeddingTables): every row when ``full`` or when a table has not
    been tracking, else the dirty rows; a bounded table (admit / evict rules) whole with its eviction words and pending
    ids, as a server cuts it (an eviction pass frees rows its dirty set cannot name). Unlike a server's cut, the
    other tables stay incremental beside a bounded one (no backstop reads this cut, whose increments could not hold
    the words): ``whole_tables`` names the tables cut whole."""
    out, whole = {}, []
    for name, t in tables.items():
        cut_whole = full or not t.shard.tracking_dirty or t.config.bounded
        if cut_whole:
            whole.append(name)
        out[name] = t.cut(cut_whole)
    return {"full": len(whole) == len(out), "tables": out, "whole_tables": whole}


def _merged(older: Changes, newer: Changes) -> Changes:
    """``older`` then ``newer``, per server: a full cut replaces what came before it; else each table's rows are
    joined, a key's newer row winning."""
    if len(older) != len(newer):  # another set of servers: only the newer cut describes them
        return newer
    out = []
    for old, new in zip(older, newer):
        if new["full"]:
            out.append(new)
            continue
        whole = set(new.get("whole_tables", ()))
        tables = {
            name: rows if name in whole else _joined(old["tables"].get(name), rows)
            for name, rows in new["tables"].items()
        }
        out.append(
            {"full": old["full"], "tables": tables, "whole_tables": sorted(whole | set(old.get("whole_tables", ())))}
        )
    return out


def _joined(old: Optional[Dict[str, np.ndarray]], new: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    if old is None or not len(old["keys"]):
        return new
    if not len(new["keys"]):
        return old
    count = len(old["keys"]) + len(new["keys"])
    keys = np.concatenate([old["keys"], new["keys"]])
    # the last occurrence of each key: unique over the reversed keys gives each key's first index there
    _, first_reversed = np.unique(keys[::-1], return_index=True)
    keep = np.sort(count - 1 - first_reversed)
    out = {}
    for field, values in new.items():
        previous = old.get(field)
        if previous is not None and len(values) == len(new["keys"]) and len(previous) == len(old["keys"]):
            out[field] = np.concatenate([previous, values])[keep]
    return out
