"""ParameterServer: one embedding shard per table, pulled from and pushed to by batches of keys: the role a
backend starts, whose methods are its remote interface (:class:`~xdl_ec.ps.api.ServerAPI`).

A plain object: it knows nothing of threads, Ray or the network, so the same class runs inside this process
(:class:`xdl_ec.ps.backend.LocalBackend`) and inside a Ray actor (:class:`xdl_ec.ps.backend.RayBackend`); the
backend serialises calls to one server, and the shards' lock keeps it safe when it is called directly from several
threads. On Ray the steps' calls come over direct links (:mod:`xdl_ec.ps.direct`, served by a thread of the
server's process: ``open_links``); everything else through Ray.

It composes the parts that do the work, each with one job: what it holds (:class:`ServerShards`), the steps'
path (:class:`ServerDataPath`), the driver's administration (:class:`ServerAdmin`), a resize's rows sent to fresh
servers (:class:`RowForwarder`) and the agent it hosts with its crash switch (:class:`HostedAgent`, the seam of
:mod:`xdl_ec.ps.agent`, whose :class:`~xdl_ec.ps.agent.AgentHost` this object is).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.ps.agent import ServerAgent
from xdl_ec.ps.api import PushAck, PushPart
from xdl_ec.ps.direct import LinkHost
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.hosted_agent import HostedAgent
from xdl_ec.ps.row_forwarder import RowForwarder
from xdl_ec.ps.server_admin import ServerAdmin
from xdl_ec.ps.server_data_path import ServerDataPath
from xdl_ec.ps.server_shards import ServerShards
from xdl_ec.settings import checks
from xdl_ec.sparse.memory_budget import MemoryBudget
from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.sparse.table_config import Table

__all__ = ["ParameterServer", "PushAck"]


class ParameterServer(LinkHost):
    """Server ``index`` of a cluster of ``servers``: one shard per table of ``tables`` (the keys the router assigns
    it); ``memory``: its RAM budget for them, the rest of their rows on disk (:mod:`xdl_ec.sparse.memory_budget`)."""

    link_role = "server"

    def __init__(
        self, index: int, tables: Sequence[Table] = (), servers: int = 1, memory: Optional[MemoryBudget] = None
    ) -> None:
        index = checks.non_negative_int("index", index)
        self.shards = ServerShards(index, checks.positive_int("servers", servers), memory, len(tables))
        self.hosted = HostedAgent(self.shards)
        self.data_path = ServerDataPath(self, self.shards, self.hosted)
        self.admin = ServerAdmin(self, self.shards, self.hosted)
        self.forwarder = RowForwarder(index, self.admin.slot_rows)
        for table in tables:
            self.create_table(table)
        self.hosted.sync_native()

    # ---- what an agent sees of its host (xdl_ec.ps.agent.AgentHost) ---------------------------------------
    @property
    def index(self) -> int:
        return self.shards.index

    @property
    def servers(self) -> int:
        return self.shards.servers

    @property
    def lock(self) -> Any:
        """The shards' lock (reentrant, as threading.RLock)."""
        return self.shards.lock

    @property
    def core(self) -> Any:
        """The native ShardServer over the shards."""
        return self.shards.core

    @property
    def epoch(self) -> int:
        return self.shards.epoch

    @property
    def memory(self) -> Optional[MemoryBudget]:
        """This server's RAM budget (None: all in RAM); a parity holder's stores take their share of it."""
        return self.shards.memory

    @property
    def agent(self) -> ServerAgent:
        return self.hosted.agent

    @property
    def crash_requested(self) -> bool:
        """The role dies right after this call (see die); set, no request is served natively any more."""
        return self.hosted.crash_requested

    @crash_requested.setter
    def crash_requested(self, value: bool) -> None:
        self.hosted.crash_requested = value

    @property
    def last_seq(self) -> Dict[int, int]:
        """{worker: the highest push seq of it this server applied}."""
        return self.shards.core.seqs()

    def table(self, name: str) -> EmbeddingTable:
        """The shard of table ``name`` (for this server's agent); the server dies first when a crash was asked."""
        self.hosted.die_if_asked(self.index)
        return self.shards.get(name)

    def tables(self) -> Dict[str, EmbeddingTable]:
        """The shards by table name (for this server's agent)."""
        return self.shards.all()

    def create_table(self, table: Table) -> None:
        """Adds a table's (empty) shard; ValueError when a table of that name exists."""
        self.shards.create(table)

    def replace_tables(self, tables: Dict[str, EmbeddingTable]) -> None:
        """Swaps in restored shards (same names) and drops sync pushes still buffered; the old shards are closed.
        Called with the lock held (by an agent) or at a quiescent point."""
        self.shards.replace(tables)

    def die(self) -> None:
        """The role dies now (an injected crash): see :meth:`HostedAgent.die`."""
        self.hosted.die(self.index)

    # ---- the remote interface: the steps' path (ServerDataPath) -------------------------------------------
    def ping(self) -> int:
        """Answers its index: the liveness probe of the scheduler."""
        return self.index

    def pull(self, requests: Sequence[Tuple[str, Any]]) -> List[np.ndarray]:
        return self.data_path.pull(requests)

    def pull_stale(self, requests: Sequence[Tuple[str, Any, Any, int]], epoch: int) -> Tuple[int, List[tuple]]:
        return self.data_path.pull_stale(requests, epoch)

    def push(self, parts: Sequence[PushPart], step: int, worker: int = 0, participants: int = 1) -> PushAck:
        return self.data_path.push(parts, step, worker, participants)

    def push_pull(
        self, parts: Sequence[PushPart], step: int, worker: int, participants: int, requests: Sequence[Tuple[str, Any]]
    ) -> Tuple[Optional[PushAck], Optional[List[np.ndarray]]]:
        return self.data_path.push_pull(parts, step, worker, participants, requests)

    def push_pull_stale(
        self,
        parts: Sequence[PushPart],
        step: int,
        worker: int,
        participants: int,
        requests: Sequence[Tuple[str, Any]],
        stale: Sequence[Tuple[str, Any, Any, int]],
        epoch: int,
    ) -> Tuple[Optional[PushAck], Optional[List[np.ndarray]], Optional[tuple]]:
        return self.data_path.push_pull_stale(parts, step, worker, participants, requests, stale, epoch)

    def find(self, requests: Sequence[Tuple[str, Any]]) -> List[Tuple[np.ndarray, np.ndarray]]:
        return self.data_path.find(requests)

    def clocks(self, table: str, keys: Any) -> np.ndarray:
        return self.data_path.clocks(table, keys)

    def clocks_many(self, asks: Sequence[Tuple[str, Any]]) -> List[Tuple[int, np.ndarray]]:
        return self.data_path.clocks_many(asks)

    def cache_epoch(self) -> int:
        return self.shards.cache_epoch()

    def push_state(self, worker: int) -> Tuple[bool, int]:
        return self.data_path.push_state(worker)

    def note_push_seqs(self, worker_seqs: Mapping[int, int]) -> None:
        self.data_path.note_push_seqs(worker_seqs)

    def serve_link(self, session: Any, fd: int, max_payload: int) -> Tuple[Any, List[Any], Optional[BaseException]]:
        """A direct link's serving thread: the push_pull requests arriving on ``fd`` served natively until one
        the core does not serve arrives (ShardServer.serve: (head, buffers, failure)); that one comes here."""
        return self.shards.core.serve(session, fd, max_payload)

    # ---- the remote interface: administration (ServerAdmin, RowForwarder, HostedAgent) ---------------------
    def take_index(self, index: int) -> None:
        self.admin.take_index(index)
        self.forwarder.index = self.index

    def export(self, table: str) -> Dict[str, np.ndarray]:
        return self.admin.export(table)

    def export_key_order(self, table: str, start: int, count: int) -> Dict[str, Any]:
        return self.admin.export_key_order(table, start, count)

    def size(self, table: str) -> int:
        return self.admin.size(table)

    def load_rows(self, table: str, rows: Mapping[str, np.ndarray]) -> int:
        return self.admin.load_rows(table, rows)

    def create_rows(self, table: str, keys: np.ndarray) -> int:
        return self.admin.create_rows(table, keys)

    def erase_rows(self, table: str, keys: np.ndarray) -> int:
        return self.admin.erase_rows(table, keys)

    def save(self, directory: str, step: int) -> int:
        return self.admin.save(directory, step)

    def take_changes(self, full: bool) -> Dict[str, Any]:
        return self.admin.take_changes(full)

    def slot_rows(self, table: str, slots: Any) -> Dict[str, Any]:
        return self.admin.slot_rows(table, slots)

    def stats(self) -> Dict[str, Any]:
        return self.admin.stats()

    def forward_to(self, fresh: Sequence[Handle], ids: Sequence[int]) -> None:
        """The fresh servers a resize's :meth:`forward_slots` sends rows to, over links proven with this server's
        links' secret when it serves links (Ray)."""
        self.forwarder.forward_to(fresh, ids, self._links_secret())

    def forward_slots(self, reads: Sequence[Tuple[str, Any]], timeout: float) -> List[Dict[str, Any]]:
        return self.forwarder.forward_slots(reads, timeout, self._links_secret())

    def _links_secret(self) -> Any:
        server = self._link_server
        return None if server is None else server.secret

    def attach_agent(self, factory: Callable[..., ServerAgent], *args: Any) -> None:
        """Builds this server's agent as ``factory(self, *args)`` in this process (one agent per server)."""
        self.hosted.attach(self, factory, *args)

    def agent_call(self, method: str, *args: Any) -> Any:
        """``agent.<method>(self, *args)``: the driver's calls to this server's agent (see Remote, agent=True)."""
        return self.hosted.call(self, method, *args)

    def close(self) -> None:
        """Releases the agent and the shards (unregisters them from the process registry). Idempotent."""
        self.close_links()
        self.forwarder.close()
        with self.shards.lock:
            self.hosted.close()
            self.shards.close()
