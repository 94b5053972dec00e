"""``--ft ec --code k,r``: erasure-coded parameter servers whose lost shards are rebuilt bit for bit.

Layout. N servers (N >= k + r); the C++ StripeLayout cuts every server's slot array into blocks and joins k data
blocks of k servers with r parity blocks on r other servers per stripe, rotated so each server holds data and
parity. Keys route to servers by KeyRouter::ServerOf (PSClient).

Protocol (the pieces: :mod:`xdl_ec.ps.parity_agent`, :mod:`~xdl_ec.ps.parity_forwarder`,
:mod:`~xdl_ec.ps.parity_role`, the server's push path, the worker's push log):

1. A server applies a mutation (a push, or a pull that inserted rows) under its lock and gives it the next delta
   sequence number ``d`` of that server, stamped with the worker push seqs it has applied so far. It answers the
   worker at once; the forwarder sends the routed ParityUpdates to every parity holder in the background,
   batched per holder and in ``d`` order.
2. A holder applies a sender's batches strictly in order and records ``applied[sender] = d`` and the worker seqs
   stamped on ``d``; it keeps an undo log of the batches above the sender's durable watermark.
3. ``d`` is parity-durable when every holder applied it. Each push ack carries the worker's highest push seq at or
   below the durable watermark; the worker keeps every push in its log until a later ack says it is durable.
4. Recovery of dead servers L (the scheduler confirmed them; |L| <= r, else :class:`Unrecoverable` naming L):
   (a) every survivor's forwarder drains (batches to live holders applied, to dead ones dropped);
   (b) for each p in L, W_p = min over p's surviving holders of applied[p]; each rolls p's stream back to W_p with
   its undo log (XOR: re-applying a batch removes it), so every surviving parity block reflects exactly p's
   mutations 1..W_p, and the holders agree on the worker seqs S_p that prefix includes;
   (c) replacements start empty and are rebuilt from the survivors: C++ Recovery decodes the key index, then every
   stripe touching L (data blocks restored, parity blocks L held re-encoded from the decoded stripe); a block
   touched earlier is decoded on demand (degraded read). Replacement p continues its delta seqs at W_p and claims
   S_p as applied; holders in L reset their record of each sender to the sender's current seq;
   (d) each worker re-sends its logged pushes to p with seq > S_p[worker], in seq order, with their original seqs
   (a server applies a push only if its seq is above the worker's last one: exactly once);
   (e) training goes on at the failed step; nobody else rolls back.

Why the rebuilt records are exact. Parity blocks are XOR sums (over GF(2^8)) of g * delta over the batches
applied, and deltas are old XOR new per slot, so after (b) a stripe's parity equals the encoding of the survivors'
current data and p's data as of W_p (applied batches commute; the lock in 1 makes seq order the shard's order).
Decoding therefore yields p's exact bytes at W_p: keys, values and optimizer state. Every push p acknowledged is
either in 1..W_p (stamped in S_p) or in a worker log: a worker forgets a push only when it is durable, i.e. at or
below every holder's applied seq, hence at or below W_p. Replay in (d) re-applies exactly the pushes above S_p in
their original per-worker order; pushes at or below are refused by seq. Inserts by pulls after W_p are not
replayed; a key they inserted is inserted again by the next pull or push that needs it, with the same initial row
(a function of seed and key) and fresh optimizer state, so every record equals, bit for bit, the one of a run
without failure (only its slot may differ, which no record's content depends on). With more than r servers down
some stripe has fewer than k fragments: recovery refuses, naming the lost servers, rather than guess.

Dense parameters live on the driver and are sent to the workers every step (xdl_ec.ps.dense_sync): a server loss
does not touch them.

Failure injection inside the protocol: :meth:`ErasureCoded.arm_crash_after_apply` makes a server apply and
acknowledge its next mutation and die before forwarding its deltas. :meth:`ErasureCoded.verify` scrubs every stripe.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _core
from ..ps.backend import RoleLost
from ..ps.parity_agent import fragment_readers, holders_of
from .strategy import FailureRecord, FaultTolerance, Resume, Unrecoverable

CALL_TIMEOUT = 120.0


def parse_code(code: Any) -> Tuple[int, int]:
    """``"k,r"`` (or a (k, r) pair) -> (k, r); ValueError naming ``--code`` otherwise."""
    if isinstance(code, str):
        parts = [p.strip() for p in code.split(",")]
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"--code: must be 'k,r' with two positive integers (e.g. 4,1), got {code!r}")
        k, r = int(parts[0]), int(parts[1])
    elif isinstance(code, (tuple, list)) and len(code) == 2 and all(isinstance(x, int) for x in code):
        k, r = code
    else:
        raise TypeError(f"--code: expected 'k,r' or a (k, r) pair, got {type(code).__name__}")
    if k < 1 or not 1 <= r <= 4 or k + r > 32:
        raise ValueError(f"--code: need k >= 1, 1 <= r <= 4 and k + r <= 32, got k={k}, r={r}")
    return k, r


@dataclasses.dataclass(frozen=True)
class StripeMismatch:
    """A stored parity block that disagrees with the parity re-encoded from its stripe's data."""

    table: str
    stripe: int
    parity_member: int
    server: int
    block: int


