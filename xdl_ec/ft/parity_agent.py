"""ParityAgent: what ``--ft ec`` adds to one parameter server; it lives, and dies, with the server.

A server plays every role of the code at once, each a part of its own here: a data server
(:class:`~xdl_ec.ft.delta_forwarding.DeltaForwarding`: its mutations' deltas on their way to the parity holders), a
parity holder (:class:`~xdl_ec.ft.held_parity.HeldParity`), a survivor answering decodes
(:class:`~xdl_ec.ft.fragment_reads.FragmentReads`) and, on a replacement, a server in restore mode
(:class:`~xdl_ec.ft.shard_restore.ShardRestore`). The agent is the server's seam to them
(:class:`~xdl_ec.ps.agent.ServerAgent`): the server calls :meth:`ParityAgent.push` and :meth:`ParityAgent.pull`
under its lock, so delta seqs follow the order in which the shard changed; the driver and the other servers call
the rest by name through the server's ``agent_call`` (``Remote(handle, ParityAgent, agent=True)``), and each such
method hands the call to the part that answers it. The protocol: docs/design/ec-protocol.md.
"""

from __future__ import annotations

import os
import resource
import threading
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.ft.consistent_decode import VersionedFragment
from xdl_ec.ft.delta_forwarding import DeltaForwarding, ForwardingProgress
from xdl_ec.ft.fragment_reads import FragmentReads
from xdl_ec.ft.held_parity import HeldParity
from xdl_ec.ft.injected_crash import InjectedCrash
from xdl_ec.ft.shard_restore import ShardRestore
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.agent import AgentHost, ServerAgent
from xdl_ec.ps.backend import in_ray_actor
from xdl_ec.ps.handle import Handle
from xdl_ec.sparse.memory_budget import MemoryBudget
from xdl_ec.sparse.table import EmbeddingTable


