"""LocalTables: a job's tables in this process, behind the same pull/push calls a worker makes to parameter
servers (:class:`~xdl_ec.ps.client.PSClient`), so one worker trains in one process with the same code and the
same arithmetic as on a cluster (``model_digest`` equal to a one-worker cluster run's)."""

from __future__ import annotations

import concurrent.futures
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.sparse.table_config import Table


class _Done:
    """An answer already computed (the pull ran on the caller's thread)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self, timeout: Any = None) -> Any:
        return self._value

    def done(self) -> bool:
        return True


class _Rows:
    """The rows of a :meth:`LocalTables.push_pull_async`, pulled on the tables' thread after its push."""

    __slots__ = ("_future",)

    def __init__(self, future: "concurrent.futures.Future[Dict[str, np.ndarray]]") -> None:
        self._future = future

    def result(self, timeout: Any = None) -> Dict[str, np.ndarray]:
        return self._future.result(timeout)

    def done(self) -> bool:
        return self._future.done()


class LocalTables:
    """One EmbeddingTable per Table of a job."""

    timeout = None
    num_servers = 1
    # a step's push and the next step's pull run together, in that order, on the tables' own thread: the worker
    # combines them as it does a parameter server's push_pull (exact: nothing else reaches the tables between)
    combines_push_pull = True

    def __init__(self, tables: Sequence[Table]) -> None:
        self.tables: Dict[str, EmbeddingTable] = {t.name: EmbeddingTable.from_config(t) for t in tables}
        self.bytes_pulled = self.bytes_requested = self.bytes_pushed = 0
        self._thread: Optional[concurrent.futures.ThreadPoolExecutor] = None  # started at the first push_pull

    def push_pull_async(
        self,
        grads: Mapping[str, Tuple[Any, np.ndarray]],
        step: int,
        requests: Mapping[str, Tuple[Any, int]],
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> Tuple[List[Any], _Rows]:
        """:meth:`push` of ``grads`` then :meth:`pull` of ``requests``, on the tables' thread while the caller goes
        on (the C++ push and pull release the GIL): ([the push's future], the rows in flight), as
        :meth:`PSClient.push_pull_async <xdl_ec.ps.client.PSClient.push_pull_async>` answers."""
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xdl-ec-tables")

        def push_then_pull() -> Dict[str, np.ndarray]:
            self.push(grads, step, 1, ttl_before)
            return self.pull(requests)

        future = self._thread.submit(push_then_pull)
        return [future], _Rows(future)

    def settle(self) -> None:
        """Waits until a push_pull in flight has run (its error, if any, stays with its futures): the tables are
        then the caller's to read."""
        if self._thread is not None:
            concurrent.futures.wait([self._thread.submit(lambda: None)])

    def pull_async(self, requests: Mapping[str, Tuple[Any, int]]) -> _Done:
        return _Done(self.pull(requests))

    def pull(self, requests: Mapping[str, Tuple[Any, int]]) -> Dict[str, np.ndarray]:
        return {t: self.tables[t].pull(keys) for t, (keys, _) in requests.items()}

    def find_rows(self, keys: Mapping[str, np.ndarray]) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        return {t: self.tables[t].find(k) for t, k in keys.items()}

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
            self.tables[t].push(keys, table_grads, step=step, ttl_before=cutoffs.get(t, 0))
        return []

    def note_acks(self, futures: Any, acks: Any) -> None:
        pass

    def sent_seqs(self) -> List[int]:
        return []

    def exports(self) -> List[List[Dict[str, np.ndarray]]]:
        """Per table (declared order), its one export: what the model digest hashes."""
        return [[t.export()] for t in self.tables.values()]

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        for t in self.tables.values():
            t.close()
