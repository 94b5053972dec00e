"""StepClient: what a worker's steps call to pull and push rows by batches of keys.

Parameter servers answer it (:class:`~xdl_ec.ps.client.PSClient`, or its
:class:`~xdl_ec.ps.cached_client.CachedClient`), and so do a job's tables held in one process
(:class:`~xdl_ec.job.local_tables.LocalTables`, in a room above this one: hence a Protocol), so one worker class
trains with the same code and arithmetic in both.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

import numpy as np

RowRequests = Mapping[str, Tuple[Any, int]]  # {table: (keys, dim)}
RowGrads = Mapping[str, Tuple[Any, np.ndarray]]  # {table: (unique keys, their summed row gradients)}


class RowsInFlight(Protocol):
    """A pull's rows on their way: :meth:`result` waits for them."""

    def result(self) -> Dict[str, np.ndarray]: ...


class StepClient(Protocol):
    """Pulls and pushes of a worker's steps, with the byte counters its stats report."""

    @property
    def timeout(self) -> Optional[float]: ...

    @property
    def steps_groups(self) -> bool:
        """Whether it pulls and pushes a table group's entry (:class:`~xdl_ec.model.table_groups.GroupKeys`)."""
        ...

    @property
    def num_servers(self) -> int: ...

    @property
    def bytes_pulled(self) -> int: ...

    @property
    def bytes_requested(self) -> int: ...

    @property
    def bytes_pushed(self) -> int: ...

    def pull(self, requests: RowRequests) -> Dict[str, np.ndarray]: ...

    def pull_async(self, requests: RowRequests) -> RowsInFlight: ...

    def push(
        self, grads: RowGrads, step: int, participants: int = 1, ttl_before: Optional[Mapping[str, int]] = None
    ) -> List[Any]: ...

    def push_async(
        self, grads: RowGrads, step: int, participants: int = 1, ttl_before: Optional[Mapping[str, int]] = None
    ) -> List[Any]: ...

    def note_acks(self, futures: Sequence[Any], acks: Sequence[Any]) -> None: ...

    def sent_seqs(self) -> List[int]: ...
