"""Scheduler: owns the cluster map (servers, workers, tables, a version bumped on every change), starts and
replaces roles through a backend, and is the ONE place that decides a role is dead.

Anyone who sees a call fail (a worker whose pull raised :class:`ServerLost`, the driver whose step call timed out)
hands the error to :meth:`Scheduler.confirm_failure`, which probes the role and, when it is really gone, marks it
dead in the map and returns the error to stop on (or, with fault tolerance, to recover from: a strategy replaces the
server through :meth:`replace_server`).

With a :class:`~xdl_ec.ps.placement.Placement` (a failure domain on Ray), every server, spare and replacement is
started on the node the placement names, workers on its worker node, and the cluster map reports each role's node.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.backend import CallTimeout, Handle, RoleLost, lost_error
from xdl_ec.ps.placement import Placement
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.server import ParameterServer
from xdl_ec.settings import checks
from xdl_ec.sparse.memory_budget import MemoryBudget
from xdl_ec.sparse.table import KEY_ORDER_CHUNK
from xdl_ec.sparse.table_config import Table

PROBE_TIMEOUT = 5.0  # seconds a live role takes at most to answer a ping between two calls


class Scheduler:
    """Starts ``num_servers`` :class:`ParameterServer` roles holding ``tables`` on ``backend``, plus ``spares``
    idle ones that :meth:`replace_server` hands out first (a hot spare: on Ray a new server process takes ~1.5 s to
    start, which a recovery would otherwise wait for while training stands still). ``placement``: the node of every
    server (None: wherever the backend puts it)."""

    def __init__(
        self,
        backend: Any,
        num_servers: int,
        tables: Sequence[Table],
        spares: int = 0,
        placement: Optional[Placement] = None,
        memory: Optional[MemoryBudget] = None,
        adopted: Optional[Tuple[Sequence[Handle], Sequence[Handle]]] = None,
    ) -> None:
        """``adopted``: (servers, spares) already running (a reattached driver's, docs/design/reattach.md), taken
        over instead of started."""
        checks.positive_int("num_servers", num_servers)
        checks.non_negative_int("spares", spares)
        if placement is not None and len(placement.nodes) != num_servers:
            raise ValueError(f"placement: places {len(placement.nodes)} servers, the cluster has {num_servers}")
        self.backend = backend
        self.placement = placement
        self.memory = memory  # every server's RAM budget (None: all in RAM)
        self.tables: Tuple[Table, ...] = tuple(tables)
        self._server_count = num_servers  # each server keeps its even share of a table's Evict(max_rows)
        self.version = 0
        if adopted is not None:
            if len(adopted[0]) != num_servers:
                raise ValueError(f"adopted: {len(adopted[0])} servers running, the cluster has {num_servers}")
            self.servers: List[Handle] = [backend.adopt(h) for h in adopted[0]]
        else:
            self.servers = [
                self._start_server(i, None if placement is None else placement.node_of(i)) for i in range(num_servers)
            ]
        self.workers: List[Handle] = []
        # each server's stable id, which routes keys to it (docs/design/elastic.md); None: 0..n-1. A drain leaves a
        # hole (xdl_ec.ps.resize), and the servers keep their ids when one is replaced after a loss
        self.server_ids: Optional[List[int]] = None
        self.dead: Dict[Tuple[str, int], str] = {}
        self._spares: List[Handle] = []
        self._spare_count = spares
        self._next_spare = num_servers  # spares get indices past the servers' until they take a dead one's
        if adopted is not None:
            self._spares = [backend.adopt(h) for h in adopted[1]]
            self._next_spare = max([num_servers, *(h.index + 1 for h in self._spares)])
        for _ in range(spares - len(self._spares)):
            self._start_spare()
        # a server that cannot start fails here, not in the first step (adopted ones are probed by the reattach)
        for server in [] if adopted is not None else self.servers + self._spares:
            Remote(server, ServerAPI).ping().result(60.0)

    @property
    def spares(self) -> List[Handle]:
        """The idle servers ready to take a dead one's place."""
        return list(self._spares)

    def replenish_spares(self) -> None:
        """Starts spares up to the count asked for (call once a recovery is complete: a process starting while a
        rebuild runs would take CPU from it)."""
        while len(self._spares) < self._spare_count:
            self._start_spare()

    def _start_server(self, index: int, node: Optional[str]) -> Handle:
        args = (index, self.tables, self._server_count, self.memory)
        if node is None:  # a backend without nodes is called as it always was
            return self.backend.start("server", index, ParameterServer, *args)
        return self.backend.start("server", index, ParameterServer, *args, node=node)

    def _start_spare(self) -> None:
        """Starts an idle server; not waited for (it starts while training goes on)."""
        node = None
        if self.placement is not None:
            node = self.placement.spare_node(self.backend.nodes(), [s.node for s in self._spares])
        self._spares.append(self._start_server(self._next_spare, node))
        self._next_spare += 1

    def start_workers(self, count: int, factory: Callable[..., Any], args_of: Callable[[int], tuple]) -> List[Handle]:
        """Starts ``count`` workers ``factory(*args_of(i))``."""
        self.workers = [self.start_worker(i, factory, args_of(i)) for i in range(count)]
        self.version += 1
        return self.workers

    def start_worker(self, index: int, factory: Callable[..., Any], args: tuple) -> Handle:
        """Starts worker ``index`` as ``factory(*args)`` (where the placement puts workers), not yet in the map."""
        node = None if self.placement is None else self.placement.worker_node
        if node is None:
            return self.backend.start("worker", index, factory, *args)
        return self.backend.start("worker", index, factory, *args, node=node)

    def probe_servers(self) -> List[RoleLost]:
        """Pings every server not known dead, all at once; those that do not answer within PROBE_TIMEOUT are
        marked dead, and their Lost errors returned (a worker restarting must not meet a server that died with
        its predecessor, e.g. on the same node, unnoticed so far)."""
        pings = [(i, Remote(h, ServerAPI).ping()) for i, h in enumerate(self.servers) if ("server", i) not in self.dead]
        deadline = time.monotonic() + PROBE_TIMEOUT
        lost: List[RoleLost] = []
        for i, ping in pings:
            try:
                ping.result(max(deadline - time.monotonic(), 0.01))
            except (RoleLost, CallTimeout) as err:
                reason = err.reason if isinstance(err, RoleLost) else f"no answer to a ping within {PROBE_TIMEOUT:g} s"
                lost.append(self._mark_dead("server", i, reason))
        return lost

    def worker_restarted(self, index: int, handle: Handle) -> None:
        """Worker ``index`` runs again, as ``handle`` (started by the driver)."""
        self.workers[index] = handle
        self.dead.pop(("worker", index), None)
        self.version += 1

    def cluster_map(self) -> Dict[str, Any]:
        """Servers and workers with their state, tables, and the map's version."""

        def entry(role: str, h: Handle) -> Dict[str, Any]:
            placed = {} if h.node is None else {"node": h.node}
            return {"index": h.index, "alive": (role, h.index) not in self.dead, **placed}

        return {
            "version": self.version,
            "tables": [t.name for t in self.tables],
            "servers": [entry("server", h) for h in self.servers],
            "workers": [entry("worker", h) for h in self.workers],
            "placement": {"failure_domain": "none"} if self.placement is None else self.placement.describe(),
        }

    def _handle(self, role: str, index: int) -> Handle:
        handles = self.servers if role == "server" else self.workers
        if not 0 <= index < len(handles):
            raise IndexError(f"index: no {role} {index} (there are {len(handles)})")
        return handles[index]

    def kill(self, role: str, index: int) -> None:
        """Kills a role (failure injection): its process on Ray, its object in one process."""
        self.backend.kill(self._handle(role, index))

    def confirm_failure(self, error: Union[RoleLost, CallTimeout]) -> Optional[RoleLost]:
        """Decides whether the role behind ``error`` is dead: a :class:`RoleLost` for a dead role (marked in the
        map), None when it still answers (a slow call, not a death)."""
        role, index = (error.role, error.index)
        handle = self._handle(role, index)
        if (role, index) not in self.dead and self.backend.alive(handle, PROBE_TIMEOUT):
            return None
        reason = error.reason if isinstance(error, RoleLost) else f"no answer to {error.method}() nor to a ping"
        return self._mark_dead(role, index, reason)

    def _mark_dead(self, role: str, index: int, reason: str) -> RoleLost:
        if (role, index) not in self.dead:
            self.dead[(role, index)] = reason
            self.version += 1
        return lost_error(role, index, reason)

    def replace_server(self, index: int) -> Handle:
        """A fresh, empty server ``index`` in place of a dead one (its state is rebuilt by recovery): a spare when
        one is ready (and another is started in its place), else a new one. With a placement: on a node the
        placement allows (a spare there first), and the placement records the move."""
        node = None
        usable = list(self._spares)
        if self.placement is not None:
            alive = self.backend.nodes()
            for spare in [s for s in self._spares if s.node not in alive]:  # went with its node
                self._spares.remove(spare)
                self.backend.kill(spare)
            allowed = self.placement.candidates(index, alive)
            node = next((s.node for s in self._spares if s.node in allowed), allowed[0])
            usable = [s for s in self._spares if s.node == node]
        handle = None
        while usable and handle is None:
            spare = usable.pop(0)
            self._spares.remove(spare)
            try:
                Remote(spare, ServerAPI).take_index(index).result(60.0)
                handle = self.backend.rename(spare, index)
            except (RoleLost, CallTimeout):  # a spare that died idle is simply not used
                self.backend.kill(spare)
        if handle is None:
            handle = self._start_server(index, node)
        if self.placement is not None and node is not None:  # a placement always names the node (above)
            self.placement.moved(index, node)
        self.servers[index] = handle
        self.dead.pop(("server", index), None)
        self.version += 1
        return handle

    def add_servers(self, count: int) -> List[Handle]:
        """Starts ``count`` new, empty servers after the last one (a resize growing the cluster, see
        :mod:`xdl_ec.ps.resize`) and returns their handles; they join :attr:`servers` only with
        :meth:`set_server_count`."""
        checks.positive_int("count", count)
        return self.start_servers(range(len(self.servers), len(self.servers) + count))

    def start_servers(self, indices: Sequence[int], placement: Optional[Placement] = None) -> List[Handle]:
        """Starts new, empty servers of ``indices`` (not in :attr:`servers` yet), waits until they answer and returns
        their handles; with a failure domain each on the node ``placement`` (planned for the count they belong to)
        names for its index."""
        started = [self._start_server(i, None if placement is None else placement.node_of(i)) for i in indices]
        try:
            for server in started:
                Remote(server, ServerAPI).ping().result(60.0)
        except BaseException:
            for server in started:
                self.backend.kill(server)
            raise
        return started

    def replace_servers(self, fresh: Sequence[Handle], placement: Optional[Placement] = None) -> List[Handle]:
        """The cluster's servers become ``fresh`` (from :meth:`start_servers`, indices 0..len-1, on ``placement``'s
        nodes when the cluster has a failure domain: a resize that re-forms stripes); returns the old handles,
        still running until the caller stops them."""
        old = list(self.servers)
        self.servers = list(fresh)
        self.server_ids = None  # the caller names the fresh servers' ids if they are not 0..len-1
        self.placement = placement
        self._server_count = len(self.servers)
        for key in [key for key in self.dead if key[0] == "server"]:
            del self.dead[key]
        self.version += 1
        return old

    def set_server_count(self, started: Sequence[Handle], count: int) -> List[Handle]:
        """The cluster's servers become 0..count-1: those ``started`` by :meth:`add_servers` join, servers from
        ``count`` on (emptied by the caller) are stopped. Returns the stopped handles."""
        checks.positive_int("count", count)
        servers = self.servers + list(started)
        if count > len(servers):
            raise ValueError(f"count: {count} servers asked, {len(servers)} exist")
        stopped = servers[count:]
        for handle in stopped:
            self.backend.kill(handle)
            self.dead.pop(("server", handle.index), None)
        self.servers = servers[:count]
        self._server_count = count
        self.version += 1
        return stopped

    def arrange_servers(
        self, servers: Sequence[Handle], server_ids: Optional[Sequence[int]], stopped: Sequence[Handle] = ()
    ) -> None:
        """The cluster's servers become ``servers`` (kept ones and those :meth:`start_servers` started) with stable
        ids ``server_ids`` (None: 0..len-1), and the ``stopped`` ones (emptied by the caller) stop: a resize that
        drains given servers (:mod:`xdl_ec.ps.resize`)."""
        if not servers:
            raise ValueError("servers: a cluster needs at least one server")
        ids = None if server_ids is None else [int(i) for i in server_ids]
        if ids is not None and (len(ids) != len(servers) or len(set(ids)) != len(ids)):
            raise ValueError(f"server_ids: expected {len(servers)} distinct ids, got {ids}")
        for handle in stopped:
            self.backend.kill(handle)
            self.dead.pop(("server", handle.index), None)
        self.servers = list(servers)
        self.server_ids = None if ids is None or ids == list(range(len(ids))) else ids
        self._server_count = len(self.servers)
        self.version += 1

    def server_stats(self) -> List[Dict[str, Any]]:
        return [f.result(60.0) for f in [Remote(s, ServerAPI).stats() for s in self.servers]]

    def exports(self, table: str) -> List[Dict[str, Any]]:
        """Every server's rows of ``table`` (for the digest and checkpoints)."""
        return [f.result(300.0) for f in [Remote(s, ServerAPI).export(table) for s in self.servers]]

    def key_order_exports(self, table: str, chunk_rows: int = KEY_ORDER_CHUNK) -> List[Iterator[Dict[str, Any]]]:
        """Per server, its rows of ``table`` in ascending key order, ``chunk_rows`` at a time (a server's next chunk
        is asked as its last one arrives): the sources :func:`~xdl_ec.model.key_order_merge.merge_key_order` merges
        for the streamed digest, so the driver holds a chunk per server, not every row."""
        chunk_rows = checks.positive_int("chunk_rows", chunk_rows)
        return [self._key_order_chunks(server, table, chunk_rows) for server in self.servers]

    @staticmethod
    def _key_order_chunks(server: Handle, table: str, chunk_rows: int) -> Iterator[Dict[str, Any]]:
        remote = Remote(server, ServerAPI)
        pending: Any = remote.export_key_order(table, 0, chunk_rows)
        start = 0
        while pending is not None:
            chunk = pending.result(300.0)
            start += chunk_rows
            # the next is asked only once this one is in: a server's export starts at row 0 before any other
            pending = remote.export_key_order(table, start, chunk_rows) if start < chunk["rows"] else None
            yield chunk

    def shutdown(self) -> None:
        self.backend.shutdown()
