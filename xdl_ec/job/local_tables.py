"""LocalTables: a job's tables in this process, behind the same pull/push calls a worker makes to parameter
servers (:class:`~xdl_ec.ps.client.PSClient`), so one worker trains in one process with the same code and the
same arithmetic as on a cluster (``model_digest`` equal to a one-worker cluster run's). A table group's entry
(:class:`~xdl_ec.model.table_groups.GroupKeys`) is pulled and pushed by ONE native call over its tables' shards
(``_core.ShardGroup``), each table applying its own part with its own optimizer and rules.

With a memory budget the tables hold a :class:`~xdl_ec.sparse.disk_reserve.DiskReserve` in the spill dir: a table
call whose disk-tier write fails (a full disk; the call changed nothing) gives the reserve up and runs again on its
room, and :attr:`LocalTables.disk_full` tells the run to stop at the boundary after the step (see
:mod:`xdl_ec.sparse.disk_tier_full`). A group's call is not run again: its tables apply one after another, so a
failure may follow a part already applied."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar

import numpy as np

from xdl_ec import _core
from xdl_ec.model.table_groups import GroupKeys, TableGroup
from xdl_ec.sparse.disk_reserve import RESERVE_SLACK, DiskReserve
from xdl_ec.sparse.disk_tier_full import spill_dir_of
from xdl_ec.sparse.memory_budget import MemoryBudget
from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.sparse.table_config import Table

T = TypeVar("T")
LOAD_PIECE = 4096  # rows per load of LocalTables.loading


class _Done:
    """An answer already computed (the pull ran on the caller's thread)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self, timeout: Any = None) -> Any:
        return self._value

    def done(self) -> bool:
        return True


class LocalTables:
    """One EmbeddingTable per Table of a job."""

    timeout = None
    num_servers = 1
    steps_groups = True

    def __init__(self, tables: Sequence[Table], memory: Optional[MemoryBudget] = None, reserve: bool = True) -> None:
        """``memory``: the process's budget shared over the tables, the rest of their rows on disk; ``reserve``
        False: no disk reserve (tables nothing trains on: a trained model's copy of a budgeted run's rows)."""
        shares = {} if memory is None else memory.shares(tables)
        spill_dir = None if memory is None else memory.spill_dir
        self.tables: Dict[str, EmbeddingTable] = {
            t.name: EmbeddingTable.from_config(t, memory_budget=shares.get(t.name, 0), spill_dir=spill_dir)
            for t in tables
        }
        self.bytes_pulled = self.bytes_requested = self.bytes_pushed = 0
        self._groups: Dict[TableGroup, Any] = {}  # each group's _core.ShardGroup, made at its first call
        self.reserve: Optional[DiskReserve] = None
        if memory is not None and reserve:
            try:
                self.reserve = DiskReserve(memory.spill_dir, memory.budget_bytes + RESERVE_SLACK)
            except BaseException:
                self.close()
                raise
        # (spill dir, the core's message) of the first failed disk-tier write: the run stops after this step
        self.disk_full: Optional[Tuple[str, str]] = None

    def _tiered(self, call: Callable[[], T], again: bool = True) -> T:
        """``call()``; after a failed disk-tier write (which changed nothing), once more on the reserve's room when
        ``again`` and the reserve is still held (noting :attr:`disk_full` either way)."""
        try:
            return call()
        except RuntimeError as err:
            spill_dir = spill_dir_of(err)
            if spill_dir is None:
                raise
            if self.disk_full is None:
                self.disk_full = (spill_dir, str(err))
            if not again or self.reserve is None or not self.reserve.release():
                raise
        return call()

    def _group(self, group: TableGroup) -> Any:
        shards = self._groups.get(group)
        if shards is None:
            shards = self._groups[group] = _core.ShardGroup([self.tables[t].shard for t in group.tables])
        return shards

    def pull_async(self, requests: Mapping[str, Tuple[Any, int]]) -> _Done:
        return _Done(self.pull(requests))

    def pull(self, requests: Mapping[str, Tuple[Any, int]]) -> Dict[str, np.ndarray]:
        return {
            t: self._tiered(partial(self._group(keys.group).pull, keys.keys, keys.offsets), again=False)
            if isinstance(keys, GroupKeys)
            else self._tiered(partial(self.tables[t].pull, keys))
            for t, (keys, _) in requests.items()
        }

    def find_rows(self, keys: Mapping[str, np.ndarray]) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        return {t: self.tables[t].find(k) for t, k in keys.items()}  # evaluation's batches are never grouped

    def push_async(
        self,
        grads: Mapping[str, Tuple[Any, np.ndarray]],
        step: int,
        participants: int = 1,
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> List[Any]:
        self.push(grads, step, participants, ttl_before)
        return []

    def push(
        self,
        grads: Mapping[str, Tuple[Any, np.ndarray]],
        step: int,
        participants: int = 1,
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> List[Any]:
        cutoffs = ttl_before or {}
        for t, (keys, table_grads) in grads.items():
            if isinstance(keys, GroupKeys):
                group = keys.group
                ttl = np.array([cutoffs.get(name, 0) for name in group.tables], dtype=np.int64) if cutoffs else None
                self._tiered(partial(self._group(group).push, keys.keys, table_grads, keys.offsets, step, ttl), False)
            else:
                push = partial(self.tables[t].push, keys, table_grads, step=step, ttl_before=cutoffs.get(t, 0))
                self._tiered(push)
        return []

    def note_acks(self, futures: Any, acks: Any) -> None:
        pass

    def sent_seqs(self) -> List[int]:
        return []

    def loading(self, table: str, chunks: Iterable[Mapping[str, np.ndarray]]) -> Iterator[Mapping[str, np.ndarray]]:
        """``chunks`` (rows as ``export()`` gives them) passed on, each loaded into ``table`` first: a copy taken
        while the rows stream past (a budgeted cluster run's trained model, as its digest reads them)."""
        into = self.tables[table]
        for chunk in chunks:
            # loaded in pieces: a tiered table's load makes its rows resident together, a piece stays near the budget
            for start in range(0, len(chunk["keys"]), LOAD_PIECE):
                end = start + LOAD_PIECE
                into.load(chunk["keys"][start:end], chunk["values"][start:end], chunk["state"][start:end])
            yield chunk

    def exports(self) -> List[List[Dict[str, np.ndarray]]]:
        """Per table (declared order), its one export: what the model digest hashes."""
        return [[t.export()] for t in self.tables.values()]

    def close(self) -> None:
        for t in self.tables.values():
            t.close()
        if self.reserve is not None:
            self.reserve.close()
