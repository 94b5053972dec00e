"""ServerAdmin: a parameter server's administration: what the driver asks of it besides the steps' pulls and
pushes: taking a dead server's place, exporting, loading and erasing rows (a resume, a resize), saves, a backstop's
cuts, slot reads of a resize's copy, and its counters.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

import numpy as np

from xdl_ec.keep.checkpoint import ShardCheckpoint
from xdl_ec.ps.agent import AgentHost
from xdl_ec.ps.hosted_agent import HostedAgent
from xdl_ec.ps.server_shards import ServerShards
from xdl_ec.settings import checks
from xdl_ec.sparse.table import as_cells, as_keys, as_rows


class ServerAdmin:
    """The administration of ``host`` (whose ``table`` dies first when a crash was asked) over its ``shards``;
    rows change through its ``hosted`` agent (under ``ec`` they reach parity as a push's do)."""

    def __init__(self, host: AgentHost, shards: ServerShards, hosted: HostedAgent) -> None:
        self._host, self._shards, self._hosted = host, shards, hosted
        self._key_order: Dict[str, np.ndarray] = {}  # per table, the sorted keys of a key-order export under way

    def take_index(self, index: int) -> None:
        """A spare server becomes server ``index`` (replacing a dead one); only while it has served nothing."""
        index = checks.non_negative_int("index", index)
        with self._shards.lock:
            if self._hosted.attached or self._shards.held():
                raise ValueError(
                    f"take_index: server {self._shards.index} already holds state; only an idle spare can become "
                    f"server {index}"
                )
            self._shards.set_index(index)

    def export(self, table: str) -> Dict[str, np.ndarray]:
        """Every live row of the table: dict(keys, values, state)."""
        return self._host.table(table).export()

    def export_key_order(self, table: str, start: int, count: int) -> Dict[str, Any]:
        """Rows ``start`` to ``start + count`` of ``table`` in ascending key order (dict(keys, values, state), and
        ``rows``: how many it has): a key-order export a chunk at a time (the streamed digest). ``start`` 0 takes the
        table's keys afresh (8 bytes a row, held here until the chunk that reaches the end)."""
        start, count = checks.non_negative_int("start", start), checks.positive_int("count", count)
        t = self._host.table(table)
        keys = self._key_order.get(table)
        if start == 0 or keys is None:
            if start != 0:
                raise ValueError(
                    f"export_key_order: table {table!r} has no key-order export under way at row {start}; start one "
                    f"at row 0"
                )
            keys = self._key_order[table] = t.sorted_keys()
        out: Dict[str, Any] = t.export_keys(keys[start : start + count])
        out["rows"] = int(keys.size)
        if start + count >= keys.size:
            del self._key_order[table]
        return out

    def size(self, table: str) -> int:
        return len(self._host.table(table))

    def load_rows(self, table: str, rows: Mapping[str, np.ndarray]) -> int:
        """Inserts exported rows (keys, values, state) into ``table`` through the agent (a resume re-sharding a
        saved table, a resize's move); returns how many."""
        with self._shards.lock:
            t = self._host.table(table)
            keys = as_keys(rows["keys"], "rows['keys']")
            values = as_rows(rows["values"], keys.size, t.dim, "rows['values']", "dim")
            state = as_rows(rows["state"], keys.size, t.state_floats, "rows['state']", "state_floats")
            if t.config.bounded and "uses" in rows:  # the words and pending ids go in the load's own deltas
                none = np.zeros(0, np.int64)
                t.shard.stage_load_words(
                    keys,
                    np.asarray(rows["uses"], np.uint32),
                    as_keys(rows["last_step"]),
                    as_keys(rows.get("pending_keys", none)),
                    np.asarray(rows.get("pending_uses", none), np.uint32),
                    as_keys(rows.get("pending_last_step", none)),
                )
            if "sketch" in rows and t.shard.sketch_slots:  # a sketch counter's cells too (added: a copy here)
                t.shard.stage_sketch(as_cells(rows["sketch"]))
            self._hosted.agent.load_rows(self._host, t, keys, values, state)
            self._shards.new_epoch()
            return int(keys.size)

    def create_rows(self, table: str, keys: np.ndarray) -> int:
        """Creates the rows ``keys`` lack (a preload, :mod:`xdl_ec.ps.row_preload`) through the agent's pull, the
        path a step's first pull of a key takes (its initializer's row; a mutation like a push); the rows read are
        dropped. Returns how many keys were asked."""
        with self._shards.lock:
            t = self._host.table(table)
            keys = as_keys(keys)
            self._hosted.agent.pull(self._host, t, keys)
            self._shards.new_epoch()
            return int(keys.size)

    def erase_rows(self, table: str, keys: np.ndarray) -> int:
        """Removes the rows of ``keys`` (rows that moved to another server in a resize, :mod:`xdl_ec.ps.resize`)
        through the agent; returns how many."""
        with self._shards.lock:
            t = self._host.table(table)
            erased = self._hosted.agent.erase_rows(self._host, t, as_keys(keys))
            self._shards.new_epoch()
            return int(erased)

    def save(self, directory: str, step: int) -> int:
        """Writes every table of this server into ``directory`` as a ShardCheckpoint of ``step`` (a job save's
        part, published by the driver's commit); returns the bytes written. The caller has quiesced the job."""
        with self._shards.lock:
            part = ShardCheckpoint.write(directory, self._shards.all(), step=step, atomic=False)
        return part.nbytes()

    def take_changes(self, full: bool) -> Dict[str, Any]:
        """An incremental backstop's cut (at a quiescent point): ``{"full": bool, "tables": {name: rows}}`` with
        the rows changed since the previous cut, or every row when ``full`` is asked or this server has not been
        tracking changes (a fresh or rebuilt server), which starts tracking from here. A bounded table (admit /
        evict rules) is always cut whole, with its rows' eviction words and its pending ids: an increment would
        carry neither the rows its passes freed nor the words."""
        with self._shards.lock:
            tables = self._shards.all()
            whole = full or not all(t.shard.tracking_dirty for t in tables.values())
            whole = whole or any(t.config.bounded for t in tables.values())
            return {"full": whole, "tables": {name: t.cut(whole) for name, t in tables.items()}}

    def slot_rows(self, table: str, slots: Any) -> Dict[str, Any]:
        """The live rows of ``table`` in the slots ``slots`` (ascending slot numbers, or a (start, count) range):
        keys, values, state, clocks, slots, and ``end``: one past the last slot that may hold a row. A resize's
        background copy reads the shard a bounded range at a time (:mod:`xdl_ec.ps.background_move`)."""
        with self._shards.lock:
            t = self._host.table(table)
            if isinstance(slots, tuple):
                start, count = (int(v) for v in slots)
                slots = np.arange(start, max(start, min(start + count, t.slot_end)), dtype=np.int64)
            out: Dict[str, Any] = t.slot_rows(slots)
            out["end"] = t.slot_end
            return out

    def stats(self) -> Dict[str, Any]:
        """Counters (bytes in/out, requests (calls of pull, push, push_pull, pull_stale), pulls, pushes (table
        parts), keys; native_requests: the requests of those the core served without the interpreter), rows per
        table and pending sync steps."""
        shards = self._shards
        with shards.lock:
            out: Dict[str, Any] = dict(shards.counters)
            native = shards.core.counters()  # what the native path served
            for name, count in native.items():
                out[name] += count
            out["native_requests"] = native["requests"]
            out["pending_steps"] = len(shards.sync)
        tables = shards.all()
        out["index"] = shards.index
        out["rows"] = {name: len(t) for name, t in tables.items()}
        bounded = {name: t.bounded_report() for name, t in tables.items() if t.config.bounded}
        if bounded:  # tables with admit / evict rules: their part of the report's "tables"
            out["tables"] = bounded
        if shards.memory is not None:  # the disk tier's counts (xdl_ec.sparse.memory_budget) and the process's memory
            out["tier"] = {name: t.tier_counts() for name, t in tables.items()}
            out["memory"] = shards.memory.report()
        return out
