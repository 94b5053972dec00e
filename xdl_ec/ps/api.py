"""What the roles answer: the remote interfaces of a parameter server and a worker. Callers reach them only
through :class:`~xdl_ec.ps.remote.Remote` (``Remote(handle, ServerAPI)``), so every remote call is declared here.

Arguments and answers are plain data (numpy arrays, ints, lists, dataclasses), picklable for Ray.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

import numpy as np

# (table, keys, grads, seq): one table's part of a push; seq is the sender's push seq to this server
PushPart = Tuple[str, np.ndarray, np.ndarray, int]


class RoleAPI(Protocol):
    """What every role answers: its index, the liveness probe."""

    def ping(self) -> int: ...


class ServerAPI(RoleAPI, Protocol):
    """A parameter server (:class:`~xdl_ec.ps.server.ParameterServer`)."""

    def take_index(self, index: int) -> None: ...

    def pull(self, requests: Sequence[Tuple[str, np.ndarray]]) -> List[np.ndarray]: ...

    def find(self, requests: Sequence[Tuple[str, np.ndarray]]) -> List[Tuple[np.ndarray, np.ndarray]]: ...

    def push(self, parts: Sequence[PushPart], step: int, worker: int, participants: int) -> Any: ...

    def push_state(self, worker: int) -> Tuple[bool, int]: ...

    def attach_agent(self, factory: Callable[..., Any], *args: Any) -> None: ...

    def agent_call(self, method: str, *args: Any) -> Any: ...

    def export(self, table: str) -> Dict[str, np.ndarray]: ...

    def load_rows(self, table: str, rows: Mapping[str, np.ndarray]) -> int: ...

    def stats(self) -> Dict[str, Any]: ...


class WorkerAPI(RoleAPI, Protocol):
    """A worker (:class:`~xdl_ec.ps.worker.Worker`)."""

    def batch_signature(self) -> Optional[Tuple[Any, ...]]: ...

    def train_step(self, step: int, weights: Optional[Sequence[np.ndarray]], participants: int,
                   more: bool = True) -> Any: ...

    def flush(self) -> int: ...

    def seek(self, position: int) -> bool: ...

    def set_server(self, index: int, handle: Any) -> None: ...

    def enable_push_log(self) -> None: ...

    def replay_pushes(self, server: int, after_seq: int, handle: Any = None) -> int: ...

    def stats(self) -> Dict[str, Any]: ...

    def close(self) -> None: ...
