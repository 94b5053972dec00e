"""What the roles answer: the remote interfaces of a parameter server and a worker. Callers reach them only
through :class:`~xdl_ec.ps.remote.Remote` (``Remote(handle, ServerAPI)``), so every remote call is declared here.

Arguments and answers are plain data (numpy arrays, ints, lists, dataclasses), picklable for Ray.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

import numpy as np

# (table, keys, grads, seq[, repeats[, ttl_before]]): one table's part of a push; seq is the sender's push seq to this
# server; repeats (uint32 per row, optional): how many gradients each row sums (a worker cache's write-back);
# ttl_before (int, optional): the cutoff of an Evict(ttl_seconds) pass ending the push (xdl_ec.ps.step_times)
PushPart = Tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class PushAck:
    """A server's answer to a push: ``applied`` is False while a sync step waits for other workers' pushes;
    ``seq`` the push's last part's seq; ``durable``: this worker's highest push seq to this server that survives
    the server's loss (0 without such a strategy)."""

    server: int
    worker: int
    seq: int
    step: int
    applied: bool
    durable: int = 0


class RoleAPI(Protocol):
    """What every role answers: its index, the liveness probe."""

    def ping(self) -> int: ...


class ServerAPI(RoleAPI, Protocol):
    """A parameter server (:class:`~xdl_ec.ps.server.ParameterServer`)."""

    def take_index(self, index: int) -> None: ...

    def pull(self, requests: Sequence[Tuple[str, np.ndarray]]) -> List[np.ndarray]: ...

    def find(self, requests: Sequence[Tuple[str, np.ndarray]]) -> List[Tuple[np.ndarray, np.ndarray]]: ...

    def push(self, parts: Sequence[PushPart], step: int, worker: int, participants: int) -> Any: ...

    def push_pull(
        self,
        parts: Sequence[PushPart],
        step: int,
        worker: int,
        participants: int,
        requests: Sequence[Tuple[str, np.ndarray]],
    ) -> Tuple[Any, List[np.ndarray]]: ...

    def push_pull_stale(
        self,
        parts: Sequence[PushPart],
        step: int,
        worker: int,
        participants: int,
        requests: Sequence[Tuple[str, np.ndarray]],
        stale: Sequence[Tuple[str, Any, Any, int]],
        epoch: int,
    ) -> Tuple[Any, Optional[List[np.ndarray]], Optional[tuple]]: ...

    def open_links(self, secret: Any) -> Tuple[str, int]: ...

    def push_state(self, worker: int) -> Tuple[bool, int]: ...

    def attach_agent(self, factory: Callable[..., Any], *args: Any) -> None: ...

    def agent_call(self, method: str, *args: Any) -> Any: ...

    def export(self, table: str) -> Dict[str, np.ndarray]: ...

    def export_key_order(self, table: str, start: int, count: int) -> Dict[str, Any]: ...

    def load_rows(self, table: str, rows: Mapping[str, np.ndarray]) -> int: ...

    def create_rows(self, table: str, keys: np.ndarray) -> int: ...

    def erase_rows(self, table: str, keys: np.ndarray) -> int: ...

    def slot_rows(self, table: str, slots: Any) -> Dict[str, Any]: ...

    def forward_to(self, fresh: Sequence[Any], ids: Sequence[int]) -> None: ...

    def forward_slots(self, reads: Sequence[Tuple[str, Any]], timeout: float) -> List[Dict[str, Any]]: ...

    def size(self, table: str) -> int: ...

    def save(self, directory: str, step: int) -> int: ...

    def take_changes(self, full: bool) -> Dict[str, Any]: ...

    def clocks(self, table: str, keys: Any) -> np.ndarray: ...

    def clocks_many(self, asks: Sequence[Tuple[str, Any]]) -> List[Tuple[int, np.ndarray]]: ...

    def pull_stale(self, requests: Sequence[Tuple[str, Any, Any, int]], epoch: int) -> Tuple[int, List[tuple]]: ...

    def stats(self) -> Dict[str, Any]: ...


class WorkerAPI(RoleAPI, Protocol):
    """A worker (:class:`~xdl_ec.ps.worker.Worker`)."""

    def batch_signature(self) -> Optional[Tuple[Any, ...]]: ...

    def train_step(
        self,
        step: int,
        weights: Optional[Sequence[np.ndarray]],
        participants: int,
        more: bool = True,
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> Any: ...

    def flush(self, write_back: bool = False) -> int: ...

    def call_latency(self, calls: int, direct: bool = True) -> float: ...

    def dense_state(self) -> Tuple[List[np.ndarray], List[np.ndarray], int]: ...

    def progress(self) -> Dict[str, Any]: ...

    def mark_progress(self) -> int: ...

    def open_links(self, secret: Any) -> Tuple[str, int]: ...

    def seek(self, position: int, state: Any = None) -> bool: ...

    def input_position(self) -> Any: ...

    def set_server(self, index: int, handle: Any) -> None: ...

    def settle_pulls(self) -> None: ...

    def set_servers(
        self,
        handles: Sequence[Any],
        kept: Optional[int] = None,
        server_ids: Optional[Sequence[int]] = None,
        origin: Optional[Sequence[int]] = None,
    ) -> None: ...

    def enable_push_log(self) -> None: ...

    def replay_pushes(self, server: int, after_seq: int, handle: Any = None) -> int: ...

    def stats(self) -> Dict[str, Any]: ...

    def close(self) -> None: ...
