"""ParameterServer: one embedding shard per table, pulled from and pushed to by batches of keys.

A plain object: it knows nothing of threads, Ray or the network, so the same class runs inside this process
(:class:`xdl_ec.ps.backend.LocalBackend`) and inside a Ray actor (:class:`xdl_ec.ps.backend.RayBackend`); the
backend serialises calls to one server (an actor runs one call at a time), and the lock below keeps it safe when
it is called directly from several threads.

Sync mode (``participants > 1``): the pushes of one step from several workers are buffered until all
``participants`` arrived, then applied as ONE shard push of the concatenation in worker order, each worker's
gradients divided by ``participants`` (the mean over the global batch, like the dense gradients). The shard sums
duplicate keys in that fixed order, so the result does not depend on which worker's push arrived first.

Seams for fault tolerance (issue 6): every push carries the sender's sequence number and is answered by a
:class:`PushAck` naming it; ``last_seq`` records how far each sender's pushes were accepted, so a replayed push is
recognised and a rebuilt server can tell the workers where to resume.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any, Dict, Tuple

import numpy as np

from .. import init as init_module
from .. import optim as optim_module
from ..table import EmbeddingTable, as_keys, as_rows


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """How to build one table's shard on every server (picklable: it travels to Ray actors)."""

    name: str
    dim: int
    optimizer: optim_module.Optimizer
    initializer: init_module.Initializer
    seed: int = 0
    block_slots: int = 1024


@dataclasses.dataclass(frozen=True)
class PushAck:
    """A server's answer to a push: ``applied`` is False while a sync step waits for other workers' pushes."""

    server: int
    worker: int
    seq: int
    step: int
    applied: bool
    durable: int = 0  # --ft ec: this worker's highest push seq to this server that is parity-durable


