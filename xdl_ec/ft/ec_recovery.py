"""EcRecovery: brings lost servers of ``--ft ec`` back, steps (a)-(e) of the protocol in
docs/design/ec-protocol.md (the invariants cited as I1..I11 are numbered there), and rebuilds their stripes one at a
time for whoever paces the rebuild (:mod:`xdl_ec.ft.rebuild_pacer`, :mod:`xdl_ec.ft.background_rebuild`).

Every wait here is bounded (I10): a deadline that runs out raises :class:`RecoveryTimeout` naming what was waited
for, so a recovery either completes or stops the run with a clear error; it never hangs.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, TypeVar

from xdl_ec import _core
from xdl_ec.ft.consistent_decode import DecodeStopped, Fragment, FragmentRead, consistent_decode, stripe_reads
from xdl_ec.ft.delta_forwarding import ForwardingProgress, holders_of
from xdl_ec.ft.parity_agent import ParityAgent, parity_agent_for
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps import driver_kill_point
from xdl_ec.ps.backend import KILL_SECONDS, CallTimeout, KillTimeout, WorkerLost
from xdl_ec.ps.fault_tolerance import Unrecoverable
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.remote import Remote

if TYPE_CHECKING:
    from xdl_ec.ps.cluster_view import ClusterView

CALL_TIMEOUT = 120.0  # seconds one call of the recovery may take
DRAIN_WAIT = 1.0  # seconds a server waits for its parity links in one drain call before answering "still pending"
DRAIN_TIMEOUT = 120.0  # seconds survivors may take to have every pending delta applied by the live holders
SETTLE_ATTEMPTS = 5  # rollbacks of a lost server's stream before its holders must have stopped moving
STRIPE_TIMEOUT = 120.0  # seconds one batch of stripes may take to be decoded and written consistently
REBUILD_BATCH = 8  # stripes a background rebuild decodes per round of reads (one call per server, not per stripe)


Decoded = TypeVar("Decoded")


class StripedStrategy(Protocol):
    """What a recovery reads of its strategy (:class:`~xdl_ec.ft.ec_strategy.ErasureCoded`): the code, the
    cluster it protects, the job's secret and the per-stripe hook."""

    n: int
    k: int
    r: int
    secret: Optional[JobSecret]
    on_rebuild_stripe: Optional[Callable[[int], None]]

    @property
    def view(self) -> ClusterView: ...


class RecoveryTimeout(Unrecoverable):
    """A wait of the recovery ran out (I10): names what it waited for; the run stops instead of hanging."""


