"""ServerShards: what a parameter server holds: one embedding shard per table, the native core serving them, the
sync steps still buffered, its counters and its cache epoch.

The shards, each worker's last push seq and the lock live in the native :class:`xdl_ec._core.ShardServer`
(``core``) too, so that a one-worker step arriving over a direct link is served there without the interpreter
(:meth:`~xdl_ec.ps.server.ParameterServer.serve_link`).
"""

from __future__ import annotations

import secrets
from typing import Any, Dict, Optional

from xdl_ec import _core
from xdl_ec.ps.sync_steps import SyncSteps
from xdl_ec.settings import checks
from xdl_ec.sparse.disk_reserve import RESERVE_SLACK, DiskReserve
from xdl_ec.sparse.memory_budget import MemoryBudget
from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.sparse.table_config import Table


class ServerShards:
    """The shards of server ``index`` of a cluster of ``servers`` (a table's Evict(max_rows) is shared evenly over
    them). ``memory``: the server's budget, shared evenly over ``tables`` shards (the rest of their rows on disk),
    and the room it holds in the spill dir to stop cleanly if the disk fills (a full dir is an error here, before
    training: :class:`~xdl_ec.sparse.disk_reserve.DiskReserve`)."""

    def __init__(self, index: int, servers: int, memory: Optional[MemoryBudget] = None, tables: int = 1) -> None:
        self.index = index
        self.servers = servers
        self.memory = memory
        self._table_budget = 0 if memory is None else memory.share(tables)
        self.reserve = None if memory is None else DiskReserve(memory.spill_dir, memory.budget_bytes + RESERVE_SLACK)
        self._tables: Dict[str, EmbeddingTable] = {}
        self.core = _core.ShardServer(index)
        self.lock = self.core.lock  # reentrant, as threading.RLock
        self.sync = SyncSteps()
        # Caching workers keep rows with their clocks; rows changed other than by a pull or push (a load, a
        # rollback, a fresh server) could repeat a clock with other bytes, so such a change starts a new epoch
        # and copies from an older one are not trusted (see ParameterServer.pull_stale).
        self.epoch = 0
        self.new_epoch()
        self.counters = {
            "bytes_in": 0,
            "bytes_out": 0,
            "pulls": 0,
            "pushes": 0,
            "keys_pulled": 0,
            "keys_pushed": 0,
            "steps_applied": 0,
            "requests": 0,
        }

    def set_index(self, index: int) -> None:
        self.index = self.core.index = index

    def create(self, table: Table) -> None:
        """Adds a table's (empty) shard; ValueError when a table of that name exists."""
        checks.instance("table", table, Table)
        with self.lock:
            if table.name in self._tables:
                raise ValueError(f"table {table.name!r} already exists on server {self.index}")
            self._tables[table.name] = EmbeddingTable.from_config(
                table,
                self.servers,
                memory_budget=self._table_budget,
                spill_dir=None if self.memory is None else self.memory.spill_dir,
            )
            self.core.set_table(table.name, self._tables[table.name].shard)

    def get(self, name: str) -> EmbeddingTable:
        """The shard of table ``name``; ValueError naming the tables there when it has none."""
        table = self._tables.get(name)
        if table is None:
            raise ValueError(f"table: server {self.index} has no table {name!r} (tables: {sorted(self._tables)})")
        return table

    def all(self) -> Dict[str, EmbeddingTable]:
        """The shards by table name."""
        return dict(self._tables)

    def held(self) -> bool:
        """Whether this server holds state: rows, or a push applied."""
        return bool(self.core.seqs()) or any(len(t) for t in self._tables.values())

    def replace(self, tables: Dict[str, EmbeddingTable]) -> None:
        """Swaps in restored shards (same names) and drops sync pushes still buffered; the old shards are closed."""
        unknown = sorted(set(tables) - set(self._tables))
        if unknown:
            raise ValueError(f"tables: server {self.index} has no tables {unknown} (tables: {sorted(self._tables)})")
        for name, table in tables.items():
            old, self._tables[name] = self._tables[name], table
            self.core.set_table(name, table.shard)
            if old is not table:
                old.close()
        self.sync.clear()
        self.new_epoch()

    def new_epoch(self) -> None:
        self.epoch = secrets.randbits(62) + 1
        self.core.set_epoch(self.epoch)

    def cache_epoch(self) -> int:
        """The epoch a caching worker's copies are checked against: :attr:`epoch` moved on by every eviction pass
        of a bounded table that freed rows (an evicted row inserted again restarts at the initial clock, so a
        cached clock could match other bytes); the epoch itself while no pass freed anything. The native path
        (ShardServer) answers the same."""
        generations = sum(t.shard.eviction_generation for t in self._tables.values())
        return int(_core.epoch_after_evictions(self.epoch, generations))

    def set_native(self, enabled: bool, forwarder: Any) -> None:
        """Lets the core serve one-worker steps itself (reporting their mutations to ``forwarder``), or not."""
        self.core.set_native(bool(enabled), forwarder)

    def close(self) -> None:
        """Drops the shards from the core and closes them (the caller holds the lock)."""
        self.core.set_native(False, None)
        self.core.drop_tables()
        for t in self._tables.values():
            t.close()
        self._tables.clear()
        self.sync.clear()
        if self.reserve is not None:
            self.reserve.close()
