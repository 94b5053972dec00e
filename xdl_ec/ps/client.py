"""PSClient: the worker's side of the parameter servers (ps-lite's KVWorker).

Keys are routed to servers by ``KeyRouter::ServerOf`` (a salted 64-bit hash, the same in every process and every
run, never ``key % N``); each call sends ONE batched request per server, all issued before any is awaited (so the
servers work concurrently), and reassembles the answers in the caller's key order. ``pull_async`` returns at
once, which is how a worker prefetches the next batch's rows while TF computes the current step.

Pushes carry a per-server sequence number (1, 2, ...). ``push_log`` (optional, off by default) keeps every push
until a later ``forget(server, seq)``: the seam for replaying non-durable pushes to a rebuilt server.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _core
from ..table import as_keys
from .backend import DEFAULT_TIMEOUT, Handle


def route(keys: np.ndarray, num_servers: int) -> List[np.ndarray]:
    """For each server, the positions in ``keys`` of the keys it owns (ascending)."""
    servers = _core.server_of(keys, num_servers)
    order = np.argsort(servers, kind="stable")
    bounds = np.searchsorted(servers[order], np.arange(num_servers + 1))
    return [order[bounds[s]:bounds[s + 1]] for s in range(num_servers)]


@dataclasses.dataclass
class LoggedPush:
    table: str
    keys: np.ndarray
    grads: np.ndarray
    step: int
    participants: int


class PendingRows:
    """Rows of a pull in flight: ``result()`` waits for every server's answer and reassembles them."""

    def __init__(self, futures: List[Tuple[np.ndarray, Any]], n: int, dim: int, timeout: Optional[float]) -> None:
        self._futures, self._n, self._dim, self._timeout = futures, n, dim, timeout
        self._rows: Optional[np.ndarray] = None

    def result(self) -> np.ndarray:
        if self._rows is None:
            rows = np.empty((self._n, self._dim), dtype=np.float32)
            for positions, future in self._futures:
                rows[positions] = future.result(self._timeout)
            self._rows = rows
        return self._rows


