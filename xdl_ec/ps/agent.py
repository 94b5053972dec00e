"""ServerAgent: the one seam through which something outside the parameter-server layer lives with a server.

As ps-lite's ``KVServer`` takes a request handle, a :class:`~xdl_ec.ps.server.ParameterServer` hosts at most one
agent (a fault-tolerance strategy's per-server part: ec's parity agent, cpr's checkpointer, ckpt's shard saver).
The server builds it in its own process with ``attach_agent(factory, *args)`` as ``factory(server, *args)``, so an
agent may hold native state that never crosses a process boundary, and it dies with the server.

What the server asks of its agent, always holding its own lock (so the agent sees pulls and pushes in the order
the shards changed):

- :meth:`ServerAgent.pull` / :meth:`ServerAgent.push` / :meth:`ServerAgent.load_rows` /
  :meth:`ServerAgent.erase_rows` apply a pull (which inserts missing rows), a push, a resume's saved rows or a
  resize's removal of rows that moved away to a table (the defaults apply it plainly; an agent may also
  record what changed);
- :meth:`ServerAgent.durable` tells how far a worker's pushes are safe beyond this server (PushAck.durable);
- :meth:`ServerAgent.close` when the server closes;
- :meth:`ServerAgent.native_path` whether the server's core may serve a one-worker step without calling
  :meth:`~ServerAgent.push` and :meth:`~ServerAgent.pull` (``ShardServer``: the step's request over a direct link
  is then served without the interpreter), asked again after every ``agent_call``.

Everything else an agent offers is called by the driver through the server's ``agent_call`` (see
:class:`~xdl_ec.ps.remote.Remote` with ``agent=True``), without the server's lock: an agent takes
``host.lock`` itself where it must not race a push. What an agent may use of its host is :class:`AgentHost`.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Protocol, Tuple

import numpy as np


class AgentHost(Protocol):
    """The part of a parameter server its agent may use."""

    crash_requested: bool

    @property
    def index(self) -> int: ...

    @property
    def lock(self) -> Any: ...  # reentrant, used as threading.RLock (``with host.lock:``)

    @property
    def memory(self) -> Any: ...  # the server's MemoryBudget (xdl_ec.sparse.memory_budget), None: all in RAM

    def table(self, name: str) -> Any: ...

    def tables(self) -> Dict[str, Any]: ...

    def replace_tables(self, tables: Dict[str, Any]) -> None: ...

    def note_push_seqs(self, worker_seqs: Mapping[int, int]) -> None: ...

    def die(self) -> None: ...


class ServerAgent:
    """Base of the agents; the defaults are a plain server's behaviour."""

    logs_pushes = False  # True: workers keep each push until durable() covers it, to replay it to a rebuilt server

    def pull(self, host: AgentHost, table: Any, keys: np.ndarray) -> np.ndarray:
        """Rows of ``keys`` in ``table`` (an EmbeddingTable), inserting missing ones."""
        return table.pull(keys)

    def push(
        self,
        host: AgentHost,
        table: Any,
        keys: np.ndarray,
        grads: np.ndarray,
        step: int,
        pushes: Mapping[int, int],
        repeats: Optional[np.ndarray] = None,
        ttl_before: int = 0,
    ) -> None:
        """Applies per-key gradients at ``step``; ``pushes`` {worker: push seq} are the pushes it contains;
        ``repeats``: how many gradients each row sums, ``ttl_before``: an Evict(ttl_seconds) cutoff
        (EmbeddingTable.push)."""
        table.push(keys, grads, step=step, repeats=repeats, ttl_before=ttl_before)

    def pull_stale(self, host: AgentHost, table: Any, keys: np.ndarray, known: np.ndarray, staleness: int) -> tuple:
        """A caching worker's pull (``ParameterServer.pull_stale``): (rows of the sent keys, clocks, sent); rows it
        inserts are a mutation, as a pull's."""
        return table.shard.pull_stale(keys, known, staleness)

    def load_rows(self, host: AgentHost, table: Any, keys: np.ndarray, values: np.ndarray, state: np.ndarray) -> None:
        """Inserts or overwrites saved rows (a resumed run's): a mutation like a push."""
        table.load(keys, values, state)

    def erase_rows(self, host: AgentHost, table: Any, keys: np.ndarray) -> int:
        """Removes the rows of ``keys`` (moved away in a resize): a mutation like a push; returns how many."""
        return int(table.erase(keys))

    def native_path(self) -> Tuple[bool, Any]:
        """(whether the server's core may apply one-worker steps' pushes and pulls itself, the native
        DeltaForwarder it reports their mutations to, or None). The core then does what :meth:`push` and
        :meth:`pull` do here for a plain shard, plus that forwarder's recording; an agent whose push or pull does
        more (counts accesses, injects a crash) answers (False, None) for as long as it does. The default allows
        it only where this class's push, pull, pull_stale and durable are the agent's."""
        mine = type(self)
        hooks = ("push", "pull", "pull_stale", "durable")
        return all(getattr(mine, hook) is getattr(ServerAgent, hook) for hook in hooks), None

    def durable(self, worker: int) -> int:
        """The highest push seq of ``worker`` to this server that survives this server's loss (0: none)."""
        return 0

    def close(self) -> None:
        """The server is closing: release threads and native state."""
