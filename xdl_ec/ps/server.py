"""ParameterServer: one embedding shard per table, pulled from and pushed to by batches of keys.

A plain object: it knows nothing of threads, Ray or the network, so the same class runs inside this process
(:class:`xdl_ec.ps.backend.LocalBackend`) and inside a Ray actor (:class:`xdl_ec.ps.backend.RayBackend`); the
backend serialises calls to one server (an actor runs one call at a time), and ``lock`` keeps it safe when it is
called directly from several threads. Its remote interface is :class:`~xdl_ec.ps.api.ServerAPI`.

One request per worker and step: ``pull`` and ``push`` carry every table's part for this server; ``push_pull``
carries a step's push and the next step's pull in one request (one worker, or async mode: see
:mod:`xdl_ec.ps.worker`). On Ray those calls come over direct links (:mod:`xdl_ec.ps.direct`, served by a thread
of the server's process: ``open_links``); everything else through Ray.

The shards, each worker's last push seq and the lock live in the native :class:`xdl_ec._core.ShardServer`
(``core``) too, which serves a one-worker step's ``push_pull`` (or a caching worker's ``push_pull_stale``) arriving
over a direct link without the interpreter (``serve_link``) while the agent allows it
(:meth:`~xdl_ec.ps.agent.ServerAgent.native_path`); what it declines comes here unchanged. Both paths give the same
acks, rows and bytes.

Sync mode (``participants > 1``): the pushes of one step from several workers are buffered per table until all
``participants`` arrived, then applied as ONE shard push of the concatenation in worker order, each worker's
gradients divided by ``participants`` (the mean over the global batch, like the dense gradients). The shard sums
duplicate keys in that fixed order, so the result does not depend on which worker's push arrived first.

Every table's part of a push carries the sender's push sequence number and the server records how far each
sender's pushes were accepted (``push_state``): a replayed part is recognised and applied once, and a rebuilt
server can tell the workers where to resume. A fault-tolerance strategy lives with the server through the one
seam of :mod:`xdl_ec.ps.agent`.
"""

from __future__ import annotations

import secrets
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.keep.checkpoint import ShardCheckpoint
from xdl_ec.settings import checks
from xdl_ec.sparse.table import MAX_REPEATS, EmbeddingTable, as_cells, as_keys, as_repeats, as_rows
from xdl_ec.sparse.table_config import Table

from .agent import ServerAgent
from .api import PushAck, PushPart, ServerAPI
from .backend import CallTimeout, RoleLost, ServerLost, in_ray_actor
from .client import owner_positions, rows_by_owner
from .direct import BesideLinkedHandle, LinkHost
from .remote import Remote

# a worker's part of a sync step, buffered: (keys, grads, seq, repeats, ttl_before)
_SyncPart = Tuple[np.ndarray, np.ndarray, int, Optional[np.ndarray], int]