class ParityAgent(ServerAgent):
    """Server ``index`` of ``n`` under a (k, r) code; ``tables`` {name: (block_slots, record_bytes)}; its delta
    stream continues after ``seq``, whose state included the pushes ``worker_seqs`` {worker: seq}. ``secret``: the
    job's JobSecret, which its parity links and receiver prove membership with (see xdl_ec.ft.parity_link).
    ``memory``: the server's budget, whose parity share keeps the held parity's hot records in RAM and the rest
    under its spill dir (None: all in RAM)."""

    logs_pushes = True  # a push is safe only once its deltas reached the parity holders

    def __init__(
        self,
        index: int,
        n: int,
        k: int,
        r: int,
        tables: Mapping[str, Tuple[int, int]],
        seq: int = 0,
        worker_seqs: Optional[Mapping[int, int]] = None,
        *,
        secret: JobSecret,
        memory: Optional[MemoryBudget] = None,
    ) -> None:
        if not isinstance(secret, JobSecret):
            raise TypeError(
                f"ParityAgent: secret must be the job's JobSecret (JobSecret.generate() on the driver), "
                f"got {type(secret).__name__}"
            )
        self.index, self.n, self.k, self.r = index, n, k, r
        self.tables = {name: (int(bs), int(rb)) for name, (bs, rb) in tables.items()}
        self.held = HeldParity(index, n, k, r, self.tables, secret, memory)
        self.forwarding = DeltaForwarding(index, n, k, r, self.tables, seq, worker_seqs or {}, secret)
        self.fragments = FragmentReads(self.tables, self.forwarding, self.held)
        self.shard_restore = ShardRestore(index, n, k, r, self.tables)
        self.crash = InjectedCrash()

    @property
    def forwarder(self) -> _core.DeltaForwarder:
        """This server's C++ DeltaForwarder (its shards record their mutations on it)."""
        return self.forwarding.forwarder

    @property
    def holder(self) -> _core.ParityHolder:
        """This server's C++ ParityHolder (forwarders in this process apply to it directly)."""
        return self.held.holder

    # ---- the server's data path (called under the server's lock) ------------------------------------------
    def push(
        self,
        server: AgentHost,
        table: EmbeddingTable,
        keys: np.ndarray,
        grads: np.ndarray,
        step: int,
        pushes: Mapping[int, int],
        repeats: Optional[np.ndarray] = None,
        ttl_before: int = 0,
    ) -> None:
        """Applies a push to ``table``'s shard and records its deltas; ``pushes`` {worker: seq} it applies."""
        if self.crash.active and self._push_crashing(server, table, keys, grads, step, repeats, ttl_before):
            return
        if self.shard_restore.active:
            self.shard_restore.restore_touched(table, keys)
        # the core takes {worker: seq} as ints (numpy ints included) and raises on anything else
        table.shard.push(
            keys,
            grads,
            step,
            forwarder=self.forwarder,
            table=table.name,
            pushes=pushes,  # type: ignore[arg-type]  # a Mapping's keys are invariant: int is what it takes
            repeats=repeats,
            ttl_before=ttl_before,
        )

    def _push_crashing(
        self,
        server: AgentHost,
        table: EmbeddingTable,
        keys: np.ndarray,
        grads: np.ndarray,
        step: int,
        repeats: Optional[np.ndarray],
        ttl_before: int,
    ) -> bool:
        """A push while an injected crash is armed or taken: dies before applying it, or applies it without
        forwarding (the last push of a server dying after its answer, and any push after it); False when the crash
        armed is not this push's business (the push goes on as usual)."""
        if self.crash.take_before_apply():
            server.die()
        if self.crash.take_after_apply():
            self.forwarder.drop_pending()
            table.shard.push(keys, grads, step, repeats=repeats, ttl_before=ttl_before)
            server.crash_requested = True
            if in_ray_actor():  # a real process death, right after this answer is sent
                threading.Timer(1.0, os._exit, args=(1,)).start()  # at the latest; a next call exits at once
            return True
        if self.crash.taken:
            table.shard.push(keys, grads, step, repeats=repeats, ttl_before=ttl_before)
            return True
        return False

    def pull(self, server: AgentHost, table: EmbeddingTable, keys: np.ndarray) -> np.ndarray:
        """Rows of ``keys``; rows it inserts are a mutation too."""
        if self.crash.taken:
            return table.shard.pull(keys)
        if self.shard_restore.active:
            self.shard_restore.restore_touched(table, keys)
        return table.shard.pull(keys, forwarder=self.forwarder, table=table.name)

    def pull_stale(
        self, server: AgentHost, table: EmbeddingTable, keys: np.ndarray, known: np.ndarray, staleness: int
    ) -> tuple:
        """A caching worker's pull; rows it inserts are a mutation too."""
        if self.crash.taken:
            return table.shard.pull_stale(keys, known, staleness)
        self.shard_restore.restore_touched(table, keys)
        return table.shard.pull_stale(keys, known, staleness, forwarder=self.forwarder, table=table.name)

    def load_rows(
        self, server: AgentHost, table: EmbeddingTable, keys: np.ndarray, values: np.ndarray, state: np.ndarray
    ) -> None:
        """Saved rows of a resumed run: forwarded to the parity holders as a push's deltas are."""
        if self.crash.taken:
            table.shard.load(keys, values, state)
            return
        table.shard.load(keys, values, state, forwarder=self.forwarder, table=table.name)

    def durable(self, worker: int) -> int:
        return self.forwarding.durable(worker)

    def native_path(self) -> Tuple[bool, Optional[_core.DeltaForwarder]]:
        """The core applies plain steps itself, recording into this forwarder; not while a crash is armed or
        taken (push's own path). Shards under restore: the core declines those steps itself (their blocks are
        restored here first, ShardRestore.restore_touched)."""
        return not self.crash.active, self.forwarder

    # ---- failure injection (ErasureCoded.arm_crash_*) -------------------------------------------------------
    def arm_crash_before_apply(self, server: AgentHost) -> None:
        """The server dies on its next push, before applying it (the push fails)."""
        self.crash.arm_before_apply()

    def arm_crash_after_apply(self, server: AgentHost) -> None:
        """The next push is applied and answered, its deltas are never forwarded, and the server dies (one
        process: its object is dropped after the answer; Ray: the process exits)."""
        self.crash.arm_after_apply()

    # ---- the data server's forwarding -----------------------------------------------------------------------
    def connect(self, server: AgentHost, servers: Sequence[Handle]) -> None:
        """Starts forwarding to this server's parity holders among ``servers`` (their agents exist by now)."""
        self.forwarding.connect(servers)

    def set_holder(self, server: AgentHost, holder: int, handle: Handle) -> None:
        """(Re)connects parity holder ``holder`` at ``handle`` (a replacement's)."""
        self.forwarding.links.connect(holder, handle)

    def flush(self, server: AgentHost) -> None:
        """Parity catches up now (DeltaForwarding.flush)."""
        self.forwarding.flush()

    def progress(self, server: AgentHost) -> ForwardingProgress:
        """The forwarder's progress and delivery errors, after a flush (DeltaForwarding.progress)."""
        return self.forwarding.progress()

    def drain(self, server: AgentHost, timeout: float = 1.0) -> ForwardingProgress:
        """The progress once nothing is queued or in flight for a live holder, waiting up to ``timeout`` seconds
        (DeltaForwarding.drain)."""
        return self.forwarding.drain(timeout)

    # ---- the parity holder --------------------------------------------------------------------------------
    def parity_address(self, server: AgentHost) -> Tuple[str, int]:
        """(host, port) of this holder's ParityReceiver, where remote senders' links deliver their batches."""
        return self.held.address(lambda: bool(server.crash_requested))

    def apply_parity(self, server: AgentHost, sender: int, batches: np.ndarray, durable: int) -> int:
        """A remote sender's serialised batches, through a Ray call (its link could not reach parity_address);
        returns how far its stream is applied."""
        return self.held.apply(sender, batches, durable)

    def set_parity_extent(self, server: AgentHost, table: str, parity_blocks: int) -> None:
        """A replacement holder learns ``table``'s extent (its parity blocks being rebuilt) before its senders'
        batches arrive: the holder accepts entries up to it (plus the growth rule's allowance)."""
        self.holder.set_extent(table, int(parity_blocks))

    def security_events(self, server: AgentHost) -> List[str]:
        """The receiver's newest warnings (peers refused, batches refused), oldest first."""
        return self.held.security_events()

    def peak_rss(self, server: AgentHost) -> int:
        """Peak resident memory of this server's process in bytes (what a flood of strangers may cost it)."""
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

    def applied(self, server: AgentHost, sender: int) -> int:
        return self.holder.applied(sender)

    def rollback(self, server: AgentHost, sender: int, to_seq: int) -> Dict[int, int]:
        return self.holder.rollback(sender, to_seq)

    def reset_sender(self, server: AgentHost, sender: int, seq: int, worker_seqs: Mapping[int, int]) -> None:
        self.held.reset_sender(sender, seq, worker_seqs)

    def write_parity_if(
        self, server: AgentHost, table: str, block: int, data: np.ndarray, expected: Mapping[int, int]
    ) -> bool:
        return self.held.write_if(table, block, data, expected)

    def write_parity(self, server: AgentHost, table: str, block: int, data: np.ndarray) -> None:
        self.held.write(table, block, data)

    # ---- fragments for a decode ---------------------------------------------------------------------------
    def extent(self, server: AgentHost, table: str) -> Tuple[int, int]:
        """(data blocks, parity blocks) this server holds for ``table``."""
        return int(server.table(table).shard.num_blocks), int(self.holder.num_blocks(table))

    def read_data(self, server: AgentHost, table: str, block: int, offset: int, width: int) -> np.ndarray:
        return self.fragments.data(server.table(table).shard, table, block, offset, width)

    def read_parity(self, server: AgentHost, table: str, block: int, offset: int, width: int) -> np.ndarray:
        return self.held.read(table, block, offset, width)[0]

    def read_parity_at(
        self, server: AgentHost, table: str, block: int, offset: int, width: int
    ) -> Tuple[np.ndarray, Dict[int, int]]:
        """(bytes, applied seq per sender) read atomically: which version of each sender's data they encode."""
        return self.held.read(table, block, offset, width)

    def read_many(
        self, server: AgentHost, table: str, reads: Sequence[Tuple[str, int, int, int]]
    ) -> List[VersionedFragment]:
        """The fragments a decode reads from this server, in one call (FragmentReads.many)."""
        return self.fragments.many(server, table, reads)

    # ---- the replacement's restore ------------------------------------------------------------------------
    def begin_restore(
        self,
        server: AgentHost,
        table: str,
        keys: np.ndarray,
        slots: np.ndarray,
        high_water: int,
        servers: Sequence[Handle],
        unavailable: Sequence[int],
    ) -> int:
        """Installs the recovered key index of ``table`` (ShardRestore.begin); returns the blocks to restore."""
        return self.shard_restore.begin(server.table(table).shard, table, keys, slots, high_water, servers, unavailable)

    def restore_block(self, server: AgentHost, table: str, block: int, data: np.ndarray) -> bool:
        return bool(server.table(table).shard.restore_block(block, data))

    def block_missing(self, server: AgentHost, table: str, block: int) -> bool:
        """Whether data block ``block`` of ``table`` still waits to be restored (a degraded read may have done it)."""
        return bool(server.table(table).shard.block_missing(block))

    # ---- figures and the end ------------------------------------------------------------------------------
    def stats(self, server: AgentHost) -> Dict[str, int]:
        return {
            "parity_bytes": int(self.holder.bytes),
            **self.held.tier_counts(),
            "degraded_reads": self.shard_restore.degraded_reads,
            **self.forwarding.stats(),
        }

    def close(self) -> None:
        """The server is gone: nothing more is forwarded, and forwarders of other servers in this process find
        this holder closed (as a call to a dead server fails)."""
        self.forwarding.close()
        self.held.close()


def parity_agent_for(
    server: AgentHost,
    n: int,
    k: int,
    r: int,
    seq: int = 0,
    worker_seqs: Optional[Mapping[int, int]] = None,
    secret: Optional[JobSecret] = None,
) -> ParityAgent:
    """The ParityAgent of ``server`` (its ``attach_agent`` factory): member ``server.index`` of the (k, r) layout
    over n servers, its delta stream continuing after ``seq``; ``worker_seqs`` {worker: push seq} are the pushes
    its state already includes (a rebuilt server); ``secret`` the job's JobSecret (required)."""
    tables = {name: (t.shard.block_slots, t.record_bytes) for name, t in server.tables().items()}
    if worker_seqs:
        server.note_push_seqs(worker_seqs)
    return ParityAgent(
        server.index,
        n,
        k,
        r,
        tables,
        seq,
        worker_seqs,
        secret=secret,  # type: ignore[arg-type]
        memory=server.memory,
    )
