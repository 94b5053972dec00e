"""``--ft ec --code k,r``: erasure-coded parameter servers whose lost shards are rebuilt bit for bit.

N servers (N >= k + r) each hold data and parity: the C++ StripeLayout joins k data blocks of k servers with r
parity blocks on r other servers per stripe, rotated. Every mutation's slot deltas are forwarded to the parity
holders in the background (:mod:`xdl_ec.ft.parity_agent`); when up to r servers die, survivors drain, holders roll
the dead servers' streams back to a common prefix, replacements decode their key index and enter restore mode,
workers replay their logged pushes exactly once, and training goes on at the failed step while the stripes are
rebuilt. The protocol, its numbered invariants (I1..I11, cited in the code) and why the rebuilt records are exact:
docs/design/ec-protocol.md.

The parts: :class:`ErasureCoded` (this module) is the strategy seam the driver calls; the recovery steps (a)-(e)
are :class:`~xdl_ec.ft.ec_recovery.EcRecovery`'s; the rebuild is paced off the step's path by
:class:`~xdl_ec.ft.background_rebuild.BackgroundRebuild` (default) or at step boundaries by
:class:`~xdl_ec.ft.rebuild_pacer.BoundaryPacer`; the scrub is :func:`xdl_ec.ft.ec_scrub.scrub`.

Failure injection inside the protocol: :meth:`ErasureCoded.arm_crash_after_apply` makes a server apply and
acknowledge its next mutation and die before forwarding its deltas. :meth:`ErasureCoded.verify` scrubs every stripe.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from xdl_ec.ft.background_rebuild import BackgroundRebuild
from xdl_ec.ft.configs import REBUILD_MODES, URGENT_REBUILDS, parse_code
from xdl_ec.ft.delta_forwarding import ForwardingProgress
from xdl_ec.ft.ec_recovery import CALL_TIMEOUT, REBUILD_BATCH, EcRecovery, RecoveryTimeout
from xdl_ec.ft.ec_scrub import StripeMismatch, scrub
from xdl_ec.ft.parity_agent import parity_agent_for
from xdl_ec.ft.rebuild_deadline import DEFAULT_REBUILD_WITHIN, RebuildDeadline
from xdl_ec.ft.rebuild_governor import DEFAULT_REBUILD_KEEPS, RebuildGovernor
from xdl_ec.ft.rebuild_pacer import BoundaryPacer
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.fault_tolerance import FailureRecord, FaultTolerance, Resume, Unrecoverable
from xdl_ec.settings import checks
from xdl_ec.sparse.memory_budget import TIER_COUNTS, tier_reports

if TYPE_CHECKING:
    from xdl_ec.ps.cluster_view import ClusterView

__all__ = [
    "CALL_TIMEOUT",
    "DEFAULT_REBUILD_KEEPS",
    "DEFAULT_REBUILD_SHARE",
    "DEFAULT_REBUILD_WITHIN",
    "ErasureCoded",
    "RecoveryTimeout",
    "StripeMismatch",
]

DEFAULT_REBUILD_SHARE = 0.05  # share of wall time a rebuild keeps to while it would slow training

log = logging.getLogger(__name__)


class ErasureCoded(FaultTolerance):
    """``--ft ec``: (k, r) erasure-coded parity over every server's slot records; see the module docstring."""

    name = "ec"

    def __init__(
        self,
        k: int = 4,
        r: int = 1,
        rebuild_stripes_per_step: Optional[int] = None,
        rebuild_share: float = DEFAULT_REBUILD_SHARE,
        rebuild: str = "background",
        rebuild_keeps: float = DEFAULT_REBUILD_KEEPS,
        urgent_rebuild: str = "flat-out",
        rebuild_within: float = DEFAULT_REBUILD_WITHIN,
        *,
        on_rebuild_stripe: Optional[Callable[[int], None]] = None,
    ) -> None:
        """``rebuild``: "background" rebuilds lost stripes in a thread beside the steps, flat out while the
        machine has an idle core or one more loss would be fatal (``urgent_rebuild`` "flat-out"; "paced": paced
        then too, for training's speed over the window's length), else taking at least ``rebuild_share`` of wall
        time and more while training keeps ``rebuild_keeps`` of its samples/s before the failure (0: exactly
        ``rebuild_share``; :mod:`xdl_ec.ft.rebuild_governor`); "boundary" rebuilds them at step boundaries,
        ``rebuild_share`` of wall time (md RAID-style). Given ``rebuild_stripes_per_step`` (boundary mode): that
        many stripes per boundary (0: the whole rebuild inside the recovery). ``rebuild_within``: the bound in
        seconds on the window in which one more loss is fatal, from the loss to full redundancy: the rebuild works
        more as its measured progress demands and holds training's steps when it must
        (:mod:`xdl_ec.ft.rebuild_deadline`; not with ``rebuild_stripes_per_step``, a fixed count). Each failure
        reports ``vulnerable_seconds`` and whether the bound held. ``on_rebuild_stripe(stripe)``, when given, is
        called after each stripe is rebuilt (where a test kills a survivor mid-rebuild or slows one)."""
        super().__init__()
        self.k, self.r = parse_code((k, r))
        self.rebuild_share = checks.number("rebuild_share", rebuild_share, 0.0, 1.0, low_open=True)
        self.rebuild_keeps = checks.number("rebuild_keeps", rebuild_keeps, 0.0, 1.0, high_open=True)
        if rebuild_stripes_per_step is not None and (
            isinstance(rebuild_stripes_per_step, bool)
            or not isinstance(rebuild_stripes_per_step, int)
            or rebuild_stripes_per_step < 0
        ):
            raise ValueError(f"rebuild_stripes_per_step: must be an int >= 0 or None, got {rebuild_stripes_per_step!r}")
        if rebuild not in REBUILD_MODES:
            raise ValueError(f"rebuild: must be one of {REBUILD_MODES}, got {rebuild!r}")
        self.urgent_rebuild = checks.one_of("urgent_rebuild", urgent_rebuild, URGENT_REBUILDS)
        self.deadline = RebuildDeadline(rebuild_within)
        self.rebuild_stripes_per_step = rebuild_stripes_per_step
        self.rebuild_mode = "boundary" if rebuild_stripes_per_step is not None else rebuild
        self.scrub = False  # verify every stripe when the report is made (xdl-ec verify)
        self.scrub_result: Optional[List[StripeMismatch]] = None
        self.n = 0
        self.secret: Optional[JobSecret] = None
        if on_rebuild_stripe is not None and not callable(on_rebuild_stripe):
            raise TypeError(f"on_rebuild_stripe: expected a callable or None, got {type(on_rebuild_stripe).__name__}")
        self.on_rebuild_stripe = on_rebuild_stripe
        self.coordinator = EcRecovery(self)
        self.pacer = BoundaryPacer(self.coordinator, self.rebuild_share, rebuild_stripes_per_step)
        self.background: Optional[BackgroundRebuild] = None
        self.governor: Optional[RebuildGovernor] = None
        if self.rebuild_mode == "background":
            self.governor = RebuildGovernor(self.rebuild_share, self.rebuild_keeps)
            self.background = BackgroundRebuild(
                self.coordinator, self.rebuild_share, self._rebuild_is_urgent, self.governor, self.deadline
            )
        self._closed_stats: Optional[Dict[str, int]] = None
        self._open_records: List[FailureRecord] = []
        self._record_start: Dict[int, float] = {}  # id(record) -> perf_counter of the recovery that opened it
        self._rebuild_start: Optional[Tuple[float, int]] = None
        self._window_opened_by: List[FailureRecord] = []  # the losses that left one more loss fatal
        self._held_seconds = 0.0  # training's steps held for the window's bound during this rebuild
        self._boundary_at: Optional[float] = None  # perf_counter of the last step boundary or recovery

    # ---- the seam --------------------------------------------------------------------------------------
    def attach(self, view: ClusterView) -> None:
        super().attach(view)
        servers = view.server_handles()
        self.n = len(servers)
        if self.n < self.k + self.r:
            raise ValueError(
                f"--servers: the code k={self.k}, r={self.r} needs at least k + r = {self.k + self.r} "
                f"servers, got {self.n}; add servers or use a smaller --code"
            )
        # two phases: every server's parity holder exists before any forwarder connects to it
        self.secret = JobSecret.generate()  # the job's parity links prove membership with it (ft.parity_link)
        self._wait(
            [
                view.server(i).attach_agent(parity_agent_for, self.n, self.k, self.r, 0, None, self.secret)
                for i in range(self.n)
            ]
        )
        self._wait([self.coordinator.agent(i).connect(servers) for i in range(self.n)])
        self._wait([w.enable_push_log() for w in view.workers()])

    reattaches = True

    @property
    def link_secret(self) -> Any:
        return self.secret

    def reattach(self, view: ClusterView, link_secret: Any) -> None:
        """The servers of a run whose driver died keep their agents, stripes, parity and links (the secret is the
        run record's), and the workers their push logs: nothing is set up again. Every delta recorded so far is made
        parity-durable before training goes on (the dead driver's last step may still be forwarding), on the servers
        alive."""
        FaultTolerance.attach(self, view)
        self.n = len(view.server_handles())
        self.secret = link_secret
        # a server lost meanwhile (the scheduler's probe marked it) is recovered at the first step that meets it
        dead = view.dead()
        self._drain([i for i in range(self.n) if ("server", i) not in dead])

    def recover(self, lost: BaseException) -> Resume:
        if getattr(lost, "role", "server") != "server":
            raise Unrecoverable(f"{lost}: --ft ec protects servers; a lost worker is restarted by the driver") from lost
        self._recover_servers(lost)
        return Resume(step=self.view.step)

    def after_step(self, step: int) -> None:
        """Background mode: hands a failure the rebuild thread met to the recovery, and closes a rebuild the
        thread completed. Boundary mode: rebuilds this boundary's share of the stripes still missing."""
        self._refine_window()
        if self.background is not None and self.governor is not None:  # background mode has both
            self.governor.step(time.perf_counter(), self.view.samples)
            if self.background.running and self._must_hold():
                self._held_seconds += self.background.hold()
            self._boundary_at = time.perf_counter()
            err = self.background.take_error()
            if err is not None:
                self._rebuild_failed(err)
            elif self.coordinator.rebuilding and not self.coordinator.plan and not self.background.running:
                self._complete_rebuild(self.background.finished_at)
            return
        self.pacer.step_boundary()
        try:
            if self.rebuild_stripes_per_step is None:  # a share of wall time: at least what keeps the bound
                self.pacer.share = min(1.0, max(self.rebuild_share, self.deadline.duty(len(self.coordinator.plan))))
            remaining, start = len(self.coordinator.plan), time.perf_counter()
            self.pacer.rebuild()
            self.deadline.progress(remaining - len(self.coordinator.plan), time.perf_counter() - start)
            if self.coordinator.rebuilding and not self.coordinator.plan:
                self._complete_rebuild()
        except RoleLost as err:  # a server died while a rebuild was running: confirm, then start over with it
            self._rebuild_failed(err)
        finally:
            self.pacer.boundary_end()

    def wants_boundary(self, step: int) -> bool:
        """Async mode: whether the driver should let the steps in flight finish so that :meth:`after_step` can
        rebuild (boundary mode), or hold the steps for the window's bound (background mode)."""
        if self.background is not None:
            return self.background.running and self._must_hold()
        return self.pacer.wants_boundary()

    def _must_hold(self) -> bool:
        """Whether the steps must wait for the background rebuild to keep the window's bound; the last step's
        length is the margin: not holding now lets one more step run beside the rebuild."""
        step = 0.0 if self._boundary_at is None else time.perf_counter() - self._boundary_at
        return self.deadline.must_hold(len(self.coordinator.plan), step)

    @property
    def stripe_code(self) -> Tuple[int, int]:
        return self.k, self.r

    @property
    def boundaries_rebuilding(self) -> int:
        """Step boundaries that rebuilt stripes (boundary mode: the rebuild's spread, for tests)."""
        return self.pacer.boundaries_rebuilding

    @property
    def rebuilding(self) -> bool:
        """Whether a replacement still misses stripes (a further loss now counts against r with it; the driver
        leaves spare servers alone until it is done)."""
        return bool(self.coordinator.plan or self.coordinator.rebuilding)

    def _one_more_loss_is_fatal(self) -> bool:
        """I9: with r servers being rebuilt, one more loss puts more than r down at once."""
        return len(self.coordinator.rebuilding) >= self.r

    def _rebuild_is_urgent(self) -> bool:
        """The background rebuild runs flat out: one more loss would be fatal and ``urgent_rebuild`` says so."""
        return self.urgent_rebuild == "flat-out" and self._one_more_loss_is_fatal()

    def finish_rebuild(self) -> None:
        """Rebuilds every stripe still missing now (on the caller's thread)."""
        if self.background is not None:
            self.background.stop()
            err = self.background.take_error()
            if err is not None:
                raise err
        while self.coordinator.rebuild_next(REBUILD_BATCH):
            pass
        if self.coordinator.rebuilding:
            self._complete_rebuild()

    def _rebuild_failed(self, err: BaseException) -> None:
        """A rebuild stopped on ``err``: a server lost meanwhile restarts the recovery with it; anything else
        stops the run."""
        if not isinstance(err, RoleLost) or self.view.confirm_failure(err) is None:
            raise err
        self._recover_servers(err)

    def _recover_servers(self, cause: BaseException) -> None:
        view, coordinator = self.view, self.coordinator
        start = time.perf_counter()
        if self.background is not None:  # the thread reads the plan this recovery replaces
            self.background.stop()
            err = self.background.take_error()
            if err is not None and not isinstance(err, RoleLost):
                raise err
            if err is not None:
                view.confirm_failure(err)  # counted below if it is dead
        while True:
            down = view.dead_servers()
            pending = sorted(set(down) | set(coordinator.rebuilding))  # replacements not yet complete start over
            if len(pending) > self.r:  # I9
                coordinator.plan = []  # nothing more can be rebuilt exactly
                raise Unrecoverable(
                    f"unrecoverable: lost servers {pending}, the code (k={self.k}, r={self.r}) "
                    f"tolerates {self.r} at once; the model cannot be rebuilt exactly"
                ) from cause
            log.warning(
                "ec: servers %s lost before step %d: recovering (k=%d, r=%d)", pending, view.step + 1, self.k, self.r
            )
            try:
                coordinator.begin(pending)
                break
            except RoleLost as err:  # another server died during the recovery: confirm it and start again
                if err.role != "server" or view.confirm_failure(err) is None:
                    raise
                coordinator.rebuilding = pending
        paused = time.perf_counter() - start  # (a)-(d): training waited for them
        for record in self._open_records:
            record.recovery_pause_seconds += paused
        known = {r.index for r in self._open_records}
        # the step that failed: sync mode numbers a step once it succeeded, async mode when it is dispatched
        failed_step = view.step + (0 if view.mode == "async" else 1)
        new_records = []
        for p in pending:
            if p not in known:
                record = FailureRecord(step=failed_step, role="server", index=p, recovery_pause_seconds=paused)
                self.failures.append(record)
                self._open_records.append(record)
                self._record_start[id(record)] = start
                new_records.append(record)
        self._rebuild_start = (start, view.samples) if self._rebuild_start is None else self._rebuild_start
        if self._one_more_loss_is_fatal() and not self.deadline.is_open:
            self.deadline.open(start)
            self._window_opened_by = new_records
        self.pacer.restart()
        self._boundary_at = time.perf_counter()  # the recovery's pause is no step
        if self.rebuild_stripes_per_step == 0:
            self.finish_rebuild()
        elif self.background is not None and self.governor is not None:
            self.governor.start()
            self.background.start()

    def _refine_window(self) -> None:
        """The vulnerable window began at the loss that opened it, its detection included (known once the
        driver has filled in the records' ``detect_seconds``, after the recovery)."""
        if self.deadline.is_open:
            for record in self._window_opened_by:
                opened = self._record_start.get(id(record))
                if opened is not None:
                    self.deadline.starts_at(opened - record.detect_seconds)

    def _complete_rebuild(self, finished_at: Optional[float] = None) -> None:
        """Every replacement is whole again: the failure records get their figures (rebuild seconds and samples/s
        from the first recovery; seconds to full redundancy from each loss, its detection included)."""
        self._refine_window()
        now = time.perf_counter()
        end = finished_at if finished_at is not None else now
        start, samples = self._rebuild_start or (end, 0)
        seconds = end - start
        trained = self.view.samples - samples
        for record in self._open_records:
            record.rebuild_seconds = seconds
            record.samples_per_sec_during_rebuild = trained / seconds if trained and seconds > 0 else None
            opened = self._record_start.pop(id(record), start)
            record.seconds_to_full_redundancy = end - opened + record.detect_seconds
            record.training_held_seconds = self._held_seconds
            if self.deadline.is_open and self.deadline.since is not None:
                lost_at = opened - record.detect_seconds
                record.vulnerable_seconds = end - max(self.deadline.since, lost_at)
                record.vulnerable_within_bound = record.vulnerable_seconds <= self.deadline.within
            else:
                record.vulnerable_seconds = 0.0  # one more loss was never fatal meanwhile (r > 1)
            log.warning(
                "ec: server %d recovered in %.3f s (full redundancy again, from its loss)",
                record.index,
                record.seconds_to_full_redundancy,
            )
        held = self._held_seconds
        self._open_records, self._rebuild_start = [], None
        self._window_opened_by, self._held_seconds = [], 0.0
        self.deadline.close()
        self.coordinator.rebuilding = []
        if self.governor is not None:
            self.governor.stop()
        log.info("ec: full redundancy again after %.3f s (held training %.3f s)", seconds, held)
        self.view.replenish_spares()  # the spare used, started now that no rebuild shares the CPU

    # ---- report ----------------------------------------------------------------------------------------
    def parity_bytes(self) -> int:
        """Bytes of parity blocks held by all servers (as of :meth:`close` once the cluster is shut down)."""
        return int(self._stats().get("parity_bytes", 0))

    def parity_lag(self) -> int:
        """Deltas the servers recorded that some live parity holder has not applied yet, summed over the servers."""
        return int(self._stats().get("parity_lag", 0))

    def _stats(self) -> Dict[str, int]:
        """Parity bytes, degraded reads and forwarded delta bytes summed over the servers."""
        if self._closed_stats is not None or self.view is None:
            return self._closed_stats or {}
        try:
            per_server = self._wait([self.coordinator.agent(i).stats() for i in range(self.n)])
        except RoleLost:
            return {}
        return {key: sum(int(s[key]) for s in per_server) for key in per_server[0]}

    def close(self) -> None:
        """Called by the driver before the cluster shuts down: completes a rebuild still running and keeps the
        figures the report needs. When the run is stopping on an error or an interrupt (an exception is being
        raised through the driver), the rebuild is only stopped: nothing more is waited for."""
        if self._closed_stats is not None or self.view is None:
            return
        if sys.exc_info()[0] is not None:
            if self.background is not None:
                try:
                    self.background.stop(timeout=2.0)
                except RecoveryTimeout:
                    pass  # a daemon thread: it dies with the process
            self._closed_stats = {}
            return
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
        t = self.view
        if t is not None and self._closed_stats is None and self.rebuilding and t.finished:
            self.finish_rebuild()
        if self.scrub and self.scrub_result is None and t is not None and self._closed_stats is None:
            self.scrub_result = self.verify()
        stats = self._stats()  # one round of calls for every figure (fit(steps) reports after each call)
        out = self._report(int(stats.get("parity_bytes", 0)))
        if self.scrub_result is not None:
            out["scrub"] = {"inconsistent": [dataclasses.asdict(m) for m in self.scrub_result]}
        out["code"] = {"k": self.k, "r": self.r}
        out["rebuild"] = self.rebuild_mode
        out["rebuild_within"] = self.deadline.within
        out["degraded_reads"] = stats.get("degraded_reads", 0)
        out["parity_forwarded_bytes"] = stats.get("forwarded_bytes", 0)
        # mutations whose deltas were merged into an earlier one of their seq range (hot rows sent once per range)
        out["parity_coalesced_mutations"] = stats.get("coalesced", 0)
        if stats.get("parity_tiered"):  # budgeted servers: their held parity's disk tier, summed over them
            counts = {key: stats[f"parity_{key}"] for key in TIER_COUNTS}
            out["parity_tier"] = tier_reports([{"parity": counts}])["parity"]
        return out

    # ---- a resize (xdl_ec.ps.resize) ------------------------------------------------------------------------
    @property
    def reforms_on_resize(self) -> bool:
        """Stripes rotate over the server count (StripeLayout): another count is other stripes, so a resize
        re-forms them all on a cluster of fresh servers (see :mod:`xdl_ec.ps.resize`)."""
        return True

    def retire(self) -> None:
        """A resize has read every row of this strategy's servers (after :meth:`finish_rebuild`) and replaces them:
        the rebuild's thread stops; the servers and their parity stay as they are until the caller stops them
        (after every row is durable on the new layout). Figures of the old layout end here: the successor
        reports the new one's."""
        if self.background is not None:
            self.background.stop()
        self._closed_stats = {}

    def successor(self, code: Optional[Tuple[int, int]] = None) -> "ErasureCoded":
        """A fresh strategy of these settings for the resized cluster (``attach`` forms its stripes over the new
        count), carrying the failures recorded so far. ``code``: the (k, r) its stripes take (None: this one's; a
        resize asked to change it)."""
        k, r = (self.k, self.r) if code is None else parse_code(code)
        nxt = ErasureCoded(
            k,
            r,
            self.rebuild_stripes_per_step,
            self.rebuild_share,
            self.rebuild_mode,
            self.rebuild_keeps,
            self.urgent_rebuild,
            self.deadline.within,
            on_rebuild_stripe=self.on_rebuild_stripe,
        )
        nxt.scrub = self.scrub
        nxt.failures = self.failures
        nxt.checkpoint_seconds = self.checkpoint_seconds
        return nxt

    # ---- failure injection and scrub ---------------------------------------------------------------------
    def arm_crash_after_apply(self, server: int) -> None:
        """Server ``server`` applies and acknowledges its next mutation, then dies before forwarding its deltas."""
        self._wait([self.coordinator.agent(server).arm_crash_after_apply()])

    def arm_crash_before_apply(self, server: int) -> None:
        """Server ``server`` dies on its next push, before applying it: the pushing workers see it fail."""
        self._wait([self.coordinator.agent(server).arm_crash_before_apply()])

    def resumed(self, step: int) -> None:
        """The rows a resume loaded reached parity as deltas, like pushes, but no worker logs them for a replay: they
        are made parity-durable before training goes on, so a server lost right after the resume is rebuilt with
        them (before this wait, a kill a few steps in could find them still on their way under load)."""
        self.drain()

    def catch_up(self) -> None:
        """The parity holders apply a bulk load's deltas before its next chunk: the forwarders' queues would
        otherwise hold many chunks' deltas (GBs at a few servers), whose freed buffers the allocator keeps."""
        self.drain()

    def drain(self) -> None:
        """Waits until every live parity holder has applied every delta recorded so far, i.e. every push
        acknowledged until now is parity-durable (e.g. before stopping a server on purpose)."""
        self._drain(list(range(self.n)))

    def verify(self) -> List[StripeMismatch]:
        """Scrub: re-encodes every stripe of every table from its data blocks and lists the stored parity blocks
        that disagree (empty: all consistent). Completes the rebuild and waits for in-flight parity first."""
        self.finish_rebuild()
        self._drain(list(range(self.n)))
        return scrub(self.coordinator)

    def _drain(self, survivors: List[int]) -> Dict[int, ForwardingProgress]:
        return self.coordinator.drain(survivors)

    def _wait(self, futures: List[Any]) -> List[Any]:
        return self.coordinator.wait(futures)