class ParameterServer(LinkHost):
    """Server ``index`` of a cluster: one shard per table of ``tables`` (the keys the router assigns it)."""

    link_role = "server"

    def __init__(self, index: int, tables: Sequence[Table] = (), servers: int = 1) -> None:
        self.index = checks.non_negative_int("index", index)
        # the cluster's server count: a table's Evict(max_rows) is shared evenly over them
        self.servers = checks.positive_int("servers", servers)
        self._tables: Dict[str, EmbeddingTable] = {}
        # the shards again, each worker's last push seq and the lock, natively: a one-worker step's request over a
        # direct link is served there without the interpreter (ShardServer.serve, see xdl_ec.ps.direct)
        self.core = _core.ShardServer(self.index)
        self.lock = self.core.lock  # reentrant, as threading.RLock
        # (table, step) -> {worker: its part}: a sync step's parts until all arrived
        self._pending: Dict[Tuple[str, int], Dict[int, _SyncPart]] = {}
        self.agent: ServerAgent = ServerAgent()
        self._has_agent = False
        self._crash_requested = False
        self._forward: Optional[_ForwardTargets] = None  # a resize's fresh servers (forward_to)
        # Caching workers keep rows with their clocks; rows changed other than by a pull or push (a load, a
        # rollback, a fresh server) could repeat a clock with other bytes, so such a change starts a new epoch
        # and copies from an older one are not trusted (see pull_stale).
        self.epoch = 0
        self._new_epoch()
        self._counters = {
            "bytes_in": 0,
            "bytes_out": 0,
            "pulls": 0,
            "pushes": 0,
            "keys_pulled": 0,
            "keys_pushed": 0,
            "steps_applied": 0,
            "requests": 0,
        }
        for table in tables:
            self.create_table(table)
        self._sync_native()

    # ---- tables ---------------------------------------------------------------------------------------
    def create_table(self, table: Table) -> None:
        """Adds a table's (empty) shard; ValueError when a table of that name exists."""
        checks.instance("table", table, Table)
        with self.lock:
            if table.name in self._tables:
                raise ValueError(f"table {table.name!r} already exists on server {self.index}")
            self._tables[table.name] = EmbeddingTable.from_config(table, self.servers)
            self.core.set_table(table.name, self._tables[table.name].shard)

    def _new_epoch(self) -> None:
        self.epoch = secrets.randbits(62) + 1
        self.core.set_epoch(self.epoch)

    def table(self, name: str) -> EmbeddingTable:
        """The shard of table ``name`` (for this server's agent)."""
        if self.crash_requested:
            self.die()
        table = self._tables.get(name)
        if table is None:
            raise ValueError(f"table: server {self.index} has no table {name!r} (tables: {sorted(self._tables)})")
        return table

    def tables(self) -> Dict[str, EmbeddingTable]:
        """The shards by table name (for this server's agent)."""
        return dict(self._tables)

    def replace_tables(self, tables: Dict[str, EmbeddingTable]) -> None:
        """Swaps in restored shards (same names) and drops sync pushes still buffered; the old shards are closed.
        Called with the lock held (by an agent) or at a quiescent point."""
        unknown = sorted(set(tables) - set(self._tables))
        if unknown:
            raise ValueError(f"tables: server {self.index} has no tables {unknown} (tables: {sorted(self._tables)})")
        for name, table in tables.items():
            old, self._tables[name] = self._tables[name], table
            self.core.set_table(name, table.shard)
            if old is not table:
                old.close()
        self._pending.clear()
        self._new_epoch()

    def ping(self) -> int:
        """Answers its index: the liveness probe of the scheduler."""
        return self.index

    def take_index(self, index: int) -> None:
        """A spare server becomes server ``index`` (replacing a dead one); only while it has served nothing."""
        index = checks.non_negative_int("index", index)
        with self.lock:
            if self._has_agent or self.core.seqs() or any(len(t) for t in self._tables.values()):
                raise ValueError(
                    f"take_index: server {self.index} already holds state; only an idle spare can become server {index}"
                )
            self.index = self.core.index = index

    # ---- training path --------------------------------------------------------------------------------
    def pull(self, requests: Sequence[Tuple[str, Any]]) -> List[np.ndarray]:
        """Rows float32[len(keys), dim] of each (table, keys) request, inserting missing keys with their initial
        rows."""
        self._counters["requests"] += 1
        return self._pull(requests)

    def _pull(self, requests: Sequence[Tuple[str, Any]]) -> List[np.ndarray]:
        parts = [(self.table(name), as_keys(keys)) for name, keys in requests]
        out = []
        with self.lock:  # inserted rows are mutations too: the agent sees them in the shards' order
            for table, keys in parts:
                rows = self.agent.pull(self, table, keys)
                out.append(rows)
                c = self._counters
                c["keys_pulled"] += keys.size
                c["bytes_in"] += keys.nbytes
                c["bytes_out"] += rows.nbytes
            self._counters["pulls"] += 1
        return out

    def pull_stale(self, requests: Sequence[Tuple[str, Any, Any, int]], epoch: int) -> Tuple[int, List[tuple]]:
        """A caching worker's pull: for each (table, keys, known clocks (-1: not cached), staleness), the rows of
        the keys whose copy is more than ``staleness`` versions behind (or unknown; missing keys are inserted), as
        ``(rows of the sent keys, clocks of every key, sent mask, rows the table holds here)`` (the last sizes "P%"
        caches). ``epoch``: the one the worker's copies came from; when this server's rows changed other than by
        pulls and pushes since (a load, a rollback), every key is sent. Returns (this server's epoch, the
        answers)."""
        self._counters["requests"] += 1
        return self._pull_stale(requests, epoch)

    def _pull_stale(self, requests: Sequence[Tuple[str, Any, Any, int]], epoch: int) -> Tuple[int, List[tuple]]:
        parts = [
            (self.table(name), as_keys(keys), np.asarray(known, dtype=np.int32), int(staleness))
            for name, keys, known, staleness in requests
        ]
        out = []
        with self.lock:
            current = self.cache_epoch()
            fresh = epoch == current
            for table, keys, known, staleness in parts:
                if not fresh:
                    known = np.full(keys.size, -1, np.int32)
                rows, clocks, sent = self.agent.pull_stale(self, table, keys, known, staleness)
                out.append((rows, clocks, sent, len(table)))
                c = self._counters
                c["keys_pulled"] += keys.size
                c["bytes_in"] += keys.nbytes + known.nbytes
                c["bytes_out"] += rows.nbytes + clocks.nbytes + sent.nbytes
            self._counters["pulls"] += 1
            return current, out

    def cache_epoch(self) -> int:
        """The epoch a caching worker's copies are checked against: :attr:`epoch` moved on by every eviction pass
        of a bounded table that freed rows (an evicted row inserted again restarts at the initial clock, so a
        cached clock could match other bytes); the epoch itself while no pass freed anything. The native path
        (ShardServer) answers the same."""
        generations = sum(t.shard.eviction_generation for t in self._tables.values())
        return int(_core.epoch_after_evictions(self.epoch, generations))

    def clocks(self, table: str, keys: Any) -> np.ndarray:
        """The row clocks of ``keys`` in ``table`` (int32; -1 where missing): one more per push that changed the
        row, restored with the row by a rebuild."""
        with self.lock:  # (a resize's calls come beside the steps', over a link of their own)
            return self.table(table).shard.clocks(as_keys(keys))

    def clocks_many(self, asks: Sequence[Tuple[str, Any]]) -> List[Tuple[int, np.ndarray]]:
        """Per (table, keys) of ``asks``: the table's row count and the keys' clocks (as :meth:`clocks`), read at
        once: a resize's move asks every table of a server in one call."""
        with self.lock:
            return [(len(self.table(table)), self.clocks(table, keys)) for table, keys in asks]

    def find(self, requests: Sequence[Tuple[str, Any]]) -> List[Tuple[np.ndarray, np.ndarray]]:
        """(rows, found) of each (table, keys) request without inserting (evaluation): missing rows are zeros."""
        out = []
        for name, keys in requests:
            keys = as_keys(keys)
            rows, found = self.table(name).find(keys)
            with self.lock:
                self._counters["bytes_in"] += keys.nbytes
                self._counters["bytes_out"] += rows.nbytes + np.asarray(found).nbytes
            out.append((rows, found))
        return out

    def push(self, parts: Sequence[PushPart], step: int, worker: int = 0, participants: int = 1) -> PushAck:
        """Applies each part's per-key gradients at optimizer ``step`` (1-based), or buffers them until all
        ``participants`` workers pushed that table at ``step`` (sync mode; see the module docstring). Bad input
        raises and changes nothing."""
        self._counters["requests"] += 1
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
        checked = []
        for part in parts:
            size = len(part)
            if size < 4 or size > 6:
                raise ValueError(
                    f"push part: expected (table, keys, grads, seq[, repeats[, ttl_before]]), got {size} items"
                )
            name, keys, grads, seq = part[0], part[1], part[2], part[3]
            table = self.table(name)
            keys = as_keys(keys)
            grads = as_rows(grads, keys.size, table.dim, "grads", "dim")
            repeats = None if size == 4 or part[4] is None else as_repeats(part[4], keys.size)
            if type(seq) is not int or seq < 0:
                seq = checks.non_negative_int("seq", seq)
            ttl_before = (
                0 if size < 6 else checks.integer("ttl_before (an Evict(ttl_seconds) cutoff)", part[5], 0, step)
            )
            if not np.isfinite(grads).all():
                raise ValueError(
                    f"grads: NaN or Inf in the push of worker {worker} to table {name!r} at step "
                    f"{step}; nothing applied"
                )
            checked.append((table, keys, grads, seq, repeats, ttl_before))
        last = 0
        applied = True
        core = self.core
        with self.lock:
            for table, keys, grads, seq, repeats, ttl_before in checked:
                last = max(last, seq)
                if seq and seq <= core.last_seq(worker):
                    continue  # a replayed part this server already applied (or buffered): exactly once
                c = self._counters
                c["pushes"] += 1
                c["keys_pushed"] += keys.size
                c["bytes_in"] += keys.nbytes + grads.nbytes + (0 if repeats is None else repeats.nbytes)
                if participants == 1:
                    self.agent.push(self, table, keys, grads, step, {worker: seq}, repeats, ttl_before)
                    c["steps_applied"] += 1
                else:
                    applied = (
                        self._buffer(table, keys, grads, step, worker, seq, participants, repeats, ttl_before)
                        and applied
                    )
                core.note_seq(worker, seq)
            durable = self.agent.durable(worker)
        return PushAck(self.index, worker, last, step, applied, durable)

    def push_pull(
        self, parts: Sequence[PushPart], step: int, worker: int, participants: int, requests: Sequence[Tuple[str, Any]]
    ) -> Tuple[Optional[PushAck], Optional[List[np.ndarray]]]:
        """:meth:`push` of ``parts`` (none when empty), then :meth:`pull` of ``requests``, in that order: a worker's
        push of step t and its rows of step t + 1 in one request (see :mod:`xdl_ec.ps.worker`). A push that
        raises pulls nothing, and so does a server that dies right after answering the push (an injected crash):
        the caller gets the ack, and None for rows."""
        self._counters["requests"] += 1
        ack = self._push(parts, step, worker, participants) if parts else None
        if self.crash_requested:
            return ack, None
        return ack, (self._pull(requests) if requests else [])

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
        self._counters["requests"] += 1
        ack = self._push(parts, step, worker, participants) if parts else None
        if self.crash_requested:
            return ack, None, None
        return ack, (self._pull(requests) if requests else []), self._pull_stale(stale, epoch)

    def _buffer(
        self,
        table: EmbeddingTable,
        keys: np.ndarray,
        grads: np.ndarray,
        step: int,
        worker: int,
        seq: int,
        participants: int,
        repeats: Optional[np.ndarray] = None,
        ttl_before: int = 0,
    ) -> bool:
        """Buffers one worker's part of a sync step; applies the step's parts merged once all arrived."""
        pending = self._pending.setdefault((table.name, step), {})
        if worker in pending:
            raise ValueError(
                f"worker {worker} already pushed step {step} of table {table.name!r} to server {self.index}"
            )
        cutoffs = {p[4] for p in pending.values()}
        if cutoffs and ttl_before not in cutoffs:  # one driver gives every worker the step's cutoffs
            raise ValueError(
                f"worker {worker}: step {step} of table {table.name!r} has ttl_before {ttl_before}, another worker's "
                f"part {cutoffs.pop()}; nothing buffered"
            )
        pending[worker] = (keys, grads, seq, repeats, ttl_before)
        if len(pending) < participants:
            return False
        del self._pending[(table.name, step)]
        order = sorted(pending)
        keys = np.concatenate([pending[w][0] for w in order])
        grads = np.concatenate([pending[w][1] / np.float32(participants) for w in order])
        repeats = None  # only when some worker sent counts: a plain sync step stays the plain path, bit for bit
        if any(pending[w][3] is not None for w in order):
            keys, grads, repeats = _merge_repeats(keys, grads, [(pending[w][0], pending[w][3]) for w in order])
        self.agent.push(self, table, keys, grads, step, {w: pending[w][2] for w in order}, repeats, ttl_before)
        self._counters["steps_applied"] += 1
        return True

    def push_state(self, worker: int) -> Tuple[bool, int]:
        """(an agent keeps the pushes durable, last push seq of ``worker``): a restarted worker continues its
        predecessor's seqs and, when the servers' agent asks for it, keeps its pushes until durable."""
        with self.lock:
            return bool(self.agent.logs_pushes), self.core.last_seq(int(worker))

    def note_push_seqs(self, worker_seqs: Mapping[int, int]) -> None:
        """Records that this server's state includes the pushes ``worker_seqs`` {worker: seq} (a rebuilt server)."""
        with self.lock:
            for w, s in worker_seqs.items():
                self.core.note_seq(int(w), int(s))

    @property
    def last_seq(self) -> Dict[int, int]:
        """{worker: the highest push seq of it this server applied}."""
        return self.core.seqs()

    # ---- the native path (ShardServer) ------------------------------------------------------------------
    @property
    def crash_requested(self) -> bool:
        """The role dies right after this call (see die); set, no request is served natively any more."""
        return self._crash_requested

    @crash_requested.setter
    def crash_requested(self, value: bool) -> None:
        self._crash_requested = bool(value)
        self._sync_native()

    def _sync_native(self) -> None:
        """Lets the core serve one-worker steps itself while the agent allows it (ServerAgent.native_path)."""
        with self.lock:
            enabled, forwarder = (False, None) if self._crash_requested else self.agent.native_path()
            self.core.set_native(bool(enabled), forwarder)

    def serve_link(self, session: Any, fd: int, max_payload: int) -> Tuple[Any, List[Any], Optional[BaseException]]:
        """A direct link's serving thread: the push_pull requests arriving on ``fd`` served natively until one
        the core does not serve arrives (ShardServer.serve: (head, buffers, failure))."""
        return self.core.serve(session, fd, max_payload)

    # ---- the agent seam (xdl_ec.ps.agent) -------------------------------------------------------------
    def attach_agent(self, factory: Callable[..., ServerAgent], *args: Any) -> None:
        """Builds this server's agent as ``factory(self, *args)`` in this process (one agent per server)."""
        with self.lock:
            if self._has_agent:
                raise ValueError(f"server {self.index} already hosts an agent ({type(self.agent).__name__})")
            agent = factory(self, *args)
            if not isinstance(agent, ServerAgent):
                raise TypeError(f"attach_agent: the factory must build a ServerAgent, got {type(agent).__name__}")
            self.agent, self._has_agent = agent, True
            self._sync_native()

    def agent_call(self, method: str, *args: Any) -> Any:
        """``agent.<method>(self, *args)``: the driver's calls to this server's agent (see Remote, agent=True)."""
        if self.crash_requested:
            self.die()
        if not self._has_agent:
            raise ValueError(f"server {self.index} hosts no agent; attach_agent first")
        if method.startswith("_") or not callable(getattr(self.agent, method, None)):
            raise AttributeError(f"{type(self.agent).__name__} has no method {method!r}")
        try:
            return getattr(self.agent, method)(self, *args)
        finally:
            self._sync_native()  # the call may have changed what the agent allows (e.g. a crash armed)

    def die(self) -> None:
        """The role dies now (an injected crash): in a Ray actor the process exits; in one process the backend
        drops this object after the call, and the call fails as a lost server's would."""
        self.crash_requested = True
        if in_ray_actor():
            import os

            os._exit(1)
        raise ServerLost(self.index, "it crashed (injected)")

    # ---- state ----------------------------------------------------------------------------------------
    def export(self, table: str) -> Dict[str, np.ndarray]:
        """Every live row of the table: dict(keys, values, state)."""
        return self.table(table).export()

    def load_rows(self, table: str, rows: Mapping[str, np.ndarray]) -> int:
        """Inserts exported rows (keys, values, state) into ``table`` through the agent (a resume re-sharding a
        saved table: under ``ec`` the rows reach parity as a push does); returns how many."""
        with self.lock:
            t = self.table(table)
            keys = as_keys(rows["keys"], "rows['keys']")
            values = as_rows(rows["values"], keys.size, t.dim, "rows['values']", "dim")
            state = as_rows(rows["state"], keys.size, t.state_floats, "rows['state']", "state_floats")
            if t.config.bounded and "uses" in rows:  # the words and pending ids go in the load's own deltas
                none = np.zeros(0, np.int64)
                t.shard.stage_load_words(
                    keys,
                    np.asarray(rows["uses"], np.uint32),
                    as_keys(rows["last_step"]),
                    as_keys(rows.get("pending_keys", none)),
                    np.asarray(rows.get("pending_uses", none), np.uint32),
                    as_keys(rows.get("pending_last_step", none)),
                )
            if "sketch" in rows and t.shard.sketch_slots:  # a sketch counter's cells too (added: a copy here)
                t.shard.stage_sketch(as_cells(rows["sketch"]))
            self.agent.load_rows(self, t, keys, values, state)
            self._new_epoch()
            return int(keys.size)

    def erase_rows(self, table: str, keys: np.ndarray) -> int:
        """Removes the rows of ``keys`` (rows that moved to another server in a resize, :mod:`xdl_ec.ps.resize`)
        through the agent (under ``ec`` the freed slots reach parity as a push's deltas do); returns how many."""
        with self.lock:
            t = self.table(table)
            erased = self.agent.erase_rows(self, t, as_keys(keys))
            self._new_epoch()
            return int(erased)

    def save(self, directory: str, step: int) -> int:
        """Writes every table of this server into ``directory`` as a ShardCheckpoint of ``step`` (a job save's
        part, published by the driver's commit); returns the bytes written. The caller has quiesced the job."""
        with self.lock:
            part = ShardCheckpoint.write(directory, self._tables, step=step, atomic=False)
        return part.nbytes()

    def take_changes(self, full: bool) -> Dict[str, Any]:
        """An incremental backstop's cut (at a quiescent point): ``{"full": bool, "tables": {name: rows}}`` with
        the rows changed since the previous cut, or every row when ``full`` is asked or this server has not been
        tracking changes (a fresh or rebuilt server), which starts tracking from here. A bounded table (admit /
        evict rules) is always cut whole, with its rows' eviction words and its pending ids: an increment would
        carry neither the rows its passes freed nor the words."""
        with self.lock:
            whole = full or not all(t.shard.tracking_dirty for t in self._tables.values())
            whole = whole or any(t.config.bounded for t in self._tables.values())
            return {"full": whole, "tables": {name: t.cut(whole) for name, t in self._tables.items()}}

    def slot_rows(self, table: str, slots: Any) -> Dict[str, Any]:
        """The live rows of ``table`` in the slots ``slots`` (ascending slot numbers, or a (start, count) range):
        keys, values, state, clocks, slots, and ``end``: one past the last slot that may hold a row. A resize's
        background copy reads the shard a bounded range at a time (:mod:`xdl_ec.ps.background_move`)."""
        with self.lock:
            t = self.table(table)
            if isinstance(slots, tuple):
                start, count = (int(v) for v in slots)
                slots = np.arange(start, max(start, min(start + count, t.slot_end)), dtype=np.int64)
            out: Dict[str, Any] = t.slot_rows(slots)
            out["end"] = t.slot_end
            return out

    def forward_to(self, fresh: Sequence[Any], ids: Sequence[int]) -> None:
        """The fresh servers of a resize (handles, of stable ids ``ids``) that :meth:`forward_slots` sends rows to
        from now on. Over direct links of their own when this server serves links (on Ray: the run's secret proves
        this server to them, and a load is one ``sendmsg`` instead of a Ray call, whose rows of over 100 KB would
        cross the object store); the links to earlier ones are closed."""
        if len(fresh) != len(ids):
            raise ValueError(f"forward_to: {len(fresh)} fresh servers but {len(ids)} ids; give one id per server")
        targets = _ForwardTargets(fresh, ids, self.index)
        server = self._link_server
        if server is not None:
            targets.open(server.secret)  # the links' handshakes now, not in the first forward's round
        with self.lock:
            earlier, self._forward = self._forward, targets
        if earlier is not None:
            earlier.close()

    def forward_slots(self, reads: Sequence[Tuple[str, Any]], timeout: float) -> List[Dict[str, Any]]:
        """A resize's copy sent by this server itself (:mod:`xdl_ec.ps.background_move`): the live rows of each
        (table, slots) of ``reads`` (as :meth:`slot_rows`) loaded into their owners among the fresh servers given
        by :meth:`forward_to` (routed as the client routes), so the rows do not pass through the driver. Answers
        per read what the driver keeps (keys, slots, clocks, end, owner: each row's position among the fresh
        servers, bytes: those sent), or, when a fresh server was lost or did not answer within ``timeout``
        seconds, ``[{"lost": why}]`` (the move starts over; this server's own loss is its Lost)."""
        targets = self._forward
        if targets is None:
            raise RuntimeError(
                f"forward_slots: server {self.index} was given no fresh servers; call forward_to(fresh, ids) first"
            )
        link = self._link_server
        secret = None if link is None else link.secret
        parts = [self.slot_rows(table, slots) for table, slots in reads]  # each under the lock, then released
        loads = []
        for (table, _), part in zip(reads, parts):
            owner = np.asarray(owner_positions(part["keys"], targets.ids), np.int32)
            part["owner"], part["bytes"] = owner, 0
            for dest, rows in rows_by_owner(part, owner):
                part["bytes"] += sum(v.nbytes for v in rows.values())
                loads.append(targets.server(dest, secret).load_rows(table, rows))
            del part["values"], part["state"]  # the driver keeps only what tells a row's copy from a change
        try:
            for load in loads:
                load.result(timeout)
        except (RoleLost, CallTimeout) as err:
            return [{"lost": f"{type(err).__name__}: {err}"}]
        return parts

    def size(self, table: str) -> int:
        return len(self.table(table))

    def stats(self) -> Dict[str, Any]:
        """Counters (bytes in/out, requests (calls of pull, push, push_pull, pull_stale), pulls, pushes (table
        parts), keys; native_requests: the requests of those the core served without the interpreter), rows per
        table and pending sync steps."""
        with self.lock:
            out: Dict[str, Any] = dict(self._counters)
            native = self.core.counters()  # what the native path served
            for name, count in native.items():
                out[name] += count
            out["native_requests"] = native["requests"]
            out["pending_steps"] = len(self._pending)
        out["index"] = self.index
        out["rows"] = {name: len(t) for name, t in self._tables.items()}
        bounded = {name: t.bounded_report() for name, t in self._tables.items() if t.config.bounded}
        if bounded:  # tables with admit / evict rules: their part of the report's "tables"
            out["tables"] = bounded
        return out

    def close(self) -> None:
        """Releases the agent and the shards (unregisters them from the process registry). Idempotent."""
        self.close_links()
        forward, self._forward = self._forward, None
        if forward is not None:
            forward.close()
        with self.lock:
            self.agent.close()
            self.core.set_native(False, None)
            self.core.drop_tables()
            for t in self._tables.values():
                t.close()
            self._tables.clear()
            self._pending.clear()


