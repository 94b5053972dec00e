"""PSClient: the worker's side of the parameter servers (ps-lite's KVWorker).

Keys are routed to servers by ``KeyRouter::ServerOf`` (a salted 64-bit hash, the same in every process and every
run, never ``key % N``); each call sends ONE request per server carrying every table's part, all issued before any
is awaited (so the servers work concurrently), and reassembles the answers in the caller's key order.
``pull_async`` returns at once, which is how a worker prefetches the next batch's rows while TF computes the
current step; ``push_pull_async`` sends a step's push and the next step's pull as ONE request per server (applied in
that order), when nothing may come between them (one worker, or async mode).

Every table's part of a push carries a per-server sequence number (1, 2, ...). With a push log (``--ft ec``)
every part is kept until its server reports it durable (``PushAck.durable``), to be replayed to a rebuilt server.

A table group's entry (:class:`~xdl_ec.model.table_groups.GroupKeys`, issue #49) is routed by one pass over all its
keys and travels in the same one request per server as ONE group part of the push and ONE group pull
(:mod:`xdl_ec.ps.group_wire`): that server's share of the group's keys, cut per table by offsets, which its core
serves in one native call. Every table of a group part keeps its own seq (the part's first seq + its position), push
log entry and server-side checks, so the ft protocols see what they see ungrouped; the rows come back as one array
in the group's key order. A sync push (several participants) and a push with an eviction cutoff go as the tables'
own parts, as before.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.model.table_groups import GroupKeys
from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.backend import DEFAULT_TIMEOUT, Handle, ServerLost
from xdl_ec.ps.group_wire import is_group
from xdl_ec.ps.remote import Remote
from xdl_ec.sparse.table import as_keys, as_repeats

_TABLES: Dict[Tuple[int, ...], Any] = {}  # RouteTable per id set of a drained cluster (128 KiB each, few per run)


def route(keys: np.ndarray, num_servers: int, server_ids: Optional[Sequence[int]] = None) -> List[np.ndarray]:
    """For each server, the positions in ``keys`` of the keys it owns (ascending). ``server_ids[s]`` is server s's
    stable id (a cluster a drain left with a hole in its ids, see docs/design/elastic.md); None: ids 0..n-1."""
    if server_ids is None:
        servers = _core.server_of(keys, num_servers)
    else:
        servers = owner_positions(keys, server_ids)
    if num_servers <= 1 << 16:
        servers = servers.astype(np.uint16)  # a stable sort of 16-bit ints is a radix sort: 3x faster here
    order = np.argsort(servers, kind="stable")
    bounds = np.searchsorted(servers[order], np.arange(num_servers + 1))
    return [order[bounds[s] : bounds[s + 1]] for s in range(num_servers)]


def owner_positions(keys: np.ndarray, server_ids: Sequence[int]) -> np.ndarray:
    """Each key's owner as a position in ``server_ids`` (the live servers' stable ids, in the cluster's order):
    the rendezvous owner among those ids (``RouteTable``), int32[len(keys)]."""
    ids = tuple(int(i) for i in server_ids)
    table = _TABLES.get(ids)
    if table is None:
        table = _TABLES[ids] = _core.RouteTable(list(ids))
    position = np.zeros(max(ids) + 1, dtype=np.int32)
    position[list(ids)] = np.arange(len(ids), dtype=np.int32)
    return position[table.servers_of(np.ascontiguousarray(keys, dtype=np.int64))]


def rows_by_owner(rows: Mapping[str, Any], owner: np.ndarray) -> List[Tuple[int, Dict[str, np.ndarray]]]:
    """Slot records ``rows`` ({"keys", "values", "state"}: row-aligned arrays) split by ``owner`` (each row's owner
    position): [(position, its rows)], positions ascending, each part contiguous (a load_rows call's)."""
    return [
        (int(dest), {f: np.ascontiguousarray(np.asarray(rows[f])[owner == dest]) for f in ("keys", "values", "state")})
        for dest in np.unique(owner)
    ]


def _held(tables: Sequence[str], bounds: np.ndarray) -> Tuple[Tuple[str, ...], np.ndarray]:
    """The tables of a server's share of a group that have keys there (each table's from ``bounds[i]`` to
    ``bounds[i + 1]``) and their offsets: what its group part or pull carries (a table with no keys there sends
    nothing, as ungrouped)."""
    held = np.diff(bounds) > 0
    if held.all():
        return tuple(tables), bounds
    return tuple(itertools.compress(tables, held.tolist())), bounds[np.concatenate(([True], held))]


@dataclasses.dataclass
class LoggedPush:
    table: str
    keys: np.ndarray
    grads: np.ndarray
    step: int
    participants: int
    repeats: Optional[np.ndarray] = None  # how many gradients each row sums (a cache's write-back)
    ttl_before: int = 0  # the cutoff of an Evict(ttl_seconds) pass ending the push (0: none; step_times.py)

    def part(self, seq: int) -> tuple:
        """The push part as sent: (table, keys, grads, seq[, repeats[, ttl_before]])."""
        head = (self.table, self.keys, self.grads, seq)
        if self.ttl_before:  # a part of six: the native wire form has no field for it, such a push goes pickled
            return head + (self.repeats, self.ttl_before)
        return head if self.repeats is None else head + (self.repeats,)


# a server's share of one entry of a pull: (table or group, positions in its keys, its pulls on the wire: (table,
# keys) or a group pull (tables, offsets, keys, dim), whose rows concatenated are those positions' rows)
_Share = Tuple[str, np.ndarray, List[tuple]]


class PendingRows:
    """Rows of a pull in flight: ``result()`` waits for every server's answer and reassembles them per table (or
    group: ``calls`` give per server (the entry, positions, how many answered parts make its rows))."""

    def __init__(
        self,
        calls: List[Tuple[Any, List[Tuple[str, np.ndarray, int]]]],
        sizes: Mapping[str, Tuple[int, int]],
        timeout: Optional[float],
    ) -> None:
        self._calls, self._sizes, self._timeout = calls, sizes, timeout
        self._rows: Optional[Dict[str, np.ndarray]] = None

    def result(self) -> Dict[str, np.ndarray]:
        """{table or group: rows float32 [len(keys), dim]} in the order of the keys asked for."""
        if self._rows is None:
            rows = {t: np.empty(shape, dtype=np.float32) for t, shape in self._sizes.items()}
            for future, shares in self._calls:
                answers = iter(future.result(self._timeout))
                for entry, positions, count in shares:
                    part = next(answers) if count == 1 else np.concatenate([next(answers) for _ in range(count)])
                    rows[entry][positions] = part
            self._rows = rows
        return self._rows


class Ack:
    """The future of server ``server``'s answer to a push (``part`` 0 of a ``push_pull``'s answer; None: the whole
    answer), or (``part`` 1) of a ``push_pull``'s pulled rows (``part`` 2: a ``push_pull_stale``'s cached pull).
    ``sent``: (step, participants, parts) of the push, to send again to a replacement (see
    :meth:`PSClient.resend`)."""

    __slots__ = ("_future", "_part", "server", "sent")

    def __init__(self, future: Any, part: Optional[int], server: int, sent: Optional[tuple] = None) -> None:
        self._future, self._part, self.server, self.sent = future, part, server, sent

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: Optional[float] = DEFAULT_TIMEOUT) -> Any:
        answer = self._future.result(timeout)
        if self._part is None:
            return answer
        if answer[self._part] is None:  # the server died after answering the push (ParameterServer.push_pull)
            raise ServerLost(self.server, "it died after answering a push")
        return answer[self._part]


