"""ServerDataPath: a parameter server's training path: the pulls and pushes of the steps, clocks and lookups.

One request per worker and step: ``pull`` and ``push`` carry every table's part for this server; ``push_pull``
carries a step's push and the next step's pull in one request (one worker, or async mode: see
:mod:`xdl_ec.ps.worker`). Sync mode (``participants > 1``) buffers a step's pushes until every worker's arrived
(:class:`~xdl_ec.ps.sync_steps.SyncSteps`). Every table's part of a push carries the sender's push sequence number
and the server records how far each sender's pushes were accepted: a replayed part is applied once, and a rebuilt
server can tell the workers where to resume. Every change goes through the hosted agent, under the server's lock,
so the agent sees the shards change in order.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.ps.agent import AgentHost
from xdl_ec.ps.api import PushAck, PushPart
from xdl_ec.ps.group_wire import is_group, split_group_part, split_group_pull
from xdl_ec.ps.hosted_agent import HostedAgent
from xdl_ec.ps.server_shards import ServerShards
from xdl_ec.settings import checks
from xdl_ec.sparse.table import EmbeddingTable, as_keys, as_repeats, as_rows

# a push part checked: (table, keys, grads, seq, repeats, ttl_before)
_Checked = Tuple[EmbeddingTable, np.ndarray, np.ndarray, int, Optional[np.ndarray], int]


class ServerDataPath:
    """The training path of ``host`` (whose ``table`` dies first when a crash was asked) over its ``shards``,
    through its ``hosted`` agent."""

    def __init__(self, host: AgentHost, shards: ServerShards, hosted: HostedAgent) -> None:
        self._host, self._shards, self._hosted = host, shards, hosted

    # ---- pulls ----------------------------------------------------------------------------------------
    def pull(self, requests: Sequence[Any]) -> List[np.ndarray]:
        """Rows float32[len(keys), dim] of each (table, keys) request, or group pull (group_wire.py), inserting
        missing keys with their initial rows."""
        served = self._native((), 1, 0, 1, requests) if requests else None  # a pull: no step, no seq
        if served is not None:
            return served[1]
        self._shards.counters["requests"] += 1
        return self._pull(requests)

    def _pull(self, requests: Sequence[Any]) -> List[np.ndarray]:
        # per answer, its tables' pulls: one for a plain pull, a group pull's (group_wire.py) tables' in order
        answers = [self._group_asks(r) if is_group(r) else [(self._host.table(r[0]), as_keys(r[1]))] for r in requests]
        out = []
        c = self._shards.counters
        with self._shards.lock:  # inserted rows are mutations too: the agent sees them in the shards' order
            for asks in answers:
                parts = []
                for table, keys in asks:
                    rows = self._hosted.agent.pull(self._host, table, keys)
                    parts.append(rows)
                    c["keys_pulled"] += keys.size
                    c["bytes_in"] += keys.nbytes
                    c["bytes_out"] += rows.nbytes
                out.append(parts[0] if len(parts) == 1 else np.concatenate(parts))
            c["pulls"] += 1
        return out

    def _group_asks(self, request: Sequence[Any]) -> List[Tuple[EmbeddingTable, np.ndarray]]:
        """A group pull's tables and keys, each table of the group's dim (ValueError otherwise)."""
        pulls, dim = split_group_pull(request)
        asks = [(self._host.table(name), keys) for name, keys in pulls]
        for table, _ in asks:
            if table.dim != dim:
                raise ValueError(f"group pull: table {table.name!r} has dim {table.dim}, not the group's {dim}")
        return asks

    def pull_stale(self, requests: Sequence[Tuple[str, Any, Any, int]], epoch: int) -> Tuple[int, List[tuple]]:
        """A caching worker's pull: for each (table, keys, known clocks (-1: not cached), staleness), the rows of
        the keys whose copy is more than ``staleness`` versions behind (or unknown; missing keys are inserted), as
        ``(rows of the sent keys, clocks of every key, sent mask, rows the table holds here)`` (the last sizes "P%"
        caches). ``epoch``: the one the worker's copies came from; when this server's rows changed other than by
        pulls and pushes since (a load, a rollback), every key is sent. Returns (this server's epoch, the
        answers)."""
        self._shards.counters["requests"] += 1
        return self._pull_stale(requests, epoch)

    def _pull_stale(self, requests: Sequence[Tuple[str, Any, Any, int]], epoch: int) -> Tuple[int, List[tuple]]:
        parts = [
            (self._host.table(name), as_keys(keys), np.asarray(known, dtype=np.int32), int(staleness))
            for name, keys, known, staleness in requests
        ]
        out = []
        c = self._shards.counters
        with self._shards.lock:
            current = self._shards.cache_epoch()
            fresh = epoch == current
            for table, keys, known, staleness in parts:
                if not fresh:
                    known = np.full(keys.size, -1, np.int32)
                rows, clocks, sent = self._hosted.agent.pull_stale(self._host, table, keys, known, staleness)
                out.append((rows, clocks, sent, len(table)))
                c["keys_pulled"] += keys.size
                c["bytes_in"] += keys.nbytes + known.nbytes
                c["bytes_out"] += rows.nbytes + clocks.nbytes + sent.nbytes
            c["pulls"] += 1
            return current, out

    def clocks(self, table: str, keys: Any) -> np.ndarray:
        """The row clocks of ``keys`` in ``table`` (int32; -1 where missing): one more per push that changed the
        row, restored with the row by a rebuild."""
        with self._shards.lock:  # (a resize's calls come beside the steps', over a link of their own)
            return self._host.table(table).shard.clocks(as_keys(keys))

    def clocks_many(self, asks: Sequence[Tuple[str, Any]]) -> List[Tuple[int, np.ndarray]]:
        """Per (table, keys) of ``asks``: the table's row count and the keys' clocks (as :meth:`clocks`), read at
        once: a resize's move asks every table of a server in one call."""
        with self._shards.lock:
            return [(len(self._host.table(table)), self.clocks(table, keys)) for table, keys in asks]

    def find(self, requests: Sequence[Tuple[str, Any]]) -> List[Tuple[np.ndarray, np.ndarray]]:
        """(rows, found) of each (table, keys) request without inserting (evaluation): missing rows are zeros."""
        out = []
        c = self._shards.counters
        for name, keys in requests:
            keys = as_keys(keys)
            rows, found = self._host.table(name).find(keys)
            with self._shards.lock:
                c["bytes_in"] += keys.nbytes
                c["bytes_out"] += rows.nbytes + np.asarray(found).nbytes
            out.append((rows, found))
        return out

    # ---- pushes ---------------------------------------------------------------------------------------
    def push(self, parts: Sequence[PushPart], step: int, worker: int = 0, participants: int = 1) -> PushAck:
        """Applies each part's per-key gradients at optimizer ``step`` (1-based), or buffers them until all
        ``participants`` workers pushed that table at ``step`` (sync mode). Bad input raises and changes
        nothing."""
        self._shards.counters["requests"] += 1
        return self._push(parts, step, worker, participants)

    def _push(self, parts: Sequence[PushPart], step: int, worker: int, participants: int) -> PushAck:
        # A step's request, on every step: the plain ints it carries pass without a call each (a call costs most
        # under load on Ray, where a server wakes with cold caches); anything else gets the checks' errors.
        if type(step) is not int or step < 1:
            step = checks.positive_int("step", step)
        if type(worker) is not int or worker < 0:
            worker = checks.non_negative_int("worker", worker)
        if type(participants) is not int or participants < 1:
            participants = checks.positive_int("participants", participants)
        if participants > 1 and worker >= participants:
            raise ValueError(f"worker: {worker} is not below participants ({participants})")
        checked = [
            self._checked(table_part, step, worker)
            for part in parts
            for table_part in (split_group_part(part) if is_group(part) else (part,))
        ]
        last = 0
        applied = True
        shards = self._shards
        core, c, agent = shards.core, shards.counters, self._hosted.agent
        with shards.lock:
            for table, keys, grads, seq, repeats, ttl_before in checked:
                last = max(last, seq)
                if seq and seq <= core.last_seq(worker):
                    continue  # a replayed part this server already applied (or buffered): exactly once
                c["pushes"] += 1
                c["keys_pushed"] += keys.size
                c["bytes_in"] += keys.nbytes + grads.nbytes + (0 if repeats is None else repeats.nbytes)
                if participants == 1:
                    agent.push(self._host, table, keys, grads, step, {worker: seq}, repeats, ttl_before)
                    c["steps_applied"] += 1
                else:
                    merged = shards.sync.add(
                        table.name, keys, grads, step, worker, seq, participants, repeats, ttl_before, shards.index
                    )
                    if merged is None:
                        applied = False
                    else:
                        agent.push(
                            self._host,
                            table,
                            merged.keys,
                            merged.grads,
                            step,
                            merged.pushes,
                            merged.repeats,
                            merged.ttl_before,
                        )
                        c["steps_applied"] += 1
                core.note_seq(worker, seq)
            durable = agent.durable(worker)
        return PushAck(shards.index, worker, last, step, applied, durable)

    def _checked(self, part: PushPart, step: int, worker: int) -> _Checked:
        """One table's part of a push, checked (ValueError naming what is wrong)."""
        size = len(part)
        if size < 4 or size > 6:
            raise ValueError(
                f"push part: expected (table, keys, grads, seq[, repeats[, ttl_before]]), got {size} items"
            )
        name, keys, grads, seq = part[0], part[1], part[2], part[3]
        table = self._host.table(name)
        keys = as_keys(keys)
        grads = as_rows(grads, keys.size, table.dim, "grads", "dim")
        repeats = None if size == 4 or part[4] is None else as_repeats(part[4], keys.size)
        if type(seq) is not int or seq < 0:
            seq = checks.non_negative_int("seq", seq)
        ttl_before = 0 if size < 6 else checks.integer("ttl_before (an Evict(ttl_seconds) cutoff)", part[5], 0, step)
        if not np.isfinite(grads).all():
            raise ValueError(
                f"grads: NaN or Inf in the push of worker {worker} to table {name!r} at step {step}; nothing applied"
            )
        return table, keys, grads, seq, repeats, ttl_before

    def push_pull(
        self, parts: Sequence[PushPart], step: int, worker: int, participants: int, requests: Sequence[Tuple[str, Any]]
    ) -> Tuple[Optional[PushAck], Optional[List[np.ndarray]]]:
        """:meth:`push` of ``parts`` (none when empty), then :meth:`pull` of ``requests``, in that order: a worker's
        push of step t and its rows of step t + 1 in one request. A push that raises pulls nothing, and so does a
        server that dies right after answering the push (an injected crash): the caller gets the ack, and None
        for rows."""
        served = self._native(parts, step, worker, participants, requests)
        if served is not None:
            return served
        self._shards.counters["requests"] += 1
        ack = self._push(parts, step, worker, participants) if parts else None
        if self._hosted.crash_requested:
            return ack, None
        return ack, (self._pull(requests) if requests else [])

    def _native(
        self, parts: Sequence[PushPart], step: Any, worker: Any, participants: Any, requests: Sequence[Any]
    ) -> Optional[Tuple[Optional[PushAck], List[np.ndarray]]]:
        """A one-worker step served by the server's core, as a direct link's loop serves it (a table group's part
        and pull in one native call each; ShardServer.serve_call), or None when the core declines it (its agent's
        hooks, a crash armed, arguments the Python path must judge): nothing changed, the caller serves it."""
        if type(step) is not int or type(worker) is not int or participants != 1 or not 1 <= step < 1 << 62:
            return None
        if not 0 <= worker < 1 << 31:
            return None
        served = self._shards.core.serve_call(parts, step, worker, requests)
        if served is None:
            return None
        ack, rows = served
        return (None if ack is None else PushAck(*ack)), rows

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
        """:meth:`push_pull` for a caching worker: after the push, the :meth:`pull` of ``requests`` (tables without
        a cache) and the :meth:`pull_stale` of ``stale`` at ``epoch``; (ack, rows, (epoch, answers)), the last two
        None when the server dies right after the push."""
        self._shards.counters["requests"] += 1
        ack = self._push(parts, step, worker, participants) if parts else None
        if self._hosted.crash_requested:
            return ack, None, None
        return ack, (self._pull(requests) if requests else []), self._pull_stale(stale, epoch)

    # ---- push seqs ------------------------------------------------------------------------------------
    def push_state(self, worker: int) -> Tuple[bool, int]:
        """(an agent keeps the pushes durable, last push seq of ``worker``): a restarted worker continues its
        predecessor's seqs and, when the servers' agent asks for it, keeps its pushes until durable."""
        with self._shards.lock:
            return bool(self._hosted.agent.logs_pushes), self._shards.core.last_seq(int(worker))

    def note_push_seqs(self, worker_seqs: Mapping[int, int]) -> None:
        """Records that this server's state includes the pushes ``worker_seqs`` {worker: seq} (a rebuilt server)."""
        with self._shards.lock:
            for w, s in worker_seqs.items():
                self._shards.core.note_seq(int(w), int(s))
