"""ParityAgent: what ``--ft ec`` adds to one parameter server (it lives, and dies, with the server).

- as a data server: a C++ :class:`~xdl_ec._core.DeltaForwarder`. The server's shard records every mutation's slot
  deltas on it without leaving C++ (``shard.push(..., forwarder=...)``); it routes them into one batch per parity
  holder and delivers them in the background, from its own thread to holders in this process and through a
  :class:`~xdl_ec.ft.parity_link.RemoteHolderLink` (a TCP connection) to holders behind Ray actors;
- as a parity holder: a C++ :class:`~xdl_ec._core.ParityHolder` (parity blocks, applied seqs, undo log), and for
  remote senders a :class:`~xdl_ec.ft.parity_link.ParityReceiver` applying what their links send;
- for recovery: fragment reads of its data and parity blocks, and on a replacement server the restore of its
  shards (C++ ``Recovery`` decoding from the survivors: a block touched before the rebuild reaches it is decoded on
  demand, a degraded read).

The server calls :meth:`push` and :meth:`pull` under its lock, so delta sequence numbers follow the order in which
the shard changed; the driver reaches the other methods through the server's ``agent_call`` (``Remote(handle,
ParityAgent, agent=True)``). See
:mod:`xdl_ec.ft.ec_strategy` for the protocol.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.agent import ServerAgent
from xdl_ec.ps.backend import in_ray_actor
from xdl_ec.ps.remote import Remote

from .parity_link import ParityReceiver, RemoteHolderLink

# ParityAgent.drain re-checks its forwarder this often when nothing signals it (in-process holders are served by
# the C++ thread, which does not); the remote links wake it at once after each delivery
DRAIN_POLL_SECONDS = 0.001
# consistent_decode retries at once (each retry behind a flush) until misses come closer together than this
REFLUSH_SECONDS = 0.002


def holders_of(index: int, n: int, k: int, r: int) -> List[int]:
    """The servers holding parity of some stripe ``index`` has data in: (index + d) mod n for d in [1, k + r)."""
    return sorted({(index + d) % n for d in range(1, k + r)})


class ParityAgent(ServerAgent):
    """Server ``index`` of ``n`` under a (k, r) code; ``tables`` {name: (block_slots, record_bytes)}; its delta
    stream continues after ``seq``, whose state included the pushes ``worker_seqs`` {worker: seq}. ``secret``: the
    job's JobSecret, which its parity links and receiver prove membership with (see xdl_ec.ft.parity_link)."""

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
    ) -> None:
        if not isinstance(secret, JobSecret):
            raise TypeError(
                f"ParityAgent: secret must be the job's JobSecret (JobSecret.generate() on the driver), "
                f"got {type(secret).__name__}"
            )
        self.index, self.n, self.k, self.r = index, n, k, r
        self._secret = secret
        self.tables = {name: (int(bs), int(rb)) for name, (bs, rb) in tables.items()}
        self.holder = _core.ParityHolder(index, n, k, r, {name: bs * rb for name, (bs, rb) in self.tables.items()})
        self.forwarder = _core.DeltaForwarder(
            index, n, k, r, self.tables, int(seq), {int(w): int(s) for w, s in (worker_seqs or {}).items()}
        )
        self._links: Dict[int, RemoteHolderLink] = {}
        self._receiver: Optional[ParityReceiver] = None  # made when a remote sender first asks for it
        self._receiver_lock = threading.Lock()
        self._delivered = threading.Condition()  # notified by the remote links after each ack or failure
        self._crash_armed = False
        self._crash_before = False
        self.crashed = False
        self.degraded_reads = 0  # blocks decoded on demand because an access touched them before the rebuild
        self._restoring: Dict[str, Tuple[Sequence[Any], List[int]]] = {}  # table -> (servers, unavailable)
        self._stripe_layout: Any = None
        self._recoveries: Dict[str, Any] = {}

    def connect(self, server: Any, servers: Sequence[Any]) -> None:
        """Starts forwarding to this server's parity holders among ``servers`` (their agents exist by now)."""
        for h in self.forwarder.holders:
            self.set_holder(server, h, servers[h])

    # ---- data-server side (called under the server's lock) --------------------------------------------
    def push(
        self,
        server: Any,
        table: Any,
        keys: np.ndarray,
        grads: np.ndarray,
        step: int,
        pushes: Mapping[int, int],
        repeats: Optional[np.ndarray] = None,
        ttl_before: int = 0,
    ) -> None:
        """Applies a push to ``table``'s shard and records its deltas; ``pushes`` {worker: seq} it applies."""
        if self._crash_before or self._crash_armed or self.crashed:  # one test on the training path
            if self.take_crash_before_apply():  # injected: dies before applying this push (the push fails)
                server.die()
            if self._crash_armed:  # injected: dies after applying (and acking) this push, before forwarding it
                self._crash_armed = False
                self.crashed = True
                self.forwarder.drop_pending()
                table.shard.push(keys, grads, step, repeats=repeats, ttl_before=ttl_before)
                server.crash_requested = True
                if in_ray_actor():  # a real process death, right after this answer is sent
                    threading.Timer(1.0, os._exit, args=(1,)).start()  # at the latest; a next call exits at once
                return
            if self.crashed:
                table.shard.push(keys, grads, step, repeats=repeats, ttl_before=ttl_before)
                return
        if self._restoring:
            self._restore_touched(table, keys)
        # the core takes {worker: seq} as ints (numpy ints included) and raises on anything else
        table.shard.push(
            keys,
            grads,
            step,
            forwarder=self.forwarder,
            table=table.name,
            pushes=pushes,
            repeats=repeats,
            ttl_before=ttl_before,
        )

    def pull(self, server: Any, table: Any, keys: np.ndarray) -> np.ndarray:
        """Rows of ``keys``; rows it inserts are a mutation too."""
        if self.crashed:
            return table.shard.pull(keys)
        if self._restoring:
            self._restore_touched(table, keys)
        return table.shard.pull(keys, forwarder=self.forwarder, table=table.name)

    def pull_stale(self, server: Any, table: Any, keys: np.ndarray, known: np.ndarray, staleness: int) -> tuple:
        """A caching worker's pull; rows it inserts are a mutation too."""
        if self.crashed:
            return table.shard.pull_stale(keys, known, staleness)
        self._restore_touched(table, keys)
        return table.shard.pull_stale(keys, known, staleness, forwarder=self.forwarder, table=table.name)

    def load_rows(self, server: Any, table: Any, keys: np.ndarray, values: np.ndarray, state: np.ndarray) -> None:
        """Saved rows of a resumed run: forwarded to the parity holders as a push's deltas are."""
        if self.crashed:
            table.shard.load(keys, values, state)
            return
        table.shard.load(keys, values, state, forwarder=self.forwarder, table=table.name)

    def durable(self, worker: int) -> int:
        return self.forwarder.durable_seq(worker)

    def native_path(self) -> Tuple[bool, Any]:
        """The core applies plain steps itself, recording into this forwarder; not while a crash is armed or
        taken (push's own path). Shards under restore: the core declines those steps itself (their blocks are
        restored here first, _restore_touched)."""
        return not (self._crash_before or self._crash_armed or self.crashed), self.forwarder

    def arm_crash_before_apply(self, server: Any) -> None:
        """Failure injection: the server dies on its next push, before applying it (the push fails)."""
        self._crash_before = True

    def take_crash_before_apply(self) -> bool:
        armed, self._crash_before = self._crash_before, False
        return armed

    def arm_crash_after_apply(self, server: Any) -> None:
        """Failure injection: the next push is applied and answered, its deltas are never forwarded, and the
        server dies (one process: its object is dropped after the answer; Ray: the process exits)."""
        self._crash_armed = True

    # ---- parity-holder side --------------------------------------------------------------------------
    def apply_parity(self, server: Any, sender: int, batches: np.ndarray, durable: int) -> int:
        """A remote sender's serialised batches; returns how far its stream is applied. (RemoteHolderLink sends
        through this holder's ParityReceiver instead: see parity_address.)"""
        return self.holder.apply(sender, batches, durable)

    def parity_address(self, server: Any) -> Tuple[str, int]:
        """(host, port) of this holder's ParityReceiver, where remote senders' links deliver their batches; started
        on the first request (in one process nobody asks: forwarders there apply to the holder directly)."""
        with self._receiver_lock:
            if self.holder.closed:
                raise ValueError(f"parity_address: server {self.index}'s parity holder is closed (the server is gone)")
            if self._receiver is None:
                self._receiver = ParityReceiver(self.holder, self._secret, lambda: bool(server.crash_requested))
            return self._receiver.address

    def set_parity_extent(self, server: Any, table: str, parity_blocks: int) -> None:
        """A replacement holder learns ``table``'s extent (its parity blocks being rebuilt) before its senders'
        batches arrive: the holder accepts entries up to it (plus the growth rule's allowance)."""
        self.holder.set_extent(table, int(parity_blocks))

    def security_events(self, server: Any) -> List[str]:
        """The receiver's newest warnings (peers refused, batches refused), oldest first; [] without a receiver."""
        with self._receiver_lock:
            return list(self._receiver.events) if self._receiver is not None else []

    def peak_rss(self, server: Any) -> int:
        """Peak resident memory of this server's process in bytes (what a flood of strangers may cost it)."""
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

    def applied(self, server: Any, sender: int) -> int:
        return self.holder.applied(sender)

    def rollback(self, server: Any, sender: int, to_seq: int) -> Dict[int, int]:
        return self.holder.rollback(sender, to_seq)

    def reset_sender(self, server: Any, sender: int, seq: int, worker_seqs: Mapping[int, int]) -> None:
        self.holder.reset_sender(sender, seq, {int(w): int(s) for w, s in worker_seqs.items()})

    def progress(self, server: Any) -> Dict[str, Any]:
        """The forwarder's progress (seq, live_applied, pending, worker_seqs, down) and its delivery errors. Asked
        by a caller waiting for parity to catch up, so it also flushes the remote links."""
        self.flush(server)
        return {**self.forwarder.progress(), "errors": list(self.forwarder.errors)}

    def flush(self, server: Any) -> None:
        """Parity catches up now: the forwarder routes what it holds back for a fuller range, and remote links send
        what is queued instead of at their next interval."""
        self.forwarder.flush()
        for link in list(self._links.values()):
            link.flush()

    def drain(self, server: Any, timeout: float = 1.0) -> Dict[str, Any]:
        """:meth:`progress` once nothing is queued or in flight for a live holder, waiting here up to ``timeout``
        seconds (then ``pending`` is still True: ask again). The links are flushed, and again after each delivery
        while more is queued (a batch recorded while a send was in flight would else wait out the link's send
        interval). Waiting here, woken by the links, costs a caller one round trip to every server instead of a
        poll of progress calls (each round ~5-10 ms of Ray calls)."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= 60:
            raise ValueError(f"timeout: must be seconds in [0, 60], got {timeout!r}")
        deadline = time.monotonic() + timeout
        with self._delivered:  # held while checking: a delivery between the check and the wait is not missed
            while True:
                self.flush(server)
                progress = self.forwarder.progress()
                remaining = deadline - time.monotonic()
                if not progress["pending"] or remaining <= 0:
                    break
                self._delivered.wait(min(remaining, DRAIN_POLL_SECONDS))
        return {**progress, "errors": list(self.forwarder.errors)}

    def _notify_delivery(self) -> None:
        with self._delivered:
            self._delivered.notify_all()

    def set_holder(self, server: Any, holder: int, handle: Any) -> None:
        """(Re)connects parity holder ``holder`` at ``handle``: directly to its ParityHolder when it lives in
        this process, else through a RemoteHolderLink."""
        old = self._links.pop(holder, None)
        if old is not None:
            old.close()
        local = getattr(handle, "local_object", None)
        if local is not None:
            self.forwarder.set_holder(holder, local().agent.holder)
        else:
            self._links[holder] = RemoteHolderLink(
                self.forwarder,
                holder,
                handle,
                self.forwarder.set_holder(holder, None),  # type: ignore[arg-type]
                self._secret,  # None: a remote holder (the binding takes it)
                self._notify_delivery,
            )

    # ---- fragments -----------------------------------------------------------------------------------
    def extent(self, server: Any, table: str) -> Tuple[int, int]:
        """(data blocks, parity blocks) this server holds for ``table``."""
        return int(server.table(table).shard.num_blocks), int(self.holder.num_blocks(table))

    def read_data(self, server: Any, table: str, block: int, offset: int, width: int) -> np.ndarray:
        block_slots, record_bytes = self.tables[table]
        data = server.table(table).shard.read_block(block)
        if offset == 0 and width == record_bytes:
            return data
        return np.ascontiguousarray(data.reshape(block_slots, record_bytes)[:, offset : offset + width]).reshape(-1)

    def read_parity(self, server: Any, table: str, block: int, offset: int, width: int) -> np.ndarray:
        return self.read_parity_at(server, table, block, offset, width)[0]

    def read_many(self, server: Any, table: str, reads: Sequence[Tuple[str, int, int, int]]) -> List[tuple]:
        """The fragments a decode reads from this server, in one call (a batch of stripes: one round trip per
        server): each read (``"read_data"`` or ``"read_parity"``, block, offset, width) answered in order, a data
        block as (bytes, delta seq), all of them read under one hold of the server lock (mutations hold it, so
        they are at one seq), a parity block as :meth:`read_parity_at` answers it. Before the data reads, under
        the same hold, the forwarder delivers what it recorded (:meth:`flush`; in one process on this thread): the
        holders' parity then encodes the seq read unless a mutation slips in before the parity is read, where a
        lagging forwarder (it runs in the cores' idle time) would else make the decode's first reads disagree."""
        out: List[Any] = [None] * len(reads)
        if any(kind == "read_data" for kind, *_ in reads):
            with server.lock:
                self.flush(server)
                seq = self.forwarder.seq
                for i, (kind, block, offset, width) in enumerate(reads):
                    if kind == "read_data":
                        out[i] = (self.read_data(server, table, block, offset, width), seq)
        for i, (kind, block, offset, width) in enumerate(reads):
            if kind == "read_parity":
                out[i] = self.read_parity_at(server, table, block, offset, width)
            elif kind != "read_data":
                raise ValueError(f"read_many: a read is 'read_data' or 'read_parity', got {kind!r}")
        return out

    def read_parity_at(
        self, server: Any, table: str, block: int, offset: int, width: int
    ) -> Tuple[np.ndarray, Dict[int, int]]:
        """(bytes, applied seq per sender) read atomically: which version of each sender's data they encode."""
        return self.holder.read_block(table, block, self.tables[table][1], offset, width)

    def write_parity_if(self, server: Any, table: str, block: int, data: np.ndarray, expected: Dict[int, int]) -> bool:
        return self.holder.write_block_if(
            table, block, np.ascontiguousarray(data, dtype=np.uint8), {int(s): int(v) for s, v in expected.items()}
        )

    def write_parity(self, server: Any, table: str, block: int, data: np.ndarray) -> None:
        self.holder.write_block(table, block, np.ascontiguousarray(data, dtype=np.uint8))

    def stats(self, server: Any) -> Dict[str, int]:
        progress = self.forwarder.progress()
        return {
            "parity_bytes": int(self.holder.bytes),
            "degraded_reads": self.degraded_reads,
            "forwarded_bytes": int(self.forwarder.bytes_sent),
            "coalesced": int(progress["coalesced"]),
            # deltas recorded but not yet applied by every live holder: how far parity trails the shard
            "parity_lag": int(progress["seq"]) - int(progress["live_applied"]),
            "remote_sends": sum(link.sends for link in self._links.values()),
            "remote_send_bytes": sum(link.bytes_sent for link in self._links.values()),
            "links_over_ray": sum(link.transport != "tcp" for link in self._links.values()),
        }

    # ---- replacement side ----------------------------------------------------------------------------
    def begin_restore(
        self,
        server: Any,
        table: str,
        keys: np.ndarray,
        slots: np.ndarray,
        high_water: int,
        servers: Sequence[Any],
        unavailable: Sequence[int],
    ) -> int:
        """Installs the recovered key index of ``table``; a block touched before :meth:`restore_block` reached it
        is decoded on demand from ``servers`` (degraded read). Returns the number of blocks to restore."""
        down = sorted(int(u) for u in unavailable)

        def fault(block: int) -> np.ndarray:  # a degraded read: decoded from versions the parity agrees with
            self.degraded_reads += 1
            return self._decode_own_blocks(table, [block], servers, down)[0]

        shard = server.table(table).shard
        shard.begin_restore(keys, slots, int(high_water), fault)
        self._restoring[table] = (servers, down)
        return int(shard.missing_blocks)

    def _decode_own_blocks(
        self, table: str, blocks: Sequence[int], servers: Sequence[Any], down: List[int]
    ) -> List[np.ndarray]:
        """This server's lost data ``blocks`` of ``table``, decoded together from consistent fragments of the
        survivors (one round of reads: one call per survivor)."""
        block_slots, record_bytes = self.tables[table]
        recovery, layout, index = self._recovery(table), self._layout(), self.index
        stripes = [layout.data_slot(index, int(block))[0] for block in blocks]
        return consistent_decode(
            servers,
            table,
            block_slots,
            lambda d, p: [recovery.decode_data_block(index, int(block), down, d, p) for block in blocks],
            reads=stripe_reads(recovery, stripes, down, record_bytes),
        )[0]

    def _restore_touched(self, table: Any, keys: np.ndarray) -> None:
        """Under the server lock, before an access of ``keys`` to a shard under restore: the missing blocks
        holding their rows are decoded together and restored (one round of reads) rather than faulted in one by
        one, each fault a round of reads of its own on the step's path (on Ray, calls to every survivor)."""
        shard = table.shard
        if table.name not in self._restoring or not shard.missing_blocks:
            return
        blocks = shard.missing_blocks_of(keys)
        if len(blocks) < 2:
            return  # none, or one: the fault does the same
        servers, down = self._restoring[table.name]
        for block, data in zip(blocks, self._decode_own_blocks(table.name, blocks, servers, down)):
            if shard.restore_block(int(block), data):
                self.degraded_reads += 1

    def _layout(self) -> Any:
        if self._stripe_layout is None:
            self._stripe_layout = _core.StripeLayout(self.n, self.k, self.r)
        return self._stripe_layout

    def _recovery(self, table: str) -> Any:
        """The C++ Recovery of ``table``'s geometry (kept: it caches decode tables per erasure pattern; thread-safe,
        so accesses and the rebuild share it)."""
        if table not in self._recoveries:
            self._recoveries[table] = _core.Recovery(self.n, self.k, self.r, *self.tables[table])
        return self._recoveries[table]

    def restore_block(self, server: Any, table: str, block: int, data: np.ndarray) -> bool:
        return bool(server.table(table).shard.restore_block(block, data))

    def block_missing(self, server: Any, table: str, block: int) -> bool:
        """Whether data block ``block`` of ``table`` still waits to be restored (a degraded read may have done it)."""
        return bool(server.table(table).shard.block_missing(block))

    def close(self) -> None:
        """The server is gone: nothing more is forwarded, and forwarders of other servers in this process find
        this holder closed (as a call to a dead server fails)."""
        for link in self._links.values():
            link.close()
        self.forwarder.close()
        self.holder.close()
        with self._receiver_lock:
            if self._receiver is not None:
                self._receiver.close()


def _agent(handle: Any) -> Remote:
    """The ParityAgent of the server behind ``handle``, called beside the server's other calls: fragment reads and
    flushes take their own locks, and a rebuild's reads must not wait behind the steps' pulls and pushes."""
    return Remote(handle, ParityAgent, agent=True, beside=True)


def fragment_readers(servers: Sequence[Any], table: str, timeout: float = 120.0) -> Tuple[Any, Any]:
    """read_data / read_parity callbacks for C++ Recovery: each read is a call to the surviving server."""

    def data(server: int, block: int, offset: int, width: int) -> np.ndarray:
        return _agent(servers[server]).read_data(table, block, offset, width).result(timeout)

    def parity(server: int, block: int, offset: int, width: int) -> np.ndarray:
        return _agent(servers[server]).read_parity(table, block, offset, width).result(timeout)

    return data, parity


def stripe_reads(
    recovery: Any, stripes: Sequence[int], unavailable: Sequence[int], record_bytes: int
) -> List[Tuple[str, int, int, int, int]]:
    """The fragments decoding ``stripes`` whole reads with ``unavailable`` servers down, as :func:`consistent_decode`
    takes them: (method, server, block, offset 0, width ``record_bytes``), in the order the decodes read them."""
    return [(m, s, b, 0, record_bytes) for stripe in stripes for m, s, b in recovery.stripe_reads(stripe, unavailable)]


def consistent_decode(
    servers: Sequence[Any],
    table: str,
    block_slots: int,
    decode: Callable[[Any, Any], Any],
    timeout: float = 60.0,
    reads: Optional[Sequence[Tuple[str, int, int, int, int]]] = None,
) -> Tuple[Any, Dict[int, int]]:
    """Runs ``decode(read_data, read_parity)`` (a C++ Recovery call that reads fragments through callbacks, one at a
    time) on fragments that are mutually consistent, all fetched at once: ``reads`` lists the fragments ``decode``
    reads, (method, server, block, offset, width) (:func:`stripe_reads` for whole stripes); without it a first pass
    records them (the reads of an erasure decode depend only on the pattern of lost servers, not on the bytes, so
    zeros do). All are requested before any is awaited (one call per server), with their versions, and ``decode`` is
    served from them. Forwarding is asynchronous, so a survivor's block may be ahead of its parity for a moment: the
    fetch is repeated (their links re-flushed) until each survivor's blocks were read at one delta seq, every parity
    block read has applied exactly that seq of each survivor read, and the parity blocks agree on every other sender.
    Returns (result, versions {sender: seq} the result reflects)."""
    wanted: List[Tuple[str, int, int, int, int]] = []

    def recorder(method: str) -> Callable[[int, int, int, int], np.ndarray]:
        def read(server: int, block: int, offset: int, width: int) -> np.ndarray:
            wanted.append((method, server, block, offset, width))
            return np.zeros(block_slots * width, dtype=np.uint8)

        return read

    if reads is None:
        decode(recorder("read_data"), recorder("read_parity"))
    else:
        wanted = [(str(m), int(s), int(b), int(o), int(w)) for m, s, b, o, w in reads]
    wanted = list(dict.fromkeys(wanted))
    deadline = time.monotonic() + timeout
    missed_at = None  # when the fragments last disagreed (retries flush first)
    readers = sorted({w[1] for w in wanted if w[0] == "read_data"})
    while True:
        if missed_at is not None:
            # a retry: the survivors' parity was behind their data, e.g. training goes on beside a rebuild and the
            # forwarders hold a range back (or their background thread is starved). Each survivor routes and
            # delivers what it recorded, and only then are the fragments read again: reads right behind a flush
            # find parity and data at one seq unless a mutation slips in between
            for flush in [_agent(servers[server]).flush() for server in readers]:
                flush.result(timeout)
        # one call per server for all of its fragments (a batch of stripes reads several from each)
        by_server: Dict[int, List[Tuple[str, int, int, int, int]]] = {}
        for w in wanted:
            by_server.setdefault(w[1], []).append(w)
        calls = [
            (ws, _agent(servers[server]).read_many(table, [(w[0],) + w[2:] for w in ws]))
            for server, ws in by_server.items()
        ]
        answers = [(w, answer) for ws, future in calls for w, answer in zip(ws, future.result(timeout))]
        fetched: Dict[Tuple[str, int, int, int, int], np.ndarray] = {}
        data_seqs: Dict[int, int] = {}
        others: Dict[int, int] = {}
        consistent = True
        fetched_versions: Dict[Tuple[str, int, int, int, int], Any] = {}
        for w, (block, version) in answers:
            fetched[w], fetched_versions[w] = block, version
            if w[0] == "read_data":
                consistent &= data_seqs.setdefault(w[1], int(version)) == int(version)
            else:
                for sender, seq in version.items():
                    sender, seq = int(sender), int(seq)
                    consistent &= (data_seqs[sender] if sender in data_seqs else others.setdefault(sender, seq)) == seq
        # a parity block read before a data block of the same sender was checked against others: re-check
        consistent &= all(data_seqs.get(sender, seq) == seq for sender, seq in others.items())
        if consistent:
            break
        now = time.monotonic()
        if missed_at is not None and now - missed_at < REFLUSH_SECONDS:
            time.sleep(0.0005)  # several misses in a row: a mutation keeps slipping in, back off a little
        missed_at = now
        if now > deadline:
            parity_seqs = {(w[1], w[2]): fetched_versions[w] for w in wanted if w[0] == "read_parity"}
            raise TimeoutError(
                f"decode of table {table!r}: the fragments never agreed within {timeout:g} s (data "
                f"read at seqs {data_seqs}, parity blocks (server, block) with their applied seqs "
                f"{parity_seqs}); the survivors' parity did not catch up with their data"
            )

    def reader(method: str) -> Callable[[int, int, int, int], np.ndarray]:
        def read(server: int, block: int, offset: int, width: int) -> np.ndarray:
            return fetched[(method, server, block, offset, width)]  # the pass reads what the first one did

        return read

    return decode(reader("read_data"), reader("read_parity")), {**others, **data_seqs}


def parity_agent_for(
    server: Any,
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
    return ParityAgent(server.index, n, k, r, tables, seq, worker_seqs, secret=secret)  # type: ignore[arg-type]
