"""WorkerServers: the parameter servers a worker's client calls, and on Ray the direct links it reaches them over
(:mod:`xdl_ec.ps.direct`: the steps' pulls and pushes go over a link, every other call through Ray).

A recovery points the worker at a lost server's replacement, a resize at a new set of servers; a kept server keeps
its link, a dropped one's link is closed.
"""

from __future__ import annotations

import time
from typing import List, Mapping, Optional, Sequence, Tuple, Union

from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.cached_client import CachedClient
from xdl_ec.ps.client import PSClient
from xdl_ec.ps.direct import LinkedHandle, unlinked
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.step_client import StepClient
from xdl_ec.sparse.cache_config import Cache

ServersClient = Union[PSClient, CachedClient]


def link(handle: Handle, secret: Optional[JobSecret], worker: int) -> Handle:
    """``handle`` with worker ``worker``'s pulls and pushes over a direct link (a Ray handle, given the run's
    ``secret``); else ``handle`` itself."""
    if secret is None or not hasattr(handle, "actor"):
        return handle
    return LinkedHandle(handle, secret, worker)


def connect(
    worker: int,
    handles: Sequence[Handle],
    secret: Optional[JobSecret],
    timeout: Optional[float],
    caches: Optional[Mapping[str, Cache]],
    dims: Mapping[str, int],
    table_rows: Optional[Mapping[str, int]],
) -> ServersClient:
    """Worker ``worker``'s client of the servers ``handles`` (``timeout``: of a call, None: the client's default),
    continuing its predecessor's push seqs (and log, under ec); with ``caches`` {table: Cache}, a caching client
    (``dims`` {table: dim}; ``table_rows`` sizes "P%" caches)."""
    linked = [link(h, secret, worker) for h in handles]
    client = PSClient(linked, worker=worker) if timeout is None else PSClient(linked, worker=worker, timeout=timeout)
    client.resume_seqs()
    return CachedClient(client, caches, dims, table_rows) if caches else client


def servers_client(client: StepClient) -> Optional[PSClient]:
    """The PSClient under ``client`` (a CachedClient's own); None for a job's tables held in this process."""
    if isinstance(client, CachedClient):
        return client.client
    return client if isinstance(client, PSClient) else None


def no_servers(call: str, worker: int) -> RuntimeError:
    """The error of a call that needs servers made to worker ``worker`` training on tables in this process."""
    return RuntimeError(f"{call}: worker {worker} trains on tables in this process, it has no servers")


class WorkerServers:
    """The servers of worker ``worker``'s ``client`` (none when it trains on tables in this process), linked with
    the run's ``secret`` on Ray."""

    def __init__(self, worker: int, client: StepClient, secret: Optional[JobSecret]) -> None:
        self._worker, self._secret = worker, secret
        self._client = client if isinstance(client, (PSClient, CachedClient)) else None
        self._plain = servers_client(client)

    def _require(self, call: str) -> Tuple[ServersClient, PSClient]:
        if self._client is None or self._plain is None:
            raise no_servers(call, self._worker)
        return self._client, self._plain

    def replace(self, index: int, handle: Handle) -> None:
        """Calls ``handle`` as server ``index`` from now on (a lost server's replacement)."""
        client, plain = self._require("set_server")
        if not 0 <= index < client.num_servers:
            raise IndexError(f"index: no server {index} (there are {client.num_servers})")
        old, plain.servers[index] = plain.servers[index], link(handle, self._secret, self._worker)
        if isinstance(old, LinkedHandle):
            old.close()

    def reform(
        self,
        handles: Sequence[Handle],
        kept: Optional[int],
        server_ids: Optional[Sequence[int]],
        origin: Optional[Sequence[int]],
    ) -> None:
        """Calls a resized cluster's ``handles`` (see :meth:`PSClient.set_servers` for ``kept``, ``server_ids`` and
        ``origin``): a kept server keeps its link; the dropped ones' links are closed."""
        client, plain = self._require("set_servers")
        old = list(plain.servers)
        new: List[Handle] = []
        for i, handle in enumerate(handles):
            j = i if origin is None else int(origin[i])
            same = 0 <= j < len(old) and (old[j] is handle or getattr(old[j], "handle", None) is handle)
            new.append(old[j] if same else link(handle, self._secret, self._worker))
        client.set_servers(new, kept, server_ids, origin)
        for handle in old:
            if isinstance(handle, LinkedHandle) and not any(handle is h for h in new):
                handle.close()

    def ping_all(self) -> None:
        """Pings every server at once and waits for them all (a lost one raises)."""
        if self._plain is None:  # tables in this process: no server to meet
            return
        plain = self._plain
        futures = [plain.server(i).ping() for i in range(plain.num_servers)]
        for future in futures:
            future.result(plain.timeout)

    def call_latency(self, calls: int, direct: bool) -> float:
        """Mean seconds of a ping to a server, ``calls`` rounds over every server one call at a time, over the
        path pulls and pushes take (``direct``) or through the backend's handle."""
        _, plain = self._require("call_latency")
        start = time.perf_counter()
        for _ in range(calls):
            for server in range(plain.num_servers):
                handle = plain.servers[server] if direct else unlinked(plain.servers[server])
                Remote(handle, ServerAPI).ping().result(plain.timeout)
        return (time.perf_counter() - start) / max(calls * plain.num_servers, 1)

    def close(self) -> None:
        """Closes the links to the servers."""
        for handle in self._plain.servers if self._plain is not None else []:
            if isinstance(handle, LinkedHandle):
                handle.close()
