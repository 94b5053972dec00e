"""BatchRows: the rows of the keys a worker's batch trains, pulled from the servers before its step's TF call.

Part of them, or all, may have been pulled while the previous step computed: the keys the previous batch did not
touch (its push cannot change them), or every key with the previous step's push (``combine_calls``, the server
applying the push first). The rest is pulled when the step begins, after the previous push's acks.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np

from xdl_ec.model.feature_batch import FeatureBatch
from xdl_ec.model.table_groups import GroupKeys
from xdl_ec.ps.step_client import RowsInFlight, StepClient


class AllRows:
    """The rows of every key of a batch, in flight with the previous step's push (``combine_calls``)."""

    __slots__ = ("rows",)

    def __init__(self, rows: RowsInFlight) -> None:
        self.rows = rows


class NoRows:
    """A prefetch of nothing (every key of the next batch was in the previous one)."""

    def result(self) -> Dict[str, np.ndarray]:
        return {}


Prefetch = Union[RowsInFlight, AllRows]  # rows of a batch pulled during the previous step


def _part(keys: Any, mask: np.ndarray) -> Any:
    """The keys of a table, or of a group with its tables' offsets, where ``mask`` holds."""
    return keys.select(mask) if isinstance(keys, GroupKeys) else keys[mask]


class BatchRows:
    """The rows of the batches of a worker pulling through ``client`` (``dims``: {table: row width}), and what the
    previous step prefetched of the current batch's."""

    def __init__(self, client: StepClient, dims: Mapping[str, int]) -> None:
        self._client, self._dims = client, dict(dims)
        self._prefetched: Optional[Prefetch] = None  # of the current batch (None: pull them all)

    def requests(self, batch: FeatureBatch) -> Dict[str, Tuple[Any, int]]:
        """The pull of every key of ``batch``: {table or group: (unique keys, dim)}."""
        return {t: (keys, self._dim(t, keys)) for t, keys in batch.keys.items()}

    def _dim(self, entry: str, keys: Any) -> int:
        return keys.group.dim if isinstance(keys, GroupKeys) else self._dims[entry]

    def of(self, batch: FeatureBatch) -> Dict[str, np.ndarray]:
        """{table: rows [U, dim]} of ``batch`` (the current one): the prefetched part and the rest pulled now."""
        prefetched = self._prefetched
        if prefetched is None:
            return self._client.pull(self.requests(batch))
        if isinstance(prefetched, AllRows):  # every key's rows, pulled with the previous step's push
            return prefetched.rows.result()
        stale = {
            t: (_part(keys, ~batch.fresh[t]), self._dim(t, keys))
            for t, keys in batch.keys.items()
            if (~batch.fresh[t]).any()
        }
        later = self._client.pull_async(stale) if stale else None
        fresh_rows = prefetched.result()
        later_rows = later.result() if later is not None else {}
        rows = {}
        for t, keys in batch.keys.items():
            table_rows = np.empty((keys.size, self._dim(t, keys)), dtype=np.float32)
            if batch.fresh[t].any():
                table_rows[batch.fresh[t]] = fresh_rows[t]
            if t in later_rows:
                table_rows[~batch.fresh[t]] = later_rows[t]
            rows[t] = table_rows
        return rows

    def prefetch_fresh(self, batch: FeatureBatch) -> RowsInFlight:
        """Starts pulling the rows of ``batch``'s keys its predecessor does not touch (the next batch's, while the
        current one trains)."""
        fresh = {
            t: (_part(keys, batch.fresh[t]), self._dim(t, keys))
            for t, keys in batch.keys.items()
            if batch.fresh[t].any()
        }
        return self._client.pull_async(fresh) if fresh else NoRows()

    def expect(self, prefetched: Optional[Prefetch]) -> None:
        """What was prefetched of the batch that is current from now on."""
        self._prefetched = prefetched

    def drop(self) -> None:
        """Forgets the prefetch (it may come from a lost server, or belong to a batch no longer next): the current
        batch's rows are all pulled again."""
        self._prefetched = None

    def settle(self) -> None:
        """Waits for the prefetch in flight (its rows stay valid for the step that reads them)."""
        prefetched = self._prefetched.rows if isinstance(self._prefetched, AllRows) else self._prefetched
        if prefetched is not None:
            prefetched.result()
