"""PipelinedTables: a job's tables in this process whose pushes run on a background thread, so a one-process step's
push overlaps what the step's thread does next (the step's answer, progressive validation, the run's hooks, the next
batch from the input thread) without changing a value.

Exact by order: every read of the tables (a pull, a find, an export, :meth:`drain` before a save or a report) first
waits for the pushes submitted before it, so each table sees the serial step's sequence of calls (push of step t,
then the pull of step t + 1). The native shard releases the GIL during a push, so the thread runs beside Python.
A push's failure is raised by the next read (the next step's pull, or :meth:`drain`).
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.sparse.table_config import Table

from .local_tables import LocalTables


class PipelinedTables(LocalTables):
    """:class:`LocalTables` whose pushes run in order on one thread and whose reads wait for them."""

    def __init__(self, tables: Sequence[Table]) -> None:
        super().__init__(tables)
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="xdl-ec-push")
        self._pushing: Optional[concurrent.futures.Future] = None

    def drain(self) -> None:
        """Waits for the pushes submitted so far (raising a failed one's error)."""
        pushing, self._pushing = self._pushing, None
        if pushing is not None:
            pushing.result()

    def push(self, grads: Mapping[str, Tuple[Any, np.ndarray]], step: int, participants: int = 1) -> List[Any]:
        self.drain()  # one push in flight at a time: a failure is raised at most one step late
        self._pushing = self._thread.submit(LocalTables.push, self, grads, step, participants)
        return []

    def push_async(self, grads: Mapping[str, Tuple[Any, np.ndarray]], step: int, participants: int = 1) -> List[Any]:
        return self.push(grads, step, participants)

    def pull(self, requests: Mapping[str, Tuple[Any, int]]) -> Dict[str, np.ndarray]:
        self.drain()
        return super().pull(requests)

    def find_rows(self, keys: Mapping[str, np.ndarray]) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        self.drain()
        return super().find_rows(keys)

    def exports(self) -> List[List[Dict[str, np.ndarray]]]:
        self.drain()
        return super().exports()

    def close(self) -> None:
        # the push in flight ends first; its failure, if any, was raised by the run's last drain (or is moot: the
        # run is already failing)
        self._thread.shutdown(wait=True)
        super().close()