class _ForwardTargets:
    """A resize's fresh servers as an old server sends to them: over direct links of their own, proven with the
    secret this server's own links serve (given at the first send: the driver's forward_slots reaches this server
    over a link, so it serves them by then), or, without one (one process), their handles as given."""

    def __init__(self, fresh: Sequence[Any], ids: Sequence[int], caller: int) -> None:
        self.ids = [int(i) for i in ids]
        self._fresh, self._caller = list(fresh), caller
        self._handles: Optional[List[Any]] = None

    def open(self, secret: Any) -> None:
        """Links to every fresh server proven with ``secret``, connected now (a ping each, answered in order with
        the loads after it; a fresh server that cannot be reached fails its first load instead)."""
        for position in range(len(self._fresh)):
            self.server(position, secret).ping()

    def server(self, position: int, secret: Any) -> Remote:
        if self._handles is None:
            self._handles = [h if secret is None else BesideLinkedHandle(h, secret, self._caller) for h in self._fresh]
        handle = self._handles[position]
        return Remote(handle, ServerAPI, beside=isinstance(handle, BesideLinkedHandle))

    def close(self) -> None:
        for handle in self._handles or ():
            if isinstance(handle, BesideLinkedHandle):
                handle.close()


def _merge_repeats(
    keys: np.ndarray, grads: np.ndarray, parts: Sequence[Tuple[np.ndarray, Optional[np.ndarray]]]
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A sync step's parts merged where some carry repeat counts: each key once, its gradients summed (already
    divided by the participants), its count the most any one worker's part gives it: W workers that each held a
    row for c steps stand for c steps of the mean over workers, not W * c."""
    unique, inverse = np.unique(keys, return_inverse=True)
    summed = np.zeros((unique.size, grads.shape[1]), np.float32)
    np.add.at(summed, inverse, grads)
    counts = np.zeros(unique.size, np.int64)
    start = 0
    for part_keys, part_repeats in parts:
        mine = np.zeros(unique.size, np.int64)
        np.add.at(
            mine, inverse[start : start + part_keys.size], 1 if part_repeats is None else part_repeats.astype(np.int64)
        )
        counts = np.maximum(counts, mine)
        start += part_keys.size
    return unique, summed, np.minimum(counts, MAX_REPEATS).astype(np.uint32)