class ParameterServer:
    """Server ``index`` of a cluster: one shard per table (the keys the router assigns it), byte counters, stats."""

    def __init__(self, index: int, tables: Tuple[TableSpec, ...] = ()) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"index: must be a non-negative int, got {index!r}")
        self.index = index
        self._tables: Dict[str, EmbeddingTable] = {}
        self._lock = threading.Lock()
        # (table, step) -> {worker: (keys, grads)} of a sync step still waiting for pushes
        self._pending: Dict[Tuple[str, int], Dict[int, Tuple[np.ndarray, np.ndarray]]] = {}
        self.last_seq: Dict[int, int] = {}
        self._pending_seqs: Dict[Tuple[str, int], Dict[int, int]] = {}  # seqs of the buffered sync pushes
        self._parity: Any = None  # --ft ec: a ParityAgent (xdl_ec.ps.parity_agent), see attach_parity
        self.crash_requested = False  # set by injected crashes: the backend drops this server after the call
        self._agent: Any = None  # a fault-tolerance agent living with this server (see attach_agent)
        self._counters = {"bytes_in": 0, "bytes_out": 0, "pulls": 0, "pushes": 0, "keys_pulled": 0,
                          "keys_pushed": 0, "steps_applied": 0}
        for spec in tables:
            self.create_table(spec)

    # ---- tables ---------------------------------------------------------------------------------------
    def create_table(self, spec: TableSpec) -> None:
        """Adds a table's (empty) shard; ValueError when a table of that name exists."""
        if not isinstance(spec, TableSpec):
            raise TypeError(f"spec must be a TableSpec, got {type(spec).__name__}")
        with self._lock:
            if spec.name in self._tables:
                raise ValueError(f"table {spec.name!r} already exists on server {self.index}")
            self._tables[spec.name] = EmbeddingTable(spec.name, spec.dim, optimizer=spec.optimizer,
                                                     initializer=spec.initializer, seed=spec.seed,
                                                     block_slots=spec.block_slots)

    def _table(self, name: str) -> EmbeddingTable:
        if self.crash_requested:
            self._die()
        table = self._tables.get(name)
        if table is None:
            raise ValueError(f"table: server {self.index} has no table {name!r} (tables: {sorted(self._tables)})")
        return table

    def ping(self) -> int:
        """Answers its index: the liveness probe of the scheduler."""
        return self.index

    def take_index(self, index: int) -> None:
        """A spare server becomes server ``index`` (replacing a dead one); only while it has served nothing."""
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"index: must be a non-negative int, got {index!r}")
        with self._lock:
            if self._parity is not None or self.last_seq or any(len(t) for t in self._tables.values()):
                raise ValueError(f"take_index: server {self.index} already holds state; only an idle spare can "
                                 f"become server {index}")
            self.index = index

    # ---- training path --------------------------------------------------------------------------------
    def pull(self, table: str, keys: Any) -> np.ndarray:
        """Rows float32[len(keys), dim], inserting missing keys with their initial rows."""
        t = self._table(table)
        keys = as_keys(keys)
        if self._parity is None:
            rows = t.pull(keys)
        else:  # inserted rows are deltas too; the lock keeps delta seqs in the shard's order
            with self._lock:
                rows = self._parity.pull(self, t, keys)
        with self._lock:
            c = self._counters
            c["pulls"] += 1
            c["keys_pulled"] += keys.size
            c["bytes_in"] += keys.nbytes
            c["bytes_out"] += rows.nbytes
        return rows

    def find(self, table: str, keys: Any) -> Tuple[np.ndarray, np.ndarray]:
        """(rows, found) without inserting (evaluation): missing rows are zeros."""
        t = self._table(table)
        keys = as_keys(keys)
        rows, found = t.find(keys)
        with self._lock:
            self._counters["bytes_in"] += keys.nbytes
            self._counters["bytes_out"] += rows.nbytes + np.asarray(found).nbytes
        return rows, found

    def push(self, table: str, keys: Any, grads: Any, step: int, worker: int = 0, seq: int = 0,
             participants: int = 1) -> PushAck:
        """Applies per-key gradients at optimizer ``step`` (1-based), or buffers them until all ``participants``
        workers pushed ``step`` (sync mode; see the module docstring). Bad input raises and changes nothing."""
        t = self._table(table)
        keys = as_keys(keys)
        grads = as_rows(grads, keys.size, t.dim, "grads", "dim")
        for name, value, low in (("step", step, 1), ("worker", worker, 0), ("seq", seq, 0), ("participants", participants, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{name}: must be an int >= {low}, got {value!r}")
        if participants > 1 and worker >= participants:
            raise ValueError(f"worker: {worker} is not below participants ({participants})")
        step, worker, seq, participants = int(step), int(worker), int(seq), int(participants)
        if not np.all(np.isfinite(grads)):
            raise ValueError(f"grads: NaN or Inf in the push of worker {worker} at step {step}; table unchanged")
        with self._lock:
            if self._parity is not None and self._parity.take_crash_before_apply():
                self.crash_requested = True
                self._die()
            if self._parity is not None and seq and seq <= self.last_seq.get(worker, 0):
                # a replayed push this server already applied (or buffered): exactly once
                return PushAck(self.index, worker, seq, step, True, self._parity.durable(worker))
            self._counters["pushes"] += 1
            self._counters["keys_pushed"] += keys.size
            self._counters["bytes_in"] += keys.nbytes + grads.nbytes
            if participants == 1:
                self._apply(t, keys, grads, step, {worker: seq})
                self._counters["steps_applied"] += 1
                applied = True
                if self._agent is not None:
                    self._agent.on_push(table, keys, step)
            else:
                pending = self._pending.setdefault((table, step), {})
                if worker in pending:
                    raise ValueError(f"worker {worker} already pushed step {step} of table {table!r} to server "
                                     f"{self.index}")
                pending[worker] = (keys, grads)
                self._pending_seqs.setdefault((table, step), {})[worker] = seq
                applied = len(pending) == participants
                if applied:
                    del self._pending[(table, step)]
                    self._apply_merged(t, pending, step, participants, self._pending_seqs.pop((table, step)))
            self.last_seq[worker] = max(seq, self.last_seq.get(worker, 0))
            durable = self._parity.durable(worker) if self._parity is not None else 0
        return PushAck(self.index, worker, seq, step, applied, durable)

    def _apply(self, table: EmbeddingTable, keys: np.ndarray, grads: np.ndarray, step: int,
               seqs: Dict[int, int]) -> None:
        if self._parity is None:
            table.push(keys, grads, step=step)
        else:
            self._parity.push(self, table, keys, grads, step, seqs)

    def _apply_merged(self, table: EmbeddingTable, pushes: Dict[int, Tuple[np.ndarray, np.ndarray]], step: int,
                      participants: int, seqs: Dict[int, int]) -> None:
        order = sorted(pushes)
        keys = np.concatenate([pushes[w][0] for w in order])
        grads = np.concatenate([pushes[w][1] / np.float32(participants) for w in order])
        self._apply(table, keys, grads, step, seqs)
        self._counters["steps_applied"] += 1
        if self._agent is not None:
            self._agent.on_push(table.name, keys, step)

    # ---- fault-tolerance seams (issue 6) --------------------------------------------------------------
    def attach_agent(self, agent: Any) -> None:
        """Keeps ``agent`` (e.g. CPR's per-server checkpointer) with this server: it dies with the server, sees
        every applied push through ``agent.on_push(table, keys, step)``, and the driver calls its methods with
        :meth:`agent_call`."""
        with self._lock:
            self._agent = agent

    def agent_call(self, method: str, *args: Any) -> Any:
        """``agent.<method>(self, *args)`` under this server's lock (no push runs meanwhile)."""
        if self._agent is None:
            raise ValueError(f"server {self.index} has no fault-tolerance agent; attach_agent first")
        with self._lock:
            return getattr(self._agent, method)(self, *args)

    def tables(self) -> Dict[str, EmbeddingTable]:
        """The shards by table name (for an agent running in this server's process)."""
        return dict(self._tables)

    def replace_tables(self, tables: Dict[str, EmbeddingTable]) -> None:
        """Swaps in restored shards (same names) and drops sync pushes still buffered; the old shards are closed.
        Called with the lock held (from an agent) or at a quiescent point."""
        unknown = sorted(set(tables) - set(self._tables))
        if unknown:
            raise ValueError(f"tables: server {self.index} has no tables {unknown} (tables: {sorted(self._tables)})")
        for name, table in tables.items():
            old, self._tables[name] = self._tables[name], table
            if old is not table:
                old.close()
        self._pending.clear()
        self._pending_seqs.clear()

    def save_shard(self, directory: str, step: int) -> int:
        """Writes every table to ``directory`` as a ShardCheckpoint (not atomic by itself: a job checkpoint's
        commit publishes it); returns the bytes written."""
        from ..ft.checkpoint import ShardCheckpoint

        with self._lock:
            return ShardCheckpoint.write(directory, self._tables, step=step, atomic=False).nbytes()

    def load_shard(self, directory: str) -> int:
        """Replaces every table by the ShardCheckpoint in ``directory`` (verified before anything changes);
        returns the rows loaded."""
        from ..ft.checkpoint import ShardCheckpoint

        with self._lock:
            restored = ShardCheckpoint.open(directory).restore(self._tables)
            self.replace_tables(restored)
            return sum(len(t) for t in restored.values())

    # ---- erasure-coded parity (--ft ec, see xdl_ec.ft.ec_strategy) -------------------------------------
    def attach_parity(self, n: int, k: int, r: int, seq: int = 0, worker_seqs: Any = None) -> None:
        """Makes this server a member of the (k, r) parity layout over n servers: it holds parity blocks, and once
        ``parity_call("connect", servers)`` named the servers' handles (index i = server i) its mutations are
        forwarded to its parity holders, starting after delta seq ``seq``; ``worker_seqs`` ({worker: push seq})
        are the pushes its state already includes."""
        from ..ft.parity_agent import ParityAgent

        with self._lock:
            tables = {name: (t.shard.block_slots, t.record_bytes) for name, t in self._tables.items()}
            self._parity = ParityAgent(self.index, n, k, r, tables, seq, worker_seqs)
            if worker_seqs:
                self.last_seq.update({int(w): int(s) for w, s in worker_seqs.items()})

    def parity_holder(self) -> Any:
        """This server's C++ ParityHolder, for forwarders in the same process (they deliver to it directly)."""
        if self._parity is None:
            raise ValueError(f"server {self.index} keeps no parity (--ft ec not attached); call attach_parity first")
        return self._parity.holder

    def push_state(self, worker: int) -> Tuple[bool, int]:
        """(parity attached, last push seq of ``worker``): a restarted worker continues its predecessor's seqs and,
        under --ft ec, keeps its pushes until durable."""
        with self._lock:
            return self._parity is not None, self.last_seq.get(int(worker), 0)

    def _die(self) -> None:
        """An injected crash: in a Ray actor the process exits before serving anything else; in one process the
        backend has dropped this object already, so a call reaching it anyway fails as a lost server's would."""
        from ..ft.parity_agent import _in_ray_actor

        if _in_ray_actor():
            os._exit(1)
        from .backend import ServerLost

        raise ServerLost(self.index, "it crashed (injected)")

    def parity_call(self, method: str, *args: Any) -> Any:
        """``agent.<method>(self, *args)`` of the parity agent (fragment reads, parity batches, restore)."""
        if self.crash_requested:
            self._die()
        if self._parity is None:
            raise ValueError(f"server {self.index} keeps no parity (--ft ec not attached); call attach_parity first")
        return getattr(self._parity, method)(self, *args)

    # ---- state ----------------------------------------------------------------------------------------
    def export(self, table: str) -> Dict[str, np.ndarray]:
        """Every live row of the table: dict(keys, values, state)."""
        return self._table(table).export()

    def size(self, table: str) -> int:
        return len(self._table(table))

    def stats(self) -> Dict[str, Any]:
        """Counters (bytes in/out, pulls, pushes, keys), rows per table and pending sync steps."""
        with self._lock:
            out: Dict[str, Any] = dict(self._counters)
            out["pending_steps"] = len(self._pending)
        out["index"] = self.index
        out["rows"] = {name: len(t) for name, t in self._tables.items()}
        return out

    def close(self) -> None:
        """Releases the shards (unregisters them from the process registry). Idempotent."""
        with self._lock:
            if self._parity is not None:
                self._parity.close()
            for t in self._tables.values():
                t.close()
            self._tables.clear()
            self._pending.clear()

