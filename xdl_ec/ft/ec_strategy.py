"""``--ft ec --code k,r``: erasure-coded parameter servers whose lost shards are rebuilt bit for bit.

Layout. N servers (N >= k + r); the C++ StripeLayout cuts every server's slot array into blocks and joins k data
blocks of k servers with r parity blocks on r other servers per stripe, rotated so each server holds data and
parity. Keys route to servers by KeyRouter::ServerOf (PSClient).

Protocol (the pieces: :mod:`xdl_ec.ft.parity_agent` over the C++ DeltaForwarder and ParityHolder
(cpp/include/xdl_ec/delta_forwarder.h, parity_holder.h), the server's push path, the worker's push log):

1. A server applies a mutation (a push, or a pull that inserted rows) under its lock and gives it the next delta
   sequence number ``d`` of that server, stamped with the worker push seqs it has applied so far. It answers the
   worker at once; the forwarder sends the routed ParityUpdates to every parity holder in the background,
   batched per holder and in ``d`` order. The mutations it finds queued at once become one seq range
   ``first..d`` whose deltas are XOR-merged per slot (old of the first XOR new of the last), cut the same way
   for every holder of the sender.
2. A holder applies a sender's batches strictly in order, each range whole, and records ``applied[sender] = d``
   (a range's end) and the worker seqs stamped on ``d``; it keeps an undo log of the batches above the sender's
   durable watermark.
3. ``d`` is parity-durable when every holder applied it. Each push ack carries the worker's highest push seq at or
   below the durable watermark; the worker keeps every push in its log until a later ack says it is durable.
4. Recovery of dead servers L (the scheduler confirmed them; |L| <= r, else :class:`Unrecoverable` naming L):
   (a) every survivor's forwarder drains (batches to live holders applied, to dead ones dropped);
   (b) for each p in L, W_p = min over p's surviving holders of applied[p]; each rolls p's stream back to W_p with
   its undo log (XOR: re-applying a batch removes it), so every surviving parity block reflects exactly p's
   mutations 1..W_p, and the holders agree on the worker seqs S_p that prefix includes (every holder got the
   same ranges, so W_p is a range end for each of them);
   (c) replacements start empty: C++ Recovery decodes each one's key index from the survivors (key bytes only) and
   the replacement enters restore mode. Replacement p continues its delta seqs at W_p and claims S_p as applied;
   holders in L reset their record of each sender to the sender's current seq;
   (d) each worker re-sends its logged pushes to p with seq > S_p[worker], in seq order, with their original seqs
   (a server applies a push only if its seq is above the worker's last one: exactly once);
   (e) training goes on at the failed step; nobody else rolls back. The stripes touching L are rebuilt a share
   per step boundary (data blocks restored, parity blocks L held re-encoded); a block an access touches first is
   decoded on demand (degraded read). Since forwarding is asynchronous, fragments are read with their versions (a
   data block with its server's delta seq, a parity block with its applied seqs) and a decode is retried until
   the parity has applied exactly the data versions read; a re-encoded parity block is written only if its holder
   applied exactly the versions it encodes. A server lost while replacements are incomplete restarts the
   recovery with them counted as lost (so with r = 1 a second loss before the rebuild ends is unrecoverable).

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

A worker restarted by the driver continues its predecessor's push seqs (``PSClient.resume_seqs``); the
predecessor's pushes that were not yet durable die with its log, so a server lost before they become durable
(a window of one forwarding round, e.g. a worker and a server killed at the same boundary) cannot get them back.
That is detected, never rebuilt around: the driver keeps every worker's sent push seqs per server as of its last
answered step (``PSTrainer.push_seqs``, and ``unlogged_push_seqs`` of restarted predecessors), and a recovery
whose S_p[w] is below what a dead worker (or a restarted one's predecessor) sent to p raises
:class:`Unrecoverable` naming the server, the worker and the push seqs lost. (A worker killed inside a step after
sending a push the driver never saw answered is outside this check; injected kills land at step boundaries.)

Failure injection inside the protocol: :meth:`ErasureCoded.arm_crash_after_apply` makes a server apply and
acknowledge its next mutation and die before forwarding its deltas. :meth:`ErasureCoded.verify` scrubs every stripe.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple


from .. import _core
from ..ps.backend import RoleLost, WorkerLost
from .parity_agent import consistent_decode, fragment_readers, holders_of
from .strategy import FailureRecord, FaultTolerance, Resume, Unrecoverable

CALL_TIMEOUT = 120.0
DRAIN_WAIT = 1.0  # seconds a server waits for its parity links in one drain call before answering "still pending"
DEFAULT_REBUILD_SHARE = 0.05  # share of wall time a rebuild may take (md RAID-style rate limit)
STEP_WINDOW = 8  # recent step boundaries whose mean paces the rebuild
CREDIT_CAP_STEPS = 1.0  # unspent rebuild credit is capped at one mean step (no burst after idle boundaries)


def parse_rebuild_share(value: Any) -> float:
    """``--rebuild-share``: a number in (0, 1]; ValueError naming the flag otherwise."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"--rebuild-share: must be a number in (0, 1] (the share of wall time a rebuild may "
                         f"take, e.g. 0.05), got {value!r}") from None
    if isinstance(value, bool) or not (0.0 < share <= 1.0):
        raise ValueError(f"--rebuild-share: must be in (0, 1] (the share of wall time a rebuild may take, e.g. "
                         f"0.05; 1 rebuilds at the first step boundary), got {value!r}")
    return share


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

    def __init__(self, k: int = 4, r: int = 1, rebuild_stripes_per_step: Optional[int] = None,
                 rebuild_share: float = DEFAULT_REBUILD_SHARE) -> None:
        """``rebuild_stripes_per_step``: stripes rebuilt at each step boundary (0: the whole rebuild inside the
        recovery); None: rate-limited by ``rebuild_share``, the share of wall time the rebuild may take until it
        is done (see :meth:`after_step`)."""
        super().__init__()
        self.k, self.r = parse_code((k, r))
        self.rebuild_share = parse_rebuild_share(rebuild_share)
        if rebuild_stripes_per_step is not None and (isinstance(rebuild_stripes_per_step, bool) or not isinstance(
                rebuild_stripes_per_step, int) or rebuild_stripes_per_step < 0):
            raise ValueError(f"rebuild_stripes_per_step: must be an int >= 0 or None, got {rebuild_stripes_per_step!r}")
        self.rebuild_stripes_per_step = rebuild_stripes_per_step
        self.scrub = False  # verify every stripe when the report is made (xdl-ec verify)
        self.scrub_result: Optional[List[StripeMismatch]] = None
        self.n = 0
        self.on_rebuild_stripe: Optional[Callable[[int], None]] = None  # test hook: called after each stripe
        self._closed_stats: Optional[Dict[str, int]] = None
        self._plan: List[Tuple[str, int]] = []  # (table, stripe) still to rebuild
        self._rebuilding: List[int] = []  # replacements whose rebuild is not complete
        self._extent: Dict[str, Dict[int, int]] = {}  # table -> server -> data blocks (restore extent)
        self._open_records: List[FailureRecord] = []
        self._rebuild_start: Optional[Tuple[float, int]] = None
        self._geometries: Dict[str, Tuple[int, int]] = {}
        self._recoveries: Dict[str, Any] = {}
        self._layout: Any = None  # the StripeLayout, once attached
        # rebuild pacing: recent step seconds measured between step boundaries (own work excluded), and the
        # rebuild seconds earned but not spent yet (negative: a stripe overran the budget, repaid next boundaries)
        self._step_seconds: Deque[float] = collections.deque(maxlen=STEP_WINDOW)
        self._boundary_end: Optional[float] = None
        self._credit = 0.0
        self._stripe_seconds = 0.0  # what the last stripe took (async mode: when a boundary is worth asking for)
        self.boundaries_rebuilding = 0  # step boundaries that rebuilt stripes (the rebuild's spread, for tests)

    @classmethod
    def from_args(cls, args: Any) -> "ErasureCoded":
        """From ``--code``; ``args.scrub`` (``xdl-ec verify``) scrubs every stripe for the report, and the
        instance is left on ``args.ec_strategy`` for the caller to read back."""
        from .factory import strategy_arg

        strategy = cls(*parse_code(strategy_arg(args, "code")),
                       rebuild_share=parse_rebuild_share(strategy_arg(args, "rebuild_share")))
        strategy.scrub = bool(getattr(args, "scrub", False))
        try:
            args.ec_strategy = strategy
        except AttributeError:  # a read-only args object: nobody reads it back
            pass
        return strategy

    # ---- the seam --------------------------------------------------------------------------------------
    def attach(self, trainer: Any) -> None:
        super().attach(trainer)
        servers = trainer.scheduler.servers
        self.n = len(servers)
        if self.n < self.k + self.r:
            raise ValueError(f"--servers: the code k={self.k}, r={self.r} needs at least k + r = {self.k + self.r} "
                             f"servers, got {self.n}; add servers or use a smaller --code")
        # two phases: every server's parity holder exists before any forwarder connects to it
        self._wait([s.call("attach_parity", self.n, self.k, self.r) for s in servers])
        self._wait([s.call("parity_call", "connect", list(servers)) for s in servers])
        self._wait([w.call("enable_push_log") for w in trainer.workers])

    def recover(self, lost: BaseException) -> Resume:
        if getattr(lost, "role", "server") != "server":
            raise Unrecoverable(f"{lost}: --ft ec protects servers; a lost worker is restarted by the driver") from lost
        self._recover_servers(lost)
        return Resume(step=self.trainer.step)

    def after_step(self, step: int) -> None:
        """Rebuilds a share of the stripes still missing (training goes on between shares).

        Rate limit, like md RAID's resync speed limit: the rebuild may take ``rebuild_share`` of wall time until
        it is done, so each boundary earns ``share / (1 - share)`` times the mean of the recent steps' seconds
        (measured here between boundaries, this strategy's own time excluded) and spends it on whole stripes; a
        stripe that overruns is repaid at the next boundaries. A boundary with credit rebuilds at least one
        stripe, and credit grows every boundary, so the rebuild always finishes."""
        now = time.perf_counter()
        if self._boundary_end is not None:
            self._step_seconds.append(now - self._boundary_end)
        try:
            if self._plan:
                self._rebuild_paced()
        except RoleLost as err:  # a server died while a rebuild was running: confirm, then start over with it
            if self.trainer.scheduler.confirm_failure(err) is None:
                raise
            self._recover_servers(err)
        finally:
            self._boundary_end = time.perf_counter()

    def wants_boundary(self, step: int) -> bool:
        """Async mode: whether the driver should let the steps in flight finish so that :meth:`after_step` can
        rebuild (a boundary with no push in flight): while stripes are missing and the rebuild has earned the
        time of a stripe since the last boundary (so overlapping workers are held no more often than needed)."""
        if not self._plan:
            return False
        if self.rebuild_stripes_per_step is not None or self._boundary_end is None or self.rebuild_share >= 1.0:
            return True
        earned = (time.perf_counter() - self._boundary_end) * self.rebuild_share / (1.0 - self.rebuild_share)
        return self._credit + earned >= self._stripe_seconds

    def _rebuild_paced(self) -> None:
        if self.rebuild_stripes_per_step is not None:
            self._rebuild_some(stripes=self.rebuild_stripes_per_step)
            self.boundaries_rebuilding += 1
            return
        if self.rebuild_share >= 1.0 or not self._step_seconds:
            budget = None if self.rebuild_share >= 1.0 else 0.0  # no step measured yet: one stripe
        else:
            mean = sum(self._step_seconds) / len(self._step_seconds)
            self._credit = min(self._credit + self.rebuild_share / (1.0 - self.rebuild_share) * mean,
                               CREDIT_CAP_STEPS * mean)
            if self._credit <= 0.0:
                return  # still repaying an overrun
            budget = self._credit
        start = time.perf_counter()
        self._rebuild_some(seconds=budget)
        self.boundaries_rebuilding += 1
        if budget is not None:
            self._credit -= time.perf_counter() - start

    @property
    def rebuilding(self) -> bool:
        """Whether a replacement still misses stripes (a further loss now counts against r with it; the driver
        leaves spare servers alone until it is done)."""
        return bool(self._plan or self._rebuilding)

    def finish_rebuild(self) -> None:
        """Rebuilds every stripe still missing now."""
        while self._plan:
            self._rebuild_some()

    def _recover_servers(self, cause: BaseException) -> None:
        trainer, sched = self.trainer, self.trainer.scheduler
        start = time.perf_counter()
        while True:
            down = sorted(i for (role, i) in sched.dead if role == "server")
            pending = sorted(set(down) | set(self._rebuilding))  # replacements not yet complete start over
            if len(pending) > self.r:
                self._plan = []  # nothing more can be rebuilt exactly
                raise Unrecoverable(f"unrecoverable: lost servers {pending}, the code (k={self.k}, r={self.r}) "
                                    f"tolerates {self.r} at once; the model cannot be rebuilt exactly") from cause
            try:
                self._begin_rebuild(pending)
                break
            except RoleLost as err:  # another server died during the recovery: confirm it and start again
                if err.role != "server" or sched.confirm_failure(err) is None:
                    raise
                self._rebuilding = pending
        known = {r.index for r in self._open_records}
        # the step that failed: sync mode numbers a step once it succeeded, async mode when it is dispatched
        failed_step = trainer.step + (0 if getattr(trainer.cluster, "mode", "sync") == "async" else 1)
        for p in pending:
            if p not in known:
                record = FailureRecord(step=failed_step, role="server", index=p)
                self.failures.append(record)
                self._open_records.append(record)
        self._rebuild_start = (start, getattr(trainer, "samples", 0)) if self._rebuild_start is None else \
            self._rebuild_start
        self._credit = 0.0
        self._boundary_end = None  # the step holding this recovery is not a normal step: not measured
        if self.rebuild_stripes_per_step == 0:
            self.finish_rebuild()

    def parity_bytes(self) -> int:
        """Bytes of parity blocks held by all servers (as of :meth:`close` once the cluster is shut down)."""
        return int(self._stats().get("parity_bytes", 0))

    def _stats(self) -> Dict[str, int]:
        """Parity bytes, degraded reads and forwarded delta bytes summed over the servers."""
        if self._closed_stats is not None or self.trainer is None:
            return self._closed_stats or {}
        try:
            per_server = self._wait([s.call("parity_call", "stats") for s in self.trainer.scheduler.servers])
        except RoleLost:
            return {}
        return {key: sum(int(s[key]) for s in per_server) for key in per_server[0]}

    def close(self) -> None:
        """Called by the driver before the cluster shuts down: completes a rebuild still running and keeps the
        figures the report needs."""
        if self._closed_stats is None and self.trainer is not None:
            try:
                self.finish_rebuild()
            except (RoleLost, Unrecoverable):
                pass  # the run is stopping on that failure already: keep its error, not this one
            finally:
                self._closed_stats = self._stats()

    def report(self) -> Dict[str, Any]:
        """The strategy's report fields; at the end of training after completing a rebuild still running (so its
        figures are final; a ``fit(steps)`` that stops earlier leaves it to the steps to come). With ``scrub``,
        ``scrub`` lists the inconsistent stripes of a verify pass."""
        t = self.trainer
        if t is not None and self._closed_stats is None and self._plan and t.step >= t.total_steps:
            self.finish_rebuild()
        if self.scrub and self.scrub_result is None and t is not None and self._closed_stats is None:
            self.scrub_result = self.verify()
        stats = self._stats()  # one round of calls for every figure (fit(steps) reports after each call)
        out = self._report(int(stats.get("parity_bytes", 0)))
        if self.scrub_result is not None:
            out["scrub"] = {"inconsistent": [dataclasses.asdict(m) for m in self.scrub_result]}
        out["code"] = {"k": self.k, "r": self.r}
        out["degraded_reads"] = stats.get("degraded_reads", 0)
        out["parity_forwarded_bytes"] = stats.get("forwarded_bytes", 0)
        # mutations whose deltas were merged into an earlier one of their seq range (hot rows sent once per range)
        out["parity_coalesced_mutations"] = stats.get("coalesced", 0)
        return out

    # ---- failure injection and scrub ---------------------------------------------------------------------
    def arm_crash_after_apply(self, server: int) -> None:
        """Server ``server`` applies and acknowledges its next mutation, then dies before forwarding its deltas."""
        self._wait([self.trainer.scheduler.servers[server].call("parity_call", "arm_crash_after_apply")])

    def arm_crash_before_apply(self, server: int) -> None:
        """Server ``server`` dies on its next push, before applying it: the pushing workers see it fail."""
        self._wait([self.trainer.scheduler.servers[server].call("parity_call", "arm_crash_before_apply")])

    def drain(self) -> None:
        """Waits until every live parity holder has applied every delta recorded so far, i.e. every push
        acknowledged until now is parity-durable (e.g. before stopping a server on purpose)."""
        self._drain(list(range(self.n)))

    def verify(self) -> List[StripeMismatch]:
        """Scrub: re-encodes every stripe of every table from its data blocks and lists the stored parity blocks
        that disagree (empty: all consistent). Waits for in-flight parity first. The C++ Scrubber does the work,
        reading the servers' blocks through the fragment readers."""
        servers = self.trainer.scheduler.servers
        self.finish_rebuild()
        self._drain(list(range(self.n)))
        bad: List[StripeMismatch] = []
        for table in self._tables():
            stripes = self._stripes(table, list(range(self.n)))
            data, parity = fragment_readers(servers, table, CALL_TIMEOUT)
            scrubber = _core.Scrubber(self.n, self.k, self.r, *self._geometry(table))
            for stripe, i, srv, c in scrubber.scrub(stripes, data, parity):
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
        """Waits until every survivor's forwarder has nothing queued or in flight; returns their progress. Each
        survivor waits for its own links (``ParityAgent.drain``, woken by their deliveries), so this is usually
        one round of calls; a survivor still pending after DRAIN_WAIT seconds is asked again."""
        while True:
            progress = dict(zip(survivors, self._call_many([(s, "drain", DRAIN_WAIT) for s in survivors])))
            if not any(p["pending"] for p in progress.values()):
                return progress

    def _call_many(self, calls: Sequence[Tuple[Any, ...]]) -> List[Any]:
        """``parity_call``s (server, method, *args), all issued before any is awaited (the servers work in
        parallel and the recovery pays one round trip, not one per call); the answers in call order."""
        servers = self.trainer.scheduler.servers
        return self._wait([servers[c[0]].call("parity_call", *c[1:]) for c in calls])

    def _recovery(self, table: str) -> Any:
        """The C++ Recovery of ``table``'s geometry (kept: it caches decode tables per erasure pattern)."""
        if table not in self._recoveries:
            self._recoveries[table] = _core.Recovery(self.n, self.k, self.r, *self._geometry(table))
        return self._recoveries[table]

    def _stripes(self, table: str, survivors: Sequence[int], extents: Optional[Dict[int, Any]] = None) -> int:
        """Stripes covering every block any survivor holds (data or parity) of ``table``: whole cycles;
        ``extents``: the survivors' (data blocks, parity blocks) when already read."""
        extents = extents or dict(zip(survivors, self._call_many([(s, "extent", table) for s in survivors])))
        stripes = 0
        for s in survivors:
            data_blocks, parity_blocks = extents[s]
            stripes = max(stripes, math.ceil(data_blocks / self.k) * self.n, math.ceil(parity_blocks / self.r) * self.n)
        return stripes

    def _begin_rebuild(self, lost: List[int]) -> None:
        trainer, sched, n, k, r = self.trainer, self.trainer.scheduler, self.n, self.k, self.r
        survivors = [s for s in range(n) if s not in lost]
        # (a) survivors' pending parity reaches the live holders
        progress = self._drain(survivors)
        # (b) every surviving holder of p's stripes rolls p's stream back to W_p
        seq: Dict[int, int] = {s: progress[s]["seq"] for s in survivors}
        wseqs: Dict[int, Dict[int, int]] = {s: progress[s]["worker_seqs"] for s in survivors}
        holders = {p: [h for h in holders_of(p, n, k, r) if h not in lost] for p in lost}
        pairs = [(p, h) for p in lost for h in holders[p]]
        applied = self._call_many([(h, "applied", p) for p, h in pairs])
        for p in lost:
            seq[p] = min(a for (q, _), a in zip(pairs, applied) if q == p)
        agreed = self._call_many([(h, "rollback", p, seq[p]) for p, h in pairs])
        for p in lost:
            first = next(a for (q, _), a in zip(pairs, agreed) if q == p)
            wseqs[p] = {int(w): int(s) for w, s in first.items()}
        self._check_replayable(lost, wseqs)
        # (c) fresh replacements: key index now, blocks by degraded reads and by the rebuild between steps
        for p in lost:
            old = sched.servers[p]
            if ("server", p) not in sched.dead and getattr(old, "alive", True):
                sched.backend.kill(old)  # a replacement whose rebuild was cut short
            handle = sched.replace_server(p)
            trainer.client.servers[p] = handle
        servers = list(sched.servers)
        self._wait([servers[p].call("attach_parity", n, k, r, seq[p], wseqs[p]) for p in lost])
        self._wait([servers[p].call("parity_call", "connect", servers) for p in lost])
        self._call_many([(s, "set_holder", p, servers[p]) for s in survivors for p in lost
                         if p in holders_of(s, n, k, r)] +
                        [(q, "reset_sender", s, seq[s], wseqs[s]) for q in lost for s in range(n)
                         if s != q and q in holders_of(s, n, k, r)])
        layout = self._layout = _core.StripeLayout(n, k, r)
        plan: List[Tuple[str, int]] = []
        for table in self._tables():
            block_slots, record_bytes = self._geometry(table)
            recovery = self._recovery(table)
            extents = dict(zip(survivors, self._call_many([(s, "extent", table) for s in survivors])))
            stripes = self._stripes(table, survivors, extents)
            extent = {s: extents[s][0] for s in survivors}
            for p in lost:
                keys, slots, high_water = consistent_decode(
                    servers, table, block_slots,
                    lambda d, q: recovery.recover_key_index(p, stripes // n * k, lost, d, q), CALL_TIMEOUT)[0]  # noqa: B023
                self._call(p, "begin_restore", table, keys, slots, high_water, servers, lost)
                extent[p] = math.ceil(high_water / block_slots)
            self._extent[table] = extent
            plan += [(table, stripe) for stripe in range(stripes)
                     if any(layout.server_at(stripe, t) in lost for t in range(k + r))]
        self._plan, self._rebuilding = plan, list(lost)
        # (d) workers replay what the rebuilt servers miss, in seq order (blocks they touch decode on demand). A
        # dead worker is skipped (the driver restarts it afterwards); its log died with it.
        for p in lost:
            calls = [w.call("replay_pushes", p, wseqs[p].get(i, 0), servers[p])
                     for i, w in enumerate(trainer.workers) if ("worker", i) not in sched.dead]
            for call in calls:
                try:
                    call.result(CALL_TIMEOUT)
                except WorkerLost as err:
                    sched.confirm_failure(err)

    def _check_replayable(self, lost: Sequence[int], wseqs: Dict[int, Dict[int, int]]) -> None:
        """Unrecoverable when a rebuilt server would miss pushes no live log holds: those above S_p that a dead
        worker sent (its log died with it) or that a restarted worker's predecessor sent (the new log starts
        after them). The driver records each worker's sent seqs per answered step (``PSTrainer.push_seqs``)."""
        trainer, dead = self.trainer, self.trainer.scheduler.dead
        sent = getattr(trainer, "push_seqs", None)
        if sent is None:
            return
        unlogged = getattr(trainer, "unlogged_push_seqs", [None] * len(sent))
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
                        f"yet parity-durable and {how}; the model cannot be rebuilt exactly")

    def _rebuild_some(self, stripes: Optional[int] = None, seconds: Optional[float] = None) -> None:
        """Rebuilds stripes of the plan: at most ``stripes`` of them, and none after ``seconds`` are spent (at
        least one either way); all of them with neither."""
        deadline = None if seconds is None else time.perf_counter() + seconds
        if self._plan and getattr(self.trainer.cluster, "backend", "local") == "ray":
            # remote links batch their sends (parity_link): have every survivor's parity delivered once here,
            # instead of each stripe's decode finding it behind the data and waiting for a flush
            self._drain([s for s in range(self.n) if s not in self._rebuilding])
        done = 0
        while self._plan:
            if done and ((stripes is not None and done >= stripes) or
                         (deadline is not None and time.perf_counter() >= deadline)):
                break
            table, stripe = self._plan[0]
            start = time.perf_counter()
            self._rebuild_stripe(table, stripe)
            self._stripe_seconds = time.perf_counter() - start
            self._plan.pop(0)
            done += 1
            if self.on_rebuild_stripe is not None:
                self.on_rebuild_stripe(stripe)
        if not self._plan and self._rebuilding:
            self._complete_rebuild()

    def _rebuild_stripe(self, table: str, stripe: int) -> None:
        """Decodes the stripe's blocks on restoring servers from consistent fragments: data blocks are restored
        (unless a degraded read did it first), parity blocks written if their holder has applied exactly the data
        versions they encode (else the stripe is decoded again)."""
        k, r = self.k, self.r
        servers = self.trainer.scheduler.servers
        lost = self._rebuilding
        layout = self._layout
        recovery = self._recovery(table)
        wanted = [t for t in range(k + r) if layout.server_at(stripe, t) in lost]
        extent = self._extent[table]
        members = [layout.data_member(stripe, j) for j in range(k)]
        has_data = any(b < extent[s] for s, b in members)
        while True:
            blocks, versions = consistent_decode(
                servers, table, self._geometry(table)[0],
                lambda d, p: recovery.decode_stripe(stripe, wanted, lost, d, p), CALL_TIMEOUT)
            expected = {s: versions.get(s, 0) for s, _ in members}
            written = True
            for t, block in zip(wanted, blocks):
                if t < k:
                    s, b = layout.data_member(stripe, t)
                    if b < extent[s]:
                        self._call(s, "restore_block", table, b, block)
                else:
                    s, c = layout.parity_member(stripe, t - k)
                    if has_data or block.any():
                        written &= bool(self._call(s, "write_parity_if", table, c, block, expected))
            if written:
                return
            time.sleep(0.0005)

    def _complete_rebuild(self) -> None:
        start, samples = self._rebuild_start or (time.perf_counter(), 0)
        seconds = time.perf_counter() - start
        trained = getattr(self.trainer, "samples", 0) - samples
        for record in self._open_records:
            record.rebuild_seconds = seconds
            record.samples_per_sec_during_rebuild = trained / seconds if trained and seconds > 0 else None
        self._open_records, self._rebuilding, self._rebuild_start = [], [], None
        self.trainer.scheduler.replenish_spares()  # the spare used, started now that no rebuild shares the CPU


def _shard_config(spec: Any) -> Any:
    config = _core.ShardConfig()
    config.dim = spec.dim
    config.seed = spec.seed
    config.block_slots = spec.block_slots
    config.optimizer = spec.optimizer.to_config()
    config.initializer = spec.initializer.to_config()
    return config