class EcRecovery:
    """The recovery of one ``--ft ec`` job: ``strategy`` is its :class:`~xdl_ec.ft.ec_strategy.ErasureCoded`
    (k, r, n, the cluster view, the job's secret). Holds the rebuild in progress: the stripes still to rebuild
    (``plan``), the replacements not complete (``rebuilding``) and their restore extents."""

    def __init__(self, strategy: StripedStrategy) -> None:
        self.strategy = strategy
        self.plan: List[Tuple[str, int]] = []  # (table, stripe) still to rebuild, in order
        self.rebuilding: List[int] = []  # replacements whose rebuild is not complete
        self.extent: Dict[str, Dict[int, int]] = {}  # table -> server -> data blocks (restore extent)
        self.layout: Optional[_core.StripeLayout] = None  # once a recovery ran
        self.stripe_seconds = 0.0  # what the last stripe took
        self._geometries: Dict[str, Tuple[int, int]] = {}
        self._recoveries: Dict[str, _core.Recovery] = {}
        self._plan_lock = threading.Lock()  # plan is read by the driver while a background thread pops it

    # ---- calls -----------------------------------------------------------------------------------------
    @property
    def view(self) -> ClusterView:
        return self.strategy.view

    def agent(self, server: int) -> Remote:
        return self.view.agent(server, ParityAgent)

    def beside(self, server: int) -> Remote:
        """The agent of ``server`` called beside its other calls: the rebuild's reads and writes take their own
        locks, so they do not queue behind the steps' pulls and pushes (the rebuild runs while training goes on)."""
        return self.view.agent(server, ParityAgent, beside=True)

    @property
    def n(self) -> int:
        return self.strategy.n

    def wait(self, futures: Sequence[Any]) -> List[Any]:
        return [f.result(CALL_TIMEOUT) for f in futures]

    def call(self, server: int, method: str, *args: Any) -> Any:
        return getattr(self.agent(server), method)(*args).result(CALL_TIMEOUT)

    def call_many(self, calls: Sequence[Tuple[Any, ...]]) -> List[Any]:
        """Agent calls (server, method, *args), all issued before any is awaited (the servers work in
        parallel and the recovery pays one round trip, not one per call); the answers in call order."""
        return self.wait([getattr(self.agent(c[0]), c[1])(*c[2:]) for c in calls])

    # ---- geometry --------------------------------------------------------------------------------------
    def tables(self) -> List[str]:
        return [t.name for t in self.view.tables]

    def geometry(self, table: str) -> Tuple[int, int]:
        """(block_slots, record_bytes) of ``table``'s shards."""
        if table not in self._geometries:
            spec = next(t for t in self.view.tables if t.name == table)
            probe = _core.EmbeddingShard(spec.shard_config())
            self._geometries[table] = (int(probe.block_slots), int(probe.record_bytes))
        return self._geometries[table]

    def recovery(self, table: str) -> _core.Recovery:
        """The C++ Recovery of ``table``'s geometry (kept: it caches decode tables per erasure pattern)."""
        if table not in self._recoveries:
            s = self.strategy
            self._recoveries[table] = _core.Recovery(s.n, s.k, s.r, *self.geometry(table))
        return self._recoveries[table]

    def stripes(
        self, table: str, survivors: Sequence[int], extents: Optional[Dict[int, Tuple[int, int]]] = None
    ) -> int:
        """Stripes covering every block any survivor holds (data or parity) of ``table``: whole cycles;
        ``extents``: the survivors' (data blocks, parity blocks) when already read."""
        k, r, n = self.strategy.k, self.strategy.r, self.n
        extents = extents or dict(zip(survivors, self.call_many([(s, "extent", table) for s in survivors])))
        stripes = 0
        for s in survivors:
            data_blocks, parity_blocks = extents[s]
            stripes = max(stripes, math.ceil(data_blocks / k) * n, math.ceil(parity_blocks / r) * n)
        return stripes

    def decode(
        self,
        what: str,
        servers: Sequence[Handle],
        table: str,
        decode: Callable[[FragmentRead, FragmentRead], Decoded],
        timeout: float,
        reads: Optional[Sequence[Fragment]] = None,
        stopped: Optional[Callable[[], bool]] = None,
    ) -> Tuple[Decoded, Dict[int, int]]:
        """``consistent_decode`` (I7) whose deadline running out is a RecoveryTimeout naming ``what`` it decoded."""
        try:
            return consistent_decode(servers, table, self.geometry(table)[0], decode, timeout, reads, stopped)
        except CallTimeout:
            raise
        except TimeoutError as err:
            raise RecoveryTimeout(f"recovery: {what} of table {table!r}: {err}") from err

    # ---- (a) drain -------------------------------------------------------------------------------------
    def drain(self, survivors: Sequence[int], timeout: float = DRAIN_TIMEOUT) -> Dict[int, ForwardingProgress]:
        """Waits until every survivor's forwarder has nothing queued or in flight; returns their progress. Each
        survivor waits for its own links (``ParityAgent.drain``, woken by their deliveries), so this is usually
        one round of calls; a survivor still pending after DRAIN_WAIT seconds is asked again, until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            progress = dict(zip(survivors, self.call_many([(s, "drain", DRAIN_WAIT) for s in survivors])))
            pending = [s for s, p in progress.items() if p["pending"]]
            if not pending:
                return progress
            if time.monotonic() > deadline:
                raise RecoveryTimeout(
                    f"recovery: servers {pending} still had parity deltas queued or in flight to their holders "
                    f"after {timeout:g} s (seq / applied by every live holder: "
                    f"{ {s: (progress[s]['seq'], progress[s]['live_applied']) for s in pending} }, delivery "
                    f"errors: { {s: progress[s].get('errors', []) for s in pending} })"
                )

    # ---- the whole recovery ----------------------------------------------------------------------------
    def begin(self, lost: List[int]) -> None:
        """Steps (a)-(d) for the servers ``lost`` (|lost| <= r); leaves the stripes to rebuild in ``plan``."""
        survivors = [s for s in range(self.n) if s not in lost]
        self.stop_remnants(lost)  # I5
        progress = self.drain(survivors)  # (a)
        seq, wseqs, pairs = self.roll_back(lost, survivors, progress)  # (b)
        self.check_replayable(lost, wseqs)  # I11
        self.settle_rollback(pairs, seq)  # I5
        driver_kill_point.reached("rolled-back")
        self.replace(lost, survivors, seq, wseqs)  # (c)
        driver_kill_point.reached("replaced")
        self.replay(lost, wseqs)  # (d)
        driver_kill_point.reached("replayed")

    def stop_remnants(self, lost: Sequence[int]) -> None:
        """I5: kills every server of ``lost`` still running (a replacement whose rebuild was cut short by another
        loss) and waits until it is gone, before any holder's record of it is read or rolled back: a batch it
        delivered after the rollback would leave its holders disagreeing on its seq for good, and every decode
        would wait for them to agree. A kill returns once the server is gone: in one process once its forwarder
        delivers nothing more (DeltaForwarder::Close), on Ray once the actor no longer answers."""
        view = self.view
        for p in lost:
            if ("server", p) in view.dead() and not view.server_alive(p, 1.0):
                continue
            try:
                view.kill("server", p)
            except KillTimeout:
                raise RecoveryTimeout(
                    f"recovery: server {p}'s replacement, whose rebuild was cut short, was killed "
                    f"but still answers after {KILL_SECONDS:g} s; its parity cannot be rolled "
                    f"back while it may still send"
                ) from None

    def roll_back(
        self, lost: Sequence[int], survivors: Sequence[int], progress: Dict[int, ForwardingProgress]
    ) -> Tuple[Dict[int, int], Dict[int, Dict[int, int]], List[Tuple[int, int]]]:
        """(b), I4: every surviving holder of p's stripes rolls p's stream back to W_p = the least seq of p any of
        them applied. Returns (seq: W_p for lost p and the current seq of each survivor, worker seqs S_p and the
        survivors', the (p, holder) pairs)."""
        n, k, r = self.n, self.strategy.k, self.strategy.r
        seq: Dict[int, int] = {s: progress[s]["seq"] for s in survivors}
        wseqs: Dict[int, Dict[int, int]] = {s: progress[s]["worker_seqs"] for s in survivors}
        pairs = [(p, h) for p in lost for h in holders_of(p, n, k, r) if h not in lost]
        applied = self.call_many([(h, "applied", p) for p, h in pairs])
        for p in lost:
            seq[p] = min(a for (q, _), a in zip(pairs, applied) if q == p)
        agreed = self.call_many([(h, "rollback", p, seq[p]) for p, h in pairs])
        for p in lost:
            first = next(a for (q, _), a in zip(pairs, agreed) if q == p)
            wseqs[p] = {int(w): int(s) for w, s in first.items()}
        return seq, wseqs, pairs

    def settle_rollback(self, pairs: Sequence[Tuple[int, int]], seq: Dict[int, int]) -> None:
        """I5, checked: every surviving holder of a lost server p has p's stream at W_p now; a holder found past it
        got a batch of a remnant of p after the rollback (a Ray link's last send still in a socket when the actor
        died) and is rolled back again. Bounded: a holder that keeps moving is an error naming it."""
        ahead: List[Tuple[int, int]] = []
        for attempt in range(SETTLE_ATTEMPTS):
            applied = self.call_many([(h, "applied", p) for p, h in pairs])
            ahead = [(p, h) for (p, h), a in zip(pairs, applied) if a != seq[p]]
            if not ahead:
                return
            self.call_many([(h, "rollback", p, seq[p]) for p, h in ahead])
            time.sleep(0.01 * (attempt + 1))
        raise RecoveryTimeout(
            f"recovery: holders {sorted({h for _, h in ahead})} keep receiving batches of lost "
            f"servers {sorted({p for p, _ in ahead})} after rolling them back to "
            f"{ {p: seq[p] for p, _ in ahead} }; something still sends for them"
        )

    def check_replayable(self, lost: Sequence[int], wseqs: Dict[int, Dict[int, int]]) -> None:
        """I11: Unrecoverable when a rebuilt server would miss pushes no live log holds: those above S_p that a
        dead worker sent (its log died with it) or that a restarted worker's predecessor sent (the new log starts
        after them). The driver records each worker's sent seqs per answered step (``PSTrainer.push_seqs``)."""
        dead = self.view.dead()
        sent, unlogged = self.view.push_seqs()
        for p in lost:
            for w in range(len(sent)):
                if ("worker", w) in dead:
                    seqs, how = sent[w], "died with the worker's push log (the worker was lost too)"
                else:
                    seqs, how = unlogged[w], "were sent by a predecessor of the restarted worker, whose log died"
                last = seqs[p] if seqs is not None else 0
                durable = wseqs[p].get(w, 0)
                if last > durable:
                    raise Unrecoverable(
                        f"unrecoverable: server {p} lost pushes {durable + 1}..{last} of worker {w}: they were not "
                        f"yet parity-durable and {how}; the model cannot be rebuilt exactly"
                    )

    def replace(
        self, lost: Sequence[int], survivors: Sequence[int], seq: Dict[int, int], wseqs: Dict[int, Dict[int, int]]
    ) -> None:
        """(c): fresh replacements continue p's delta seqs at W_p claiming S_p; each decodes its key index from the
        survivors (key bytes only) and enters restore mode; holders among them reset their record of every sender
        to the sender's current seq. Leaves the stripes touching ``lost`` in ``plan``."""
        view = self.view
        n, k, r = self.n, self.strategy.k, self.strategy.r
        for p in lost:
            view.replace_server(p)
        servers = view.server_handles()
        self.wait(
            [
                view.server(p).attach_agent(parity_agent_for, n, k, r, seq[p], wseqs[p], self.strategy.secret)
                for p in lost
            ]
        )
        self.wait([self.agent(p).connect(servers) for p in lost])
        self.call_many(
            [(s, "set_holder", p, servers[p]) for s in survivors for p in lost if p in holders_of(s, n, k, r)]
            + [
                (q, "reset_sender", s, seq[s], wseqs[s])
                for q in lost
                for s in range(n)
                if s != q and q in holders_of(s, n, k, r)
            ]
        )
        layout = self.layout = _core.StripeLayout(n, k, r)
        plan: List[Tuple[str, int]] = []
        for table in self.tables():
            block_slots, record_bytes = self.geometry(table)
            recovery = self.recovery(table)
            extents = dict(zip(survivors, self.call_many([(s, "extent", table) for s in survivors])))
            stripes = self.stripes(table, survivors, extents)
            # the replacements' holders accept their senders' batches up to this extent (ParityHolder::SetExtent)
            self.call_many([(p, "set_parity_extent", table, stripes // n * r) for p in lost])
            extent = {s: extents[s][0] for s in survivors}
            beside = view.beside_handles()  # the key indexes' reads, as the rebuild's, beside the steps' calls
            for p in lost:
                decode_keys = lambda d, q: recovery.recover_key_index(p, stripes // n * k, lost, d, q)  # noqa
                keys, slots, high_water = self.decode(
                    f"key index of server {p}", beside, table, decode_keys, CALL_TIMEOUT
                )[0]
                missing = self.call(p, "begin_restore", table, keys, slots, high_water, servers, lost)
                # the replacement's own count also covers a sketch counter's reserved slots (no live row there)
                extent[p] = max(math.ceil(high_water / block_slots), int(missing))
            self.extent[table] = extent
            plan += [
                (table, stripe)
                for stripe in range(stripes)
                if any(layout.server_at(stripe, t) in lost for t in range(k + r))
            ]
        # lost data blocks first: until restored, every access to one decodes it on the step's path (a degraded
        # read), while lost parity only waits to protect against the next loss
        plan.sort(key=lambda entry: not any(layout.server_at(entry[1], t) in lost for t in range(k)))
        with self._plan_lock:
            self.plan, self.rebuilding = plan, list(lost)

    def replay(self, lost: Sequence[int], wseqs: Dict[int, Dict[int, int]]) -> None:
        """(d), I6: each worker re-sends its logged pushes above S_p to p, in seq order (blocks they touch decode on
        demand). A dead worker is skipped (the driver restarts it afterwards); its log died with it."""
        view = self.view
        servers = view.server_handles()
        for p in lost:
            calls = [w.replay_pushes(p, wseqs[p].get(w.index, 0), servers[p]) for w in view.workers()]
            for call in calls:
                try:
                    call.result(CALL_TIMEOUT)
                except WorkerLost as err:
                    view.confirm_failure(err)

    # ---- (e) the rebuild -------------------------------------------------------------------------------
    def rebuild_next(self, stripes: int = 1, stopped: Optional[Callable[[], bool]] = None) -> int:
        """Rebuilds the first ``stripes`` stripes of ``plan`` (fewer where the plan's table changes: one table per
        call) and drops them from the plan; returns how many, 0 when nothing was left. ``stopped``: polled while
        the stripes' fragments disagree; DecodeStopped (the stripes left in the plan) once it is true."""
        with self._plan_lock:
            if not self.plan:
                return 0
            table = self.plan[0][0]
            batch = []
            for name, stripe in self.plan[: max(1, stripes)]:
                if name != table:
                    break
                batch.append(stripe)
        start = time.perf_counter()
        self.rebuild_stripes(table, batch, stopped=stopped)
        self.stripe_seconds = (time.perf_counter() - start) / len(batch)
        with self._plan_lock:
            done = [(table, stripe) for stripe in batch]
            if self.plan[: len(done)] == done:
                del self.plan[: len(done)]
        hook = self.strategy.on_rebuild_stripe
        if hook is not None:
            for stripe in batch:
                hook(stripe)
        return len(batch)

    def rebuild_stripes(
        self,
        table: str,
        stripes: Sequence[int],
        timeout: float = STRIPE_TIMEOUT,
        stopped: Optional[Callable[[], bool]] = None,
    ) -> None:
        """(e): decodes the stripes' blocks on restoring servers from consistent fragments (I7), all stripes in one
        round of reads (one call per server): data blocks are restored (unless a degraded read did it first),
        parity blocks written if their holder has applied exactly the data versions they encode (I8; else those
        stripes are decoded again, until ``timeout``)."""
        k, r = self.strategy.k, self.strategy.r
        servers = self.view.beside_handles()  # the reads go beside the steps' calls (on Ray over links of their own)
        lost = list(self.rebuilding)
        layout = self.layout
        if layout is None:
            raise RuntimeError("rebuild_stripes: no recovery planned a rebuild (replace() sets the layout)")
        recovery = self.recovery(table)
        extent = self.extent[table]
        # a lost data block a degraded read restored already needs no decode (training touches hot blocks first)
        checks = [
            (stripe, t, layout.data_member(stripe, t))
            for stripe in stripes
            for t in range(k)
            if layout.server_at(stripe, t) in lost
        ]
        asked = [(stripe, t, self.beside(s).block_missing(table, b)) for stripe, t, (s, b) in checks if b < extent[s]]
        missing = {(stripe, t) for stripe, t, future in asked if future.result(CALL_TIMEOUT)}
        todo = {
            stripe: wanted
            for stripe in stripes
            if (
                wanted := [
                    t
                    for t in range(k + r)
                    if layout.server_at(stripe, t) in lost and (t >= k or (stripe, t) in missing)
                ]
            )
        }
        deadline = time.monotonic() + timeout
        record_bytes = self.geometry(table)[1]
        while todo:
            order = list(todo)

            def decode_order(d: FragmentRead, p: FragmentRead, wanted: Dict[int, List[int]] = todo) -> List[Any]:
                return [recovery.decode_stripe(stripe, blocks, lost, d, p) for stripe, blocks in wanted.items()]

            decoded, versions = self.decode(
                f"stripes {order[0]}..{order[-1]}",
                servers,
                table,
                decode_order,
                max(deadline - time.monotonic(), 1.0),
                stripe_reads(recovery, order, lost, record_bytes),
                stopped,
            )
            # (stripe, parity holder or None, the write's future), all sent before any is awaited
            writes: List[Tuple[int, Optional[int], Any]] = []
            expected: Dict[int, Dict[int, int]] = {}
            for stripe, blocks in zip(order, decoded):
                members = [layout.data_member(stripe, j) for j in range(k)]
                has_data = any(b < extent[s] for s, b in members)
                expected[stripe] = {s: versions.get(s, 0) for s, _ in members}
                for t, block in zip(todo[stripe], blocks):
                    if t < k:
                        s, b = layout.data_member(stripe, t)
                        writes.append((stripe, None, self.beside(s).restore_block(table, b, block)))
                    elif has_data or block.any():
                        s, c = layout.parity_member(stripe, t - k)
                        writes.append((stripe, s, self.beside(s).write_parity_if(table, c, block, expected[stripe])))
            refused: Dict[int, List[int]] = {}
            for stripe, holder, future in writes:
                if not future.result(CALL_TIMEOUT) and holder is not None:
                    refused.setdefault(stripe, []).append(holder)
            if not refused:
                return
            if stopped is not None and stopped():
                raise DecodeStopped(f"rebuild of table {table!r}: stopped while stripes {sorted(refused)} were refused")
            if time.monotonic() > deadline:
                raise RecoveryTimeout(
                    f"rebuild of table {table!r} stripes {sorted(refused)}: the parity holders "
                    f"{refused} never had applied exactly the data versions decoded "
                    f"({ {st: expected[st] for st in refused} }) within {timeout:g} s"
                )
            # the holder written lags the ones the decode read (a forwarder delivers to its holders one after the
            # other, from a thread a busy machine starves): the data members deliver everything now, then again;
            # the refused stripes' parity is decoded again (their data blocks are restored already)
            todo = {stripe: [t for t in todo[stripe] if t >= k] for stripe in refused}
            flush = sorted({layout.data_member(stripe, j)[0] for stripe in refused for j in range(k)})
            self.wait([self.beside(s).flush() for s in flush])