class PSClient:
    """Pull/push by batches of keys against ``servers`` (handles from a backend, index i = server i).

    ``worker`` is this client's sender id in pushes. Byte counters: ``bytes_pulled`` (rows received),
    ``bytes_pushed`` (keys and gradients sent), ``bytes_requested`` (keys sent in pulls).
    """

    def __init__(self, servers: Sequence[Handle], worker: int = 0, timeout: Optional[float] = DEFAULT_TIMEOUT,
                 push_log: bool = False) -> None:
        if not servers:
            raise ValueError("servers: need at least one server handle")
        self.servers = list(servers)
        self.worker = worker
        self.timeout = timeout
        self._seq = [0] * len(self.servers)
        self.push_log: Optional[Dict[int, Dict[int, LoggedPush]]] = {s: {} for s in range(len(servers))} if push_log else None
        self._unread: List[Tuple[int, Any]] = []  # logged pushes' ack futures not yet read for their durable seq
        self.bytes_pulled = 0
        self.bytes_requested = 0
        self.bytes_pushed = 0

    @property
    def num_servers(self) -> int:
        return len(self.servers)

    def pull_async(self, table: str, keys: Any, dim: int) -> PendingRows:
        """Starts pulling the rows of ``keys`` (inserting missing ones on their servers); returns at once."""
        keys = as_keys(keys)
        futures = []
        for server, positions in enumerate(route(keys, self.num_servers)):
            if positions.size:
                part = keys[positions]
                futures.append((positions, self.servers[server].call("pull", table, part)))
                self.bytes_requested += part.nbytes
        self.bytes_pulled += keys.size * dim * 4
        return PendingRows(futures, keys.size, dim, self.timeout)

    def pull(self, table: str, keys: Any, dim: int) -> np.ndarray:
        """Rows float32[len(keys), dim] of ``keys``, in their order."""
        return self.pull_async(table, keys, dim).result()

    def find(self, table: str, keys: Any, dim: int) -> Tuple[np.ndarray, np.ndarray]:
        """(rows, found) without inserting: rows of keys no server holds are zeros."""
        keys = as_keys(keys)
        rows = np.zeros((keys.size, dim), dtype=np.float32)
        found = np.zeros(keys.size, dtype=bool)
        futures = [(positions, self.servers[s].call("find", table, keys[positions]))
                   for s, positions in enumerate(route(keys, self.num_servers)) if positions.size]
        for positions, future in futures:
            part_rows, part_found = future.result(self.timeout)
            rows[positions] = part_rows
            found[positions] = np.asarray(part_found, dtype=bool)
        return rows, found

    def push(self, table: str, keys: Any, grads: np.ndarray, step: int, participants: int = 1) -> List[Any]:
        """Pushes per-key gradients (keys unique) to their servers; returns the servers' acks.

        With ``participants > 1`` (sync mode) every server gets a request, empty when it owns none of the keys,
        since it waits for one push per participant before applying the step."""
        futures = self.push_async(table, keys, grads, step, participants)
        acks = [f.result(self.timeout) for f in futures]
        self.note_acks(futures, acks)
        return acks

    def push_async(self, table: str, keys: Any, grads: np.ndarray, step: int, participants: int = 1) -> List[Any]:
        """:meth:`push` without waiting: the futures of the servers' acks."""
        keys = as_keys(keys)
        grads = np.ascontiguousarray(grads, dtype=np.float32)
        if grads.ndim != 2 or grads.shape[0] != keys.size:
            raise ValueError(f"grads: must be [len(keys), dim] = [{keys.size}, dim], got {grads.shape}")
        self._forget_durable()
        futures = []
        for server, positions in enumerate(route(keys, self.num_servers)):
            if positions.size == 0 and participants == 1:
                continue
            part_keys, part_grads = keys[positions], grads[positions]
            self._seq[server] += 1
            seq = self._seq[server]
            if self.push_log is not None:
                self.push_log[server][seq] = LoggedPush(table, part_keys, part_grads, step, participants)
            futures.append(self.servers[server].call("push", table, part_keys, part_grads, step, self.worker, seq,
                                                     participants))
            if self.push_log is not None:
                self._unread.append((server, futures[-1]))
            self.bytes_pushed += part_keys.nbytes + part_grads.nbytes
        return futures

    def sent_seqs(self) -> List[int]:
        """The last push seq sent to each server (pushes 1..seq went out)."""
        return list(self._seq)

    def forget(self, server: int, seq: int) -> None:
        """Drops logged pushes to ``server`` up to ``seq`` (they are durable there)."""
        if self.push_log is not None:
            log = self.push_log[server]
            for s in [s for s in log if s <= seq]:
                del log[s]

    def enable_push_log(self) -> None:
        """Keeps every push from now on until its server reports it parity-durable (``--ft ec``)."""
        if self.push_log is None:
            self.push_log = {s: {} for s in range(self.num_servers)}

    def resume_seqs(self) -> bool:
        """Continues the push seqs each server last saw from this worker index (a restarted worker: its pushes
        must not look like replays) and keeps a push log if the servers keep parity. Returns the latter."""
        states = [f.result(self.timeout) for f in [s.call("push_state", self.worker) for s in self.servers]]
        for server, (_, last) in enumerate(states):
            self._seq[server] = max(self._seq[server], int(last))
        if any(parity for parity, _ in states):
            self.enable_push_log()
        return self.push_log is not None

    def note_acks(self, futures: Sequence[Any], acks: Sequence[Any]) -> None:
        """The answers ``acks`` of push ``futures`` (from :meth:`push_async`) that the caller awaited: their durable
        seqs drop logged pushes now, and the next push need not ask the backend about those futures again (on Ray
        each ask is a ``ray.wait`` and a ``ray.get``)."""
        if self.push_log is None or not self._unread:
            return
        answered = {id(f): ack for f, ack in zip(futures, acks)}
        unread, self._unread = self._unread, []
        for server, future in unread:
            ack = answered.get(id(future))
            if ack is None:
                self._unread.append((server, future))
            elif getattr(ack, "durable", 0):
                self.forget(server, ack.durable)

    def _forget_durable(self) -> None:
        """Drops logged pushes that answered acks report durable (``PushAck.durable``); unanswered acks wait."""
        unread, self._unread = self._unread, []
        for server, future in unread:
            if not future.done():
                self._unread.append((server, future))
                continue
            try:
                ack = future.result(0)
            except Exception:  # noqa: BLE001 - the failure reaches whoever waits on the push itself
                continue
            if getattr(ack, "durable", 0):
                self.forget(server, ack.durable)

    def replay(self, server: int, after_seq: int) -> int:
        """Re-sends the logged pushes to ``server`` with seq > ``after_seq``, in seq order, each with its original
        seq (the server applies each exactly once); drops the older ones. Returns how many were sent."""
        if self.push_log is None:
            raise ValueError("replay: this client keeps no push log (enable_push_log first)")
        if not 0 <= server < self.num_servers:
            raise IndexError(f"server: no server {server} (there are {self.num_servers})")
        self.forget(server, after_seq)
        log = self.push_log[server]
        for seq in sorted(log):
            p = log[seq]
            self.servers[server].call("push", p.table, p.keys, p.grads, p.step, self.worker, seq,
                                      p.participants).result(self.timeout)
        return len(log)
