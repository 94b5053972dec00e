"""CachedClient: a worker's :class:`~xdl_ec.ps.client.PSClient` with an embedding cache per table (HET's
bounded-staleness cache, the lines in C++: ``_core.RowCache``).

Every row on a server carries a clock that changes on every mutation of its record (one per applied push), so an
unchanged clock means unchanged bytes. A pull of a table with a cache sends, per key, the clock of the cached copy
(-1: not cached); the server returns rows only where the copy is more than S versions behind (or unknown) and the
clocks of every key (``ParameterServer.pull_stale``), so a hit costs 17 bytes on the wire (key and clock out,
clock and a sent flag back) instead of the row.
The worker's own gradients of a cached row are summed on the worker until S of them accumulated, then written
back as one push of their sum with its count c, which the server applies as c optimizer steps of the mean gradient
sum / c (``EmbeddingTable.push(repeats=)``): the moves the c steps of the uncached run would make, had the gradient
been the same each step. With SGD that is exactly one step on the sum; with Adagrad, Adam or FTRL one step on the
sum would move a row about c times less (the AUC both cost: docs/results/worker-cache-2026-11-25.md). A
line evicted or flushed with pending gradient is written back with the next push (or at :meth:`flush`), with its
count. ``staleness=0`` is exact: every changed row is fetched again and every gradient pushed at once, so the model
equals the run without a cache.

What a worker holds that no server has seen (pending gradients) is lost with the worker: at most S updates per
cached row, counted as ``pending_updates`` in each step's answer (``lost_updates`` in the report when a worker dies).
A rollback (ckpt, a resume) drops them: those steps are trained again. Copies are trusted only within the server's
epoch (a load or rollback on the server starts a new one), so a repeated clock can never pass for an unchanged row.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.ps.client import PSClient, route
from xdl_ec.sparse.cache_config import Cache
from xdl_ec.sparse.table import as_keys

_CLOCK_MOD = 1 << 31


class _PendingCached:
    """A pull in flight over cached and uncached tables; ``result()`` waits and assembles {table: rows}.

    The rows of keys it found cached are read from the cache once the answers are in, every one before any answer's
    rows fill the cache (a fill may evict them). A pull started while another is in flight copies them when it
    starts instead (the other's fills may come first); and should a line still be gone (pulls resolved out of
    order), its row is pulled again."""

    def __init__(
        self,
        owner: "CachedClient",
        plain: Any,
        calls: List[Tuple[int, Any, List[tuple]]],
        sizes: Mapping[str, Tuple[int, int]],
    ) -> None:
        self._owner, self._plain, self._calls, self._sizes = owner, plain, calls, sizes
        self._rows: Optional[Dict[str, np.ndarray]] = None
        owner.in_flight.add(self)

    def result(self) -> Dict[str, np.ndarray]:
        if self._rows is None:
            try:
                rows = {} if self._plain is None else dict(self._plain.result())
                rows.update({t: np.empty(shape, np.float32) for t, shape in self._sizes.items()})
                timeout = self._owner.client.timeout
                answered = [(server, parts) + tuple(future.result(timeout)) for server, future, parts in self._calls]
                hits = [
                    [self._owner.hit_rows(server, part, answer) for part, answer in zip(parts, answers)]
                    for server, parts, _, answers in answered
                ]
                for server, parts, _, answers in answered:
                    self._owner.note_held(server, parts, answers)
                self._owner.follow_tables()  # before the fills: the table may have grown for their rows
                for (server, parts, epoch, answers), hit_rows in zip(answered, hits):
                    self._owner.answered(server, epoch, parts, answers, hit_rows, rows)
                self._rows = rows
            finally:
                self._owner.in_flight.discard(self)
        return self._rows


class CachedClient:
    """``client`` (a PSClient) with a cache per table of ``caches`` ({table: Cache}; ``dims`` {table: dim});
    ``table_rows`` gives "P%" caches their first size (the servers' answers to cached pulls, the rest). Everything
    else is the inner client's."""

    def __init__(
        self,
        client: PSClient,
        caches: Mapping[str, Cache],
        dims: Mapping[str, int],
        table_rows: Optional[Mapping[str, int]] = None,
    ) -> None:
        self.client = client
        self.settings = dict(caches)
        self.dims = dict(dims)
        self.caches: Dict[str, Any] = {}
        self._writebacks: Dict[str, List[Tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}  # (keys, grads, counts)
        self._epochs = [0] * client.num_servers  # each server's epoch as of its last answer (0: none yet)
        self.in_flight: "weakref.WeakSet[_PendingCached]" = weakref.WeakSet()  # pulls not resolved (nor dropped)
        self._stats = {
            t: {"clock_only": 0, "rows": 0, "stale_sum": 0, "stale_max": 0, "pulled_again": 0} for t in self.settings
        }
        # per table, the rows each server said it holds in its latest answer (sizes "P%" caches)
        self._held: Dict[str, Dict[int, int]] = {t: {} for t in self.settings}
        for table in self.settings:
            self.caches[table] = self._make(table, (table_rows or {}).get(table, 0))

    def _make(self, table: str, table_rows: int) -> Any:
        cache = self.settings[table]
        return _core.RowCache(self.dims[table], cache.capacity(table_rows), cache.staleness, cache.policy)

    def __getattr__(self, name: str) -> Any:  # the inner client's counters, push log, seqs, servers, ...
        return getattr(self.client, name)

    # ---- pulls ------------------------------------------------------------------------------------------
    def pull_async(self, requests: Mapping[str, Tuple[Any, int]]) -> _PendingCached:
        plain = {t: r for t, r in requests.items() if t not in self.caches}
        pending_plain = self.client.pull_async(plain) if plain else None
        per_server, sizes = self._looked_up(requests)
        calls = []
        for server, wire in enumerate(self._stale_wire(per_server)):
            if wire is not None:
                calls.append((server, self.client.server(server).pull_stale(*wire), per_server[server]))
        return _PendingCached(self, pending_plain, calls, sizes)

    def push_pull_async(
        self,
        grads: Mapping[str, Tuple[Any, np.ndarray]],
        step: int,
        requests: Mapping[str, Tuple[Any, int]],
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> Tuple[List[Any], _PendingCached]:
        """:meth:`push_async` (one participant) and :meth:`pull_async` as ONE call per server, the push applied
        first (``ParameterServer.push_pull_stale``), as :meth:`PSClient.push_pull_async`: (the acks' futures, the
        rows in flight)."""
        due = self._due(grads)
        plain = {t: r for t, r in requests.items() if t not in self.caches}
        per_server, sizes = self._looked_up(requests)
        acks, plain_rows, answers = self.client.push_pull_stale_async(
            due, step, plain, self._stale_wire(per_server), ttl_before
        )
        calls = [(server, future, per_server[server]) for server, future in answers.items()]
        return acks, _PendingCached(self, plain_rows if plain else None, calls, sizes)

    def _looked_up(self, requests: Mapping[str, Tuple[Any, int]]) -> Tuple[List[List[tuple]], Dict[str, tuple]]:
        """Per server, the parts (table, positions, keys, known clocks, copied rows) of the cached tables'
        requests; and {table: (keys, dim)}. Copied rows (of the keys with a known clock) only while another pull is
        in flight (see :class:`_PendingCached`), else None."""
        per_server: List[List[tuple]] = [[] for _ in range(self.client.num_servers)]
        sizes = {}
        copy = bool(self.in_flight)
        for table, (keys, dim) in requests.items():
            if table not in self.caches:
                continue
            keys = as_keys(keys)
            sizes[table] = (keys.size, dim)
            known, tags = self.caches[table].lookup(keys)
            for server, positions in enumerate(route(keys, self.client.num_servers)):
                if not positions.size:
                    continue
                mine = np.where(tags[positions] == np.uint64(self._epochs[server]), known[positions], -1)
                mine = mine.astype(np.int32)
                mine_keys = keys[positions]
                copied = self.caches[table].get(mine_keys[mine >= 0]) if copy else None
                per_server[server].append((table, positions, mine_keys, mine, copied))
        return per_server, sizes

    def _stale_wire(self, per_server: Sequence[List[tuple]]) -> List[Optional[Tuple[List[tuple], int]]]:
        """Per server, the ``pull_stale`` arguments (requests, epoch) of its parts (None: it has none); counts the
        keys and clocks as requested bytes."""
        out: List[Optional[Tuple[List[tuple], int]]] = []
        for server, parts in enumerate(per_server):
            if not parts:
                out.append(None)
                continue
            self.client.bytes_requested += sum(k.nbytes + c.nbytes for _, _, k, c, _ in parts)
            out.append(([(t, k, c, self.settings[t].staleness) for t, _, k, c, _ in parts], self._epochs[server]))
        return out

    def pull(self, requests: Mapping[str, Tuple[Any, int]]) -> Dict[str, np.ndarray]:
        return self.pull_async(requests).result()

    def hit_rows(self, server: int, part: tuple, answer: tuple) -> Optional[np.ndarray]:
        """The rows of a part's keys the server did not send (they had a copy: known >= 0), or None if none."""
        table, _, keys, known, copied = part
        hit = ~np.asarray(answer[2], dtype=bool)
        if not hit.any():
            return None
        if copied is not None:
            return copied[hit[known >= 0]]
        try:
            return self.caches[table].get(keys[hit])
        except ValueError:  # evicted by another pull's fill since: the rows again (uncounted by the cache)
            rows = self.client.server(server).pull([(table, keys[hit])]).result(self.client.timeout)[0]
            self.client.bytes_requested += keys[hit].nbytes
            self.client.bytes_pulled += rows.nbytes
            self._stats[table]["pulled_again"] += int(hit.sum())
            return rows

    def answered(
        self,
        server: int,
        epoch: int,
        parts: Sequence[tuple],
        answers: Sequence[tuple],
        hit_rows: Sequence[Optional[np.ndarray]],
        rows: Dict[str, np.ndarray],
    ) -> None:
        """One server's answer to a cached pull: rows from the answer where sent, else ``hit_rows`` (per part, from
        :meth:`hit_rows`); the sent rows (re)fill the cache."""
        self._epochs[server] = int(epoch)
        for (table, positions, keys, known, _), (sent_rows, clocks, sent, _), cached in zip(parts, answers, hit_rows):
            sent = np.asarray(sent, dtype=bool)
            self.client.bytes_pulled += sent_rows.nbytes + np.asarray(clocks).nbytes + sent.nbytes
            cache = self.caches[table]
            hit = ~sent
            out = rows[table]
            if cached is not None:
                out[positions[hit]] = cached
                behind = (np.asarray(clocks, np.int64)[hit] - known[hit].astype(np.int64)) % _CLOCK_MOD
                stats = self._stats[table]
                stats["stale_sum"] += int(behind.sum())
                stats["stale_max"] = max(stats["stale_max"], int(behind.max()))
            out[positions[sent]] = sent_rows
            self._stats[table]["clock_only"] += int(hit.sum())
            self._stats[table]["rows"] += int(sent.sum())
            if sent.any():
                sent_clocks = np.asarray(clocks, np.int32)[sent]
                held = sent_clocks >= 0  # clock -1: a bounded table's id without a row (zeros): nothing to cache
                if held.all():
                    self._evicted(table, cache.fill(keys[sent], sent_rows, sent_clocks, int(epoch)))
                elif held.any():
                    self._evicted(
                        table,
                        cache.fill(
                            keys[sent][held], np.ascontiguousarray(sent_rows[held]), sent_clocks[held], int(epoch)
                        ),
                    )

    def _evicted(self, table: str, lines: tuple) -> None:
        keys, grads, counts = lines
        if len(keys):
            self._writebacks.setdefault(table, []).append((np.asarray(keys), np.asarray(grads), np.asarray(counts)))

    # ---- pushes -----------------------------------------------------------------------------------------
    def push_async(
        self,
        grads: Mapping[str, Tuple[Any, np.ndarray]],
        step: int,
        participants: int = 1,
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> List[Any]:
        """Pushes what is due: uncached rows' gradients at once, a cached row's sum once S accumulated (all at once
        with S = 0), and lines evicted with pending gradient."""
        return self.client.push_async(self._due(grads), step, participants, ttl_before)

    def _due(self, grads: Mapping[str, Tuple[Any, np.ndarray]]) -> Dict[str, tuple]:
        """{table: (keys, grads[, counts])} to push now of a step's ``grads`` (see :meth:`push_async`)."""
        out = {}
        for table, (keys, table_grads) in grads.items():
            keys = as_keys(keys)
            counts = np.ones(keys.size, np.uint32)
            if table in self.caches:
                keys, table_grads, counts = self.caches[table].accumulate(
                    keys, np.ascontiguousarray(table_grads, dtype=np.float32)
                )
            out[table] = self._with_writebacks(table, as_keys(keys), np.asarray(table_grads, np.float32), counts)
        for table in list(self._writebacks):
            if table not in out:
                out[table] = self._with_writebacks(
                    table, np.zeros(0, np.int64), np.zeros((0, self.dims[table]), np.float32), np.zeros(0, np.uint32)
                )
        return out

    def _with_writebacks(self, table: str, keys: np.ndarray, grads: np.ndarray, counts: np.ndarray) -> tuple:
        """(keys, grads) to push, with the lines written back since the last push; and the repeat counts when a
        row sums several steps' gradients: the server then takes that many steps of the mean (what the uncached
        run does), not one step on the sum, which for Adagrad or Adam is a much shorter move."""
        backs = self._writebacks.pop(table, [])
        if backs:
            # a key both due now and written back is pushed twice in one push: the server sums duplicates and
            # adds their counts
            keys = np.concatenate([keys] + [k for k, _, _ in backs])
            grads = np.concatenate([grads] + [g.reshape(-1, self.dims[table]) for _, g, _ in backs])
            counts = np.concatenate([np.asarray(counts, np.uint32)] + [c.astype(np.uint32) for _, _, c in backs])
        if counts.size and counts.max() > 1:
            return keys, grads, counts
        return keys, grads  # every row one gradient: the plain push (S <= 1 stays bit-identical to no cache)

    def push(
        self,
        grads: Mapping[str, Tuple[Any, np.ndarray]],
        step: int,
        participants: int = 1,
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> List[Any]:
        futures = self.push_async(grads, step, participants, ttl_before)
        acks = [f.result(self.client.timeout) for f in futures]
        self.client.note_acks(futures, acks)
        return acks

    def write_back(self, step: int) -> List[Any]:
        """Pushes every pending gradient (flush, save, the end of a run) as a push of its own at ``step``, applied
        at once (participants 1: no other worker's push is waited for); returns the push futures."""
        for table, cache in self.caches.items():
            self._evicted(table, cache.flush())
        if not self._writebacks:
            return []
        return self.push_async({}, max(int(step), 1), 1)

    def pending_updates(self) -> int:
        """Gradients held here that no server has seen (what a crash of this worker loses)."""
        held = sum(c.pending_count for c in self.caches.values())
        return held + sum(int(c.sum()) for backs in self._writebacks.values() for _, _, c in backs)

    def drop_pending(self) -> int:
        """A rollback: pending gradients belong to steps that are trained again; every line is dropped (cold)."""
        dropped = self.pending_updates()
        for cache in self.caches.values():
            cache.clear()
        self._writebacks.clear()
        return dropped

    def set_servers(
        self,
        handles: Sequence[Any],
        kept: Optional[int] = None,
        server_ids: Optional[Sequence[int]] = None,
        origin: Optional[Sequence[int]] = None,
    ) -> None:
        """Follows a resized cluster (:meth:`PSClient.set_servers`, same arguments). Called at the resize's boundary,
        after the driver's quiesce wrote every cached gradient back and the pulls in flight settled; every cache is
        then emptied: a line's clock and epoch are its old server's, which may no longer hold the row (a row copied
        onto fresh servers keeps its clock, one moved by a load does not), so the next pulls fill them from the new
        layout. ValueError, changing nothing, when a pull is in flight or a gradient pending."""
        if self.in_flight:
            raise ValueError("set_servers: a cached pull is still in flight; settle the worker's pulls first")
        pending = self.pending_updates()
        if pending:
            raise ValueError(
                f"set_servers: {pending} cached gradients are not written back; flush with write_back first"
            )
        self.client.set_servers(handles, kept, server_ids, origin)
        for cache in self.caches.values():
            cache.clear()
        self._epochs = [0] * self.client.num_servers
        self._held = {t: {} for t in self.settings}

    def note_held(self, server: int, parts: Sequence[tuple], answers: Sequence[tuple]) -> None:
        """The rows of each table ``server`` holds, from its answer to a cached pull."""
        for (table, *_), answer in zip(parts, answers):
            self._held[table][server] = int(answer[3])

    def follow_tables(self) -> None:
        """A "P%" cache follows its table's size, as the servers' latest answers tell it, its lines kept (a shrink
        evicts by the policy; their pending gradients are written back with the next push)."""
        for table, cache in self.settings.items():
            held = self._held[table]
            if cache.share is None or not held:
                continue
            want = cache.capacity(sum(held.values()))
            if want != self.caches[table].capacity:
                self._evicted(table, self.caches[table].resize(want))

    def cache_stats(self) -> Dict[str, Any]:
        """Per table: hit rate, clock-only vs row pulls, observed staleness, lines held, evictions, write-backs,
        rows pulled again (a line evicted while a pull that found it was in flight)."""
        out = {}
        for table, cache in self.caches.items():
            stats = cache.stats()
            kept = self._stats[table]
            hits, misses = int(stats["hits"]), int(stats["misses"])
            clock_only = kept["clock_only"]
            out[table] = {
                "rows": int(stats["rows"]),
                "capacity": int(stats["capacity"]),
                "hits": hits,
                "misses": misses,
                "hit_rate": hits / (hits + misses) if hits + misses else None,
                "clock_only_keys": clock_only,
                "row_keys": kept["rows"],
                "staleness_max": kept["stale_max"],
                "staleness_mean": kept["stale_sum"] / clock_only if clock_only else 0.0,
                "pulled_again": kept["pulled_again"],
                "evictions": int(stats["evictions"]),
                "write_backs": int(stats["write_backs"]),
                **self.settings[table].describe(),
            }
        return out


def merged_cache_stats(per_worker: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The run's cache figures per table over every worker's :meth:`CachedClient.cache_stats`."""
    out: Dict[str, Any] = {}
    for stats in per_worker:
        for table, s in stats.items():
            m = out.setdefault(
                table,
                {
                    "hits": 0,
                    "misses": 0,
                    "clock_only_keys": 0,
                    "row_keys": 0,
                    "evictions": 0,
                    "write_backs": 0,
                    "pulled_again": 0,
                    "staleness_max": 0,
                    "_stale_sum": 0.0,
                    **{k: s[k] for k in ("rows", "staleness", "policy")},
                },
            )
            for name in ("hits", "misses", "clock_only_keys", "row_keys", "evictions", "write_backs", "pulled_again"):
                m[name] += s[name]
            m["staleness_max"] = max(m["staleness_max"], s["staleness_max"])
            m["_stale_sum"] += s["staleness_mean"] * s["clock_only_keys"]
    for m in out.values():
        looked = m["hits"] + m["misses"]
        m["hit_rate"] = m["hits"] / looked if looked else None
        m["staleness_mean"] = m.pop("_stale_sum") / m["clock_only_keys"] if m["clock_only_keys"] else 0.0
    return out