class ErasureCoded(FaultTolerance):
    """``--ft ec``: (k, r) erasure-coded parity over every server's slot records; see the module docstring."""

    name = "ec"

    def __init__(self, k: int = 4, r: int = 1) -> None:
        super().__init__()
        self.k, self.r = parse_code((k, r))
        self.n = 0
        self.on_rebuild_stripe: Optional[Callable[[int], None]] = None  # test hook: called after each stripe
        self._closed_parity_bytes: Optional[int] = None
        self._geometries: Dict[str, Tuple[int, int]] = {}

    @classmethod
    def from_args(cls, args: Any) -> "ErasureCoded":
        from .factory import strategy_arg

        return cls(*parse_code(strategy_arg(args, "code")))

    # ---- the seam --------------------------------------------------------------------------------------
    def attach(self, trainer: Any) -> None:
        super().attach(trainer)
        servers = trainer.scheduler.servers
        self.n = len(servers)
        if self.n < self.k + self.r:
            raise ValueError(f"--servers: the code k={self.k}, r={self.r} needs at least k + r = {self.k + self.r} "
                             f"servers, got {self.n}; add servers or use a smaller --code")
        self._wait([s.call("attach_parity", self.n, self.k, self.r, list(servers)) for s in servers])
        self._wait([w.call("enable_push_log") for w in trainer.workers])

    def recover(self, lost: BaseException) -> Resume:
        trainer = self.trainer
        sched = trainer.scheduler
        if getattr(lost, "role", "server") != "server":
            raise Unrecoverable(f"{lost}: --ft ec protects servers; a lost worker is restarted by the driver") from lost
        start = time.perf_counter()
        rebuilt: List[int] = []
        while True:
            down = sorted(i for (role, i) in sched.dead if role == "server")
            pending = sorted(set(down) | set(rebuilt))  # a replacement whose rebuild was cut short starts over
            if len(pending) > self.r:
                raise Unrecoverable(f"unrecoverable: lost servers {pending}, the code (k={self.k}, r={self.r}) "
                                    f"tolerates {self.r} at once; the model cannot be rebuilt exactly") from lost
            try:
                self._rebuild(pending)
                break
            except RoleLost as err:  # another server died during the rebuild: confirm it and start again
                if sched.confirm_failure(err) is None:
                    raise
                rebuilt = pending
        seconds = time.perf_counter() - start
        for p in pending:
            self.failures.append(FailureRecord(step=trainer.step + 1, role="server", index=p, rebuild_seconds=seconds))
        return Resume(step=trainer.step)

    def parity_bytes(self) -> int:
        """Bytes of parity blocks held by all servers (as of :meth:`close` once the cluster is shut down)."""
        if self.trainer is None or self._closed_parity_bytes is not None:
            return self._closed_parity_bytes or 0
        try:
            return int(sum(self._wait([s.call("parity_call", "parity_bytes") for s in self.trainer.scheduler.servers])))
        except RoleLost:
            return 0

    def close(self) -> None:
        """Called by the driver before the cluster shuts down: keeps the figures the report needs."""
        if self._closed_parity_bytes is None:
            self._closed_parity_bytes = self.parity_bytes()

    def report(self) -> Dict[str, Any]:
        out = super().report()
        out["code"] = {"k": self.k, "r": self.r}
        return out

    # ---- failure injection and scrub ---------------------------------------------------------------------
    def arm_crash_after_apply(self, server: int) -> None:
        """Server ``server`` applies and acknowledges its next mutation, then dies before forwarding its deltas."""
        self._wait([self.trainer.scheduler.servers[server].call("parity_call", "arm_crash_after_apply")])

    def verify(self) -> List[StripeMismatch]:
        """Scrub: re-encodes every stripe of every table from its data blocks and lists the stored parity blocks
        that disagree (empty: all consistent). Waits for in-flight parity first."""
        from ..codec import ErasureCode

        servers = self.trainer.scheduler.servers
        self._drain(list(range(self.n)))
        code = ErasureCode(self.k, self.r)
        layout = _core.StripeLayout(self.n, self.k, self.r)
        bad: List[StripeMismatch] = []
        for table in self._tables():
            stripes = self._stripes(table, list(range(self.n)))
            data, parity = fragment_readers(servers, table, CALL_TIMEOUT)
            rb = self._geometry(table)[1]
            for stripe in range(stripes):
                blocks = np.stack([data(*layout.data_member(stripe, j), 0, rb) for j in range(self.k)])
                expected = code.encode(blocks)
                for i in range(self.r):
                    srv, c = layout.parity_member(stripe, i)
                    if not np.array_equal(parity(srv, c, 0, rb), expected[i]):
                        bad.append(StripeMismatch(table, stripe, i, srv, c))
        return bad

    # ---- recovery ----------------------------------------------------------------------------------------
    def _wait(self, futures: Sequence[Any]) -> List[Any]:
        return [f.result(CALL_TIMEOUT) for f in futures]

    def _call(self, server: int, method: str, *args: Any) -> Any:
        return self.trainer.scheduler.servers[server].call("parity_call", method, *args).result(CALL_TIMEOUT)

    def _tables(self) -> List[str]:
        return [t.name for t in self.trainer.scheduler.tables]

    def _geometry(self, table: str) -> Tuple[int, int]:
        """(block_slots, record_bytes) of ``table``'s shards."""
        if table not in self._geometries:
            spec = next(t for t in self.trainer.scheduler.tables if t.name == table)
            probe = _core.EmbeddingShard(_shard_config(spec))
            self._geometries[table] = (int(probe.block_slots), int(probe.record_bytes))
        return self._geometries[table]

    def _drain(self, survivors: Sequence[int]) -> Dict[int, Dict[str, Any]]:
        """Waits until every survivor's forwarder has nothing queued or in flight; returns their progress."""
        while True:
            progress = {s: self._call(s, "progress") for s in survivors}
            if not any(p["pending"] for p in progress.values()):
                return progress
            time.sleep(0.001)

    def _stripes(self, table: str, survivors: Sequence[int]) -> int:
        """Stripes covering every block any survivor holds (data or parity) of ``table``: whole cycles."""
        stripes = 0
        for s in survivors:
            data_blocks, parity_blocks = self._call(s, "extent", table)
            stripes = max(stripes, math.ceil(data_blocks / self.k) * self.n, math.ceil(parity_blocks / self.r) * self.n)
        return stripes

    def _rebuild(self, lost: List[int]) -> None:
        trainer, sched, n, k, r = self.trainer, self.trainer.scheduler, self.n, self.k, self.r
        survivors = [s for s in range(n) if s not in lost]
        # (a) survivors' pending parity reaches the live holders
        progress = self._drain(survivors)
        # (b) every surviving holder of p's stripes rolls p's stream back to W_p
        seq: Dict[int, int] = {s: progress[s]["seq"] for s in survivors}
        wseqs: Dict[int, Dict[int, int]] = {s: progress[s]["worker_seqs"] for s in survivors}
        for p in lost:
            holders = [h for h in holders_of(p, n, k, r) if h not in lost]
            seq[p] = min(self._call(h, "applied", p) for h in holders)
            agreed = [self._call(h, "rollback", p, seq[p]) for h in holders]
            wseqs[p] = {int(w): int(s) for w, s in agreed[0].items()}
        # (c) fresh replacements, rebuilt from the survivors
        for p in lost:
            old = sched.servers[p]
            if (("server", p) not in sched.dead) and getattr(old, "alive", True):
                sched.backend.kill(old)  # a replacement whose rebuild was cut short
            handle = sched.replace_server(p)
            trainer.client.servers[p] = handle
        servers = list(sched.servers)
        for p in lost:
            self._wait([servers[p].call("attach_parity", n, k, r, servers, seq[p], wseqs[p])])
        for s in survivors:
            for p in lost:
                if p in holders_of(s, n, k, r):
                    self._call(s, "set_holder", p, servers[p])
        for q in lost:
            for s in range(n):
                if s != q and q in holders_of(s, n, k, r):
                    self._call(q, "reset_sender", s, seq[s], wseqs[s])
        for table in self._tables():
            self._rebuild_table(table, lost, survivors, servers)
        # (d) workers replay what the rebuilt servers miss, in seq order
        for p in lost:
            self._wait([w.call("replay_pushes", p, wseqs[p].get(i, 0), servers[p])
                        for i, w in enumerate(trainer.workers)])

    def _rebuild_table(self, table: str, lost: List[int], survivors: List[int], servers: List[Any]) -> None:
        n, k, r = self.n, self.k, self.r
        block_slots, record_bytes = self._geometry(table)
        layout = _core.StripeLayout(n, k, r)
        recovery = _core.Recovery(n, k, r, block_slots, record_bytes)
        data, parity = fragment_readers(servers, table, CALL_TIMEOUT)
        stripes = self._stripes(table, survivors)
        data_blocks = stripes // n * k
        extent = {s: self._call(s, "extent", table)[0] for s in survivors}
        for p in lost:
            keys, slots, high_water = recovery.recover_key_index(p, data_blocks, lost, data, parity)
            self._call(p, "begin_restore", table, keys, slots, high_water, servers, lost)
            extent[p] = math.ceil(high_water / block_slots)
        for stripe in range(stripes):
            wanted = [t for t in range(k + r) if layout.server_at(stripe, t) in lost]
            if not wanted:
                continue
            blocks = recovery.decode_stripe(stripe, wanted, lost, data, parity)
            has_data = any(b < extent[s] for s, b in (layout.data_member(stripe, j) for j in range(k)))
            for t, block in zip(wanted, blocks):
                if t < k:
                    s, b = layout.data_member(stripe, t)
                    if b < extent[s]:
                        self._call(s, "restore_block", table, b, block)
                else:
                    s, c = layout.parity_member(stripe, t - k)
                    if has_data or block.any():
                        self._call(s, "write_parity", table, c, block)
            if self.on_rebuild_stripe is not None:
                self.on_rebuild_stripe(stripe)


def _shard_config(spec: Any) -> Any:
    config = _core.ShardConfig()
    config.dim = spec.dim
    config.seed = spec.seed
    config.block_slots = spec.block_slots
    config.optimizer = spec.optimizer.to_config()
    config.initializer = spec.initializer.to_config()
    return config