class PSClient:
    """Pull/push by batches of keys against ``servers`` (handles from a backend, index i = server i).

    ``worker`` is this client's sender id in pushes. Byte counters: ``bytes_pulled`` (rows received),
    ``bytes_pushed`` (keys and gradients sent), ``bytes_requested`` (keys sent in pulls).
    """

    steps_groups = True  # a table group's entry goes out as one group part and pull per server (module docstring)

    def __init__(
        self,
        servers: Sequence[Handle],
        worker: int = 0,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        push_log: bool = False,
    ) -> None:
        if not servers:
            raise ValueError("servers: need at least one server handle")
        self.servers = list(servers)
        self.worker = worker
        self.timeout = timeout
        self._seq = [0] * len(self.servers)
        self.push_log: Optional[Dict[int, Dict[int, LoggedPush]]] = (
            {s: {} for s in range(len(servers))} if push_log else None
        )
        self._unread: List[Tuple[int, Any]] = []  # logged pushes' ack futures not yet read for their durable seq
        self.server_ids: Optional[List[int]] = None  # each server's stable id after a drain (None: 0..n-1)
        self.bytes_pulled = 0
        self.bytes_requested = 0
        self.bytes_pushed = 0

    @property
    def num_servers(self) -> int:
        return len(self.servers)

    def server(self, index: int) -> Remote:
        return Remote(self.servers[index], ServerAPI)

    def _route_pull(self, requests: Mapping[str, Tuple[Any, int]]) -> Tuple[Dict[str, Tuple[int, int]], List[list]]:
        """({table or group: (rows, dim)}, per server its shares) of a pull of {table or group: (keys, dim)}."""
        per_server: List[List[_Share]] = [[] for _ in self.servers]
        sizes = {}
        for entry, (keys, dim) in requests.items():
            if isinstance(keys, GroupKeys):
                sizes[entry] = (keys.size, dim)
                self.bytes_pulled += keys.size * dim * 4
                for server, (positions, bounds, server_keys) in enumerate(self._route_group(keys)):
                    if positions.size:
                        tables, offsets = _held(keys.group.tables, bounds)
                        per_server[server].append((entry, positions, [(tables, offsets, server_keys, dim)]))
                        self.bytes_requested += server_keys.nbytes
                continue
            keys = as_keys(keys)
            sizes[entry] = (keys.size, dim)
            self.bytes_pulled += keys.size * dim * 4
            for server, positions in enumerate(route(keys, self.num_servers, self.server_ids)):
                if positions.size:
                    per_server[server].append((entry, positions, [(entry, keys[positions])]))
                    self.bytes_requested += positions.size * 8
        for shares in per_server:  # the wire answers a group pull after the plain ones: it goes last
            shares.sort(key=lambda share: is_group(share[2][0]))
        return sizes, per_server

    def _route_group(self, keys: GroupKeys) -> List[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per server, a group's keys it owns: (their positions in ``keys``, ascending; where each table's part of
        them starts and ends; the keys), by ONE route over the group's keys (a key's owner is its table's)."""
        out = []
        for positions in route(keys.keys, self.num_servers, self.server_ids):
            # positions are ascending and every table's keys a contiguous run of the group's: one search splits them
            out.append((positions, np.searchsorted(positions, keys.offsets), keys.keys[positions]))
        return out

    def pull_async(self, requests: Mapping[str, Tuple[Any, int]]) -> PendingRows:
        """Starts pulling {table: (keys, dim)} (inserting missing rows on their servers); returns at once."""
        sizes, per_server = self._route_pull(requests)
        calls = []
        for server, shares in enumerate(per_server):
            if shares:
                future = self.server(server).pull([part for _, _, parts in shares for part in parts])
                calls.append((future, [(e, p, len(parts)) for e, p, parts in shares]))
        return PendingRows(calls, sizes, self.timeout)

    def push_pull_async(
        self,
        grads: Mapping[str, Tuple[Any, np.ndarray]],
        step: int,
        requests: Mapping[str, Tuple[Any, int]],
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> Tuple[List[Any], PendingRows]:
        """:meth:`push_async` of ``grads`` (one participant) and :meth:`pull_async` of ``requests`` as ONE call per
        server, each applying the push before the pull: (the acks' futures, the rows in flight). Exact where no
        other worker's push may come between them (one worker, or async mode)."""
        acks, rows, _ = self.push_pull_stale_async(grads, step, requests, [None] * self.num_servers, ttl_before)
        return acks, rows

    def push_pull_stale_async(
        self,
        grads: Mapping[str, Tuple[Any, ...]],
        step: int,
        requests: Mapping[str, Tuple[Any, int]],
        stale: Sequence[Optional[Tuple[List[tuple], int]]],
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> tuple:
        """:meth:`push_pull_async` that also carries, per server, a caching client's ``pull_stale`` requests and
        epoch (``stale[server]``, None: none) in the same call (``ParameterServer.push_pull_stale``): (the acks'
        futures, the rows in flight, {server: the future of its (epoch, answers)})."""
        wire = self._push_wire(grads, step, 1, ttl_before)
        sizes, pulls = self._route_pull(requests)
        acks, calls, stale_answers = [], [], {}
        for server in range(self.num_servers):
            push, pull, cached = wire[server], pulls[server], stale[server]
            if not push and not pull and not cached:
                continue
            plain = [part for _, _, parts in pull for part in parts]
            if cached:
                future = self.server(server).push_pull_stale(push, step, self.worker, 1, plain, *cached)
                stale_answers[server] = Ack(future, 2, server)
            else:
                future = self.server(server).push_pull(push, step, self.worker, 1, plain)
            if push:
                acks.append(Ack(future, 0, server, (step, 1, push)))
                if self.push_log is not None:
                    self._unread.append((server, acks[-1]))
            if pull:
                calls.append((Ack(future, 1, server), [(e, p, len(parts)) for e, p, parts in pull]))
        return acks, PendingRows(calls, sizes, self.timeout), stale_answers

    def pull(self, requests: Mapping[str, Tuple[Any, int]]) -> Dict[str, np.ndarray]:
        """{table: rows float32[len(keys), dim]} of {table: (keys, dim)}, in the keys' order."""
        return self.pull_async(requests).result()

    def find(self, requests: Mapping[str, Tuple[Any, int]]) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        """{table: (rows, found)} without inserting: rows of keys no server holds are zeros."""
        out, calls = {}, []
        per_server: List[List[Tuple[str, np.ndarray, np.ndarray]]] = [[] for _ in self.servers]
        for table, (keys, dim) in requests.items():
            keys = as_keys(keys)
            out[table] = (np.zeros((keys.size, dim), dtype=np.float32), np.zeros(keys.size, dtype=bool))
            for server, positions in enumerate(route(keys, self.num_servers, self.server_ids)):
                if positions.size:
                    per_server[server].append((table, positions, keys[positions]))
        for server, parts in enumerate(per_server):
            if parts:
                calls.append((self.server(server).find([(t, k) for t, _, k in parts]), parts))
        for future, parts in calls:
            for (table, positions, _), (rows, found) in zip(parts, future.result(self.timeout)):
                out[table][0][positions] = rows
                out[table][1][positions] = np.asarray(found, dtype=bool)
        return out

    def push(
        self,
        grads: Mapping[str, Tuple[Any, np.ndarray]],
        step: int,
        participants: int = 1,
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> List[Any]:
        """Pushes {table: (unique keys, per-key gradients)} to their servers; returns the servers' acks.
        ``ttl_before``: {table: the cutoff of its Evict(ttl_seconds) pass at this step}, sent in its parts.

        With ``participants > 1`` (sync mode) every server gets every table's part, empty when it owns none of
        the keys, since it waits for one push per participant before applying the step."""
        futures = self.push_async(grads, step, participants, ttl_before)
        acks = [f.result(self.timeout) for f in futures]
        self.note_acks(futures, acks)
        return acks

    def push_async(
        self,
        grads: Mapping[str, Tuple[Any, np.ndarray]],
        step: int,
        participants: int = 1,
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> List[Any]:
        """:meth:`push` without waiting: the futures of the servers' acks."""
        wire = self._push_wire(grads, step, participants, ttl_before)
        futures = []
        for server, parts in enumerate(wire):
            if not parts:
                continue
            futures.append(
                Ack(
                    self.server(server).push(parts, step, self.worker, participants),
                    None,
                    server,
                    (step, participants, parts),
                )
            )
            if self.push_log is not None:
                self._unread.append((server, futures[-1]))
        return futures

    def _push_wire(
        self,
        grads: Mapping[str, Tuple[Any, ...]],
        step: int,
        participants: int,
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> List[List[tuple]]:
        """Per server, the push parts (table, keys, grads, seq[, repeats[, ttl_before]]) of ``grads`` ({table:
        (keys, grads) or (keys, grads, repeats)}), each given the server's next push seq (and logged, with a push
        log)."""
        cutoffs = ttl_before or {}
        per_server: List[List[LoggedPush]] = [[] for _ in self.servers]
        groups: List[List[tuple]] = [[] for _ in self.servers]  # per server (tables, offsets, keys, grads)
        for table, (keys, table_grads, *rest) in grads.items():
            if isinstance(keys, GroupKeys):
                if participants == 1 and not (cutoffs and any(cutoffs.get(t, 0) for t in keys.group.tables)):
                    self._group_wire(keys, table_grads, rest, groups)
                else:
                    self._group_push(keys, table_grads, rest, step, participants, cutoffs, per_server)
                continue
            keys = as_keys(keys)
            table_grads = np.ascontiguousarray(table_grads, dtype=np.float32)
            if table_grads.ndim != 2 or table_grads.shape[0] != keys.size:
                raise ValueError(
                    f"grads of table {table!r}: must be [len(keys), dim] = [{keys.size}, dim], got {table_grads.shape}"
                )
            repeats = as_repeats(rest[0] if rest else None, keys.size)
            for server, positions in enumerate(route(keys, self.num_servers, self.server_ids)):
                if positions.size or participants > 1:
                    per_server[server].append(
                        LoggedPush(
                            table,
                            keys[positions],
                            table_grads[positions],
                            step,
                            participants,
                            None if repeats is None else repeats[positions],
                            int(cutoffs.get(table, 0)),
                        )
                    )
        self._forget_durable()
        out: List[List[tuple]] = []
        for server, parts in enumerate(per_server):
            wire = []
            for part in parts:
                self._seq[server] += 1
                seq = self._seq[server]
                if self.push_log is not None:
                    self.push_log[server][seq] = part
                wire.append(part.part(seq))
                self.bytes_pushed += (
                    part.keys.nbytes + part.grads.nbytes + (0 if part.repeats is None else part.repeats.nbytes)
                )
            for tables, offsets, keys, group_grads in groups[server]:  # after the plain parts: the wire's order
                first = self._seq[server] + 1
                self._seq[server] += len(tables)
                if self.push_log is not None:  # a table's entry, as its own part would be logged (replays)
                    ends = offsets.tolist()
                    for t, table in enumerate(tables):
                        rows = slice(ends[t], ends[t + 1])
                        self.push_log[server][first + t] = LoggedPush(table, keys[rows], group_grads[rows], step, 1)
                wire.append((tables, offsets, keys, group_grads, first))
                self.bytes_pushed += keys.nbytes + group_grads.nbytes
            out.append(wire)
        return out

    def _group_wire(self, keys: GroupKeys, grads: Any, rest: Sequence[Any], groups: List[List[tuple]]) -> None:
        """Adds a group's push (``grads`` [len(keys), dim], one participant) to ``groups``: per server ONE group
        part (group_wire.py) of its share, its tables' keys in the order their own parts would carry them."""
        group = keys.group
        grads = self._group_grads(keys, grads, rest)
        for server, (positions, bounds, server_keys) in enumerate(self._route_group(keys)):
            if positions.size:
                tables, offsets = _held(group.tables, bounds)
                groups[server].append((tables, offsets, server_keys, grads[positions]))

    @staticmethod
    def _group_grads(keys: GroupKeys, grads: Any, rest: Sequence[Any]) -> np.ndarray:
        """A group's push gradients as float32 [len(keys), dim] (ValueError otherwise, or with repeats)."""
        group = keys.group
        if rest:
            raise ValueError(f"grads of table group {group.tables}: a group's push carries no repeats (no caches)")
        grads = np.ascontiguousarray(grads, dtype=np.float32)
        if grads.shape != (keys.size, group.dim):
            raise ValueError(
                f"grads of table group {group.tables}: must be [len(keys), dim] = [{keys.size}, {group.dim}], "
                f"got {grads.shape}"
            )
        return grads

    def _group_push(
        self,
        keys: GroupKeys,
        grads: Any,
        rest: Sequence[Any],
        step: int,
        participants: int,
        cutoffs: Mapping[str, int],
        per_server: List[List[LoggedPush]],
    ) -> None:
        """Adds a group's push (``grads`` [len(keys), dim]) to ``per_server``: one part per table and server, each
        the part the table's own push would send (its keys in the same order, its gradients, its cutoff): a sync
        push (every server gets every table's part, empty ones too) or one with eviction cutoffs."""
        group = keys.group
        grads = self._group_grads(keys, grads, rest)
        for server, (positions, bounds, server_keys) in enumerate(self._route_group(keys)):
            if not positions.size and participants == 1:
                continue
            server_grads = grads[positions]
            ends = bounds.tolist()  # slices by Python ints: numpy's scalars cost a few us each, per table
            for i, table in enumerate(group.tables):
                start, end = ends[i], ends[i + 1]
                if end > start or participants > 1:
                    per_server[server].append(
                        LoggedPush(
                            table,
                            server_keys[start:end],
                            server_grads[start:end],
                            step,
                            participants,
                            None,
                            int(cutoffs.get(table, 0)),
                        )
                    )

    def set_servers(
        self,
        servers: Sequence[Handle],
        kept: Optional[int] = None,
        server_ids: Optional[Sequence[int]] = None,
        origin: Optional[Sequence[int]] = None,
    ) -> None:
        """The cluster was resized (:mod:`xdl_ec.ps.resize`): ``servers`` are the handles of servers 0..len-1 from now
        on, of which the first ``kept`` (None: as many as both counts have) are the same servers as before, or, when
        ``origin`` is given (a drain removed a server from the middle), ``origin[s]`` is the position server s had
        before (-1: a new server). ``server_ids[s]`` is server s's stable id (None: 0..len-1). Called with no push
        or pull in flight and every logged push durable: a kept server's push seqs go on, a new server's start at 0
        as it does, a removed server's are forgotten."""
        if not servers:
            raise ValueError("servers: need at least one server handle")
        count = len(servers)
        if origin is None:
            kept = min(count, len(self.servers)) if kept is None else kept
            if not 0 <= kept <= min(count, len(self.servers)):
                raise ValueError(f"kept: {kept} servers kept of {len(self.servers)} before and {count} after")
            origin = [s if s < kept else -1 for s in range(count)]
        origin = [int(o) for o in origin]
        if len(origin) != count or any(not -1 <= o < len(self.servers) for o in origin):
            raise ValueError(f"origin: expected {count} old positions in -1..{len(self.servers) - 1}, got {origin}")
        if len({o for o in origin if o >= 0}) != sum(o >= 0 for o in origin):
            raise ValueError(f"origin: an old position is given twice: {origin}")
        if server_ids is not None:
            server_ids = [int(i) for i in server_ids]
            if len(server_ids) != count or len(set(server_ids)) != count or min(server_ids) < 0:
                raise ValueError(f"server_ids: expected {count} distinct ids >= 0, got {server_ids}")
        if self._unread and any(s not in origin for s, _ in self._unread):
            raise ValueError("set_servers: acks of a replaced server are still awaited; flush the pushes first")
        self.servers = list(servers)
        self._unread = [(origin.index(s), f) for s, f in self._unread]
        self._seq = [self._seq[o] if o >= 0 else 0 for o in origin]
        if self.push_log is not None:
            self.push_log = {s: self.push_log[o] if o >= 0 else {} for s, o in enumerate(origin)}
        self.server_ids = None if server_ids is None or server_ids == list(range(count)) else server_ids

    def drop_acks(self, server: int) -> None:
        """Forgets the acks awaited from ``server``, which was replaced."""
        self._unread = [(s, f) for s, f in self._unread if s != server]

    def resend(self, server: int, sent: tuple) -> Any:
        """Sends a push again, ``sent`` = (step, participants, parts) with the parts' original seqs, to (the
        replacement of) ``server``: it applies the parts its state does not include yet, exactly once (by seq).
        Returns the ack's future."""
        step, participants, parts = sent
        return Ack(self.server(server).push(parts, step, self.worker, participants), None, server, sent)

    def sent_seqs(self) -> List[int]:
        """The last push seq sent to each server (pushes 1..seq went out)."""
        return list(self._seq)

    def forget(self, server: int, seq: int) -> None:
        """Drops logged pushes to ``server`` up to ``seq`` (they are durable there)."""
        if self.push_log is not None:
            log = self.push_log[server]
            # seqs are logged in increasing order and a dict keeps it: the durable ones are a prefix, so this costs
            # what it drops, not the log's length (a second of pushes or more, on every ack)
            while log:
                first = next(iter(log))
                if first > seq:
                    break
                del log[first]

    def enable_push_log(self) -> None:
        """Keeps every push from now on until its server reports it durable (``--ft ec``)."""
        if self.push_log is None:
            self.push_log = {s: {} for s in range(self.num_servers)}

    def resume_seqs(self) -> bool:
        """Continues the push seqs each server last saw from this worker index (a restarted worker: its pushes
        must not look like replays) and keeps a push log if the servers' agents ask for one. Returns the latter."""
        states = [
            f.result(self.timeout) for f in [self.server(s).push_state(self.worker) for s in range(self.num_servers)]
        ]
        for server, (_, last) in enumerate(states):
            self._seq[server] = max(self._seq[server], int(last))
        if any(logs for logs, _ in states):
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
            self.server(server).push([p.part(seq)], p.step, self.worker, p.participants).result(self.timeout)
        return len(log)
