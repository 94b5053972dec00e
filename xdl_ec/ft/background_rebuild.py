"""BackgroundRebuild: ``--ft ec``'s default rebuild, off the step's path: a thread of the driver rebuilds the
stripes of lost servers while training goes on, instead of the step boundaries doing it (on Ray REBUILD_BATCH
stripes per round of reads: one call per server, not per stripe).

Why it may run beside the steps: each stripe is decoded from fragments read with their versions and retried until
they agree (I7), a data block is restored only while its replacement still misses it (a push or pull touching it
first decodes it on demand under the server's lock), and a parity block is written only if its holder applied
exactly the versions it encodes (I8): a concurrent push makes a stripe be decoded again, never wrong.

Pace: redundancy stays reduced until the rebuild ends, and with ``r`` servers being rebuilt one more
loss ends the job, so the rebuild runs flat out whenever that is so (``urgent()``) or the machine has a core's
worth of CPU that training left unused (``/proc/stat``'s idle time over the last batch, plus the CPU the rebuild's
own thread took in it: idle time alone never shows the core the rebuild itself keeps busy); otherwise it works
``duty`` of its wall time (sleeping ``(1 - duty) / duty`` times what the last batch took): ``share``, or with a
:class:`~xdl_ec.ft.rebuild_governor.RebuildGovernor` at least ``share`` and more while training keeps its speed,
and with a :class:`~xdl_ec.ft.rebuild_deadline.RebuildDeadline` at least what keeps the vulnerable window's bound
at its measured progress (each batch's seconds reported to it). When even flat out it would miss, the driver holds
the steps in :meth:`BackgroundRebuild.hold` until the thread is done.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional

from xdl_ec.ft.consistent_decode import DecodeStopped
from xdl_ec.ft.ec_recovery import REBUILD_BATCH, EcRecovery, RecoveryTimeout
from xdl_ec.ft.rebuild_deadline import RebuildDeadline
from xdl_ec.ft.rebuild_governor import RebuildGovernor

STOP_TIMEOUT = 30.0  # seconds a stop waits for the stripe being rebuilt (each wait inside it is bounded too)
IDLE_CORES = 1.0  # CPU training left unused (in cores) over the last batch that lets the rebuild run without pausing
PAUSE_SLICE = 0.05  # seconds: a pause is re-measured against the duty this often (the governor may have raised it)


def _cpu_ticks() -> Optional[tuple]:
    """(idle, total) jiffies of the whole machine (Linux /proc/stat), None elsewhere."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return ticks[3] + ticks[4], sum(ticks)


class BackgroundRebuild:
    """Rebuilds ``coordinator``'s plan (a :class:`~xdl_ec.ft.ec_recovery.EcRecovery`) in a thread;
    ``share``: the share of its wall time it keeps to on a busy machine (``governor``: at least that, see
    :class:`~xdl_ec.ft.rebuild_governor.RebuildGovernor`; ``deadline``: at least what keeps the vulnerable window's
    bound); ``urgent()``: True when one more loss would be fatal (then it never pauses)."""

    def __init__(
        self,
        coordinator: EcRecovery,
        share: float,
        urgent: Callable[[], bool],
        governor: Optional[RebuildGovernor] = None,
        deadline: Optional[RebuildDeadline] = None,
    ) -> None:
        self.coordinator = coordinator
        self.share = share
        self.urgent = urgent
        self.governor = governor
        self.deadline = deadline
        self.finished_at: Optional[float] = None  # perf_counter when the plan became empty
        self.stripes = 0  # stripes rebuilt by the thread
        self.paused_seconds = 0.0  # time it left to training
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None
        self._cores = os.cpu_count() or 1

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Starts the thread on the current plan (stopped first if running)."""
        self.stop()
        self._stop.clear()
        self._error, self.finished_at = None, None
        self._thread = threading.Thread(target=self._run, name="xdl-ec-rebuild", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stops the thread after the stripe it is on (bounded: RecoveryTimeout naming the stripe)."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        thread.join(timeout)
        if thread.is_alive():
            plan = self.coordinator.plan
            raise RecoveryTimeout(
                f"rebuild: the background rebuild did not stop within {timeout:g} s (stripe "
                f"{plan[0] if plan else None} of the plan still running)"
            )
        self._thread = None

    def take_error(self) -> Optional[BaseException]:
        """The error that ended the thread (e.g. a server lost during the rebuild), once; None if none."""
        err, self._error = self._error, None
        return err

    def hold(self) -> float:
        """Waits (on the caller's thread: the driver, whose steps then wait too) until the thread has ended, i.e.
        the plan is done or an error stopped it; returns the seconds waited. Each stripe's waits are bounded, so
        this is too."""
        thread, start = self._thread, time.perf_counter()
        while thread is not None and thread.is_alive():
            thread.join(PAUSE_SLICE)  # in slices: the driver stays interruptible
        return time.perf_counter() - start

    def _run(self) -> None:
        coordinator = self.coordinator
        # batches pay off where a call costs a round trip (Ray); in one process a stripe at a time interleaves
        # with the steps better (measured: 1.55x unthrottled there against 2.1-2.3x in batches of 8)
        ray = coordinator.view.backend == "ray"
        try:
            if ray:
                # remote links batch their sends (parity_link): every survivor's parity delivered once first
                coordinator.drain([s for s in range(coordinator.n) if s not in coordinator.rebuilding])
            resumed = time.perf_counter()  # the end of the last pause: progress is measured from there
            while not self._stop.is_set():
                before, own = _cpu_ticks(), time.thread_time()
                start = time.perf_counter()
                try:
                    # a stop ends a decode still waiting for its fragments to agree: those of a sender lost
                    # mid-delivery agree only after the recovery the stop makes way for
                    done = coordinator.rebuild_next(self._batch() if ray else 1, stopped=self._stop.is_set)
                except DecodeStopped:
                    break
                if not done:
                    break
                self.stripes += done
                end = time.perf_counter()
                took = end - start
                if self.deadline is not None:
                    # wall time, the thread's waits for the GIL and a core between batches included: the rate the
                    # window actually closes at on this machine now
                    self.deadline.progress(done, end - resumed)
                self._wait(took, self._pause(took, before, time.thread_time() - own))
                resumed = time.perf_counter()
            if not coordinator.plan:
                self.finished_at = time.perf_counter()
        except BaseException as err:  # noqa: BLE001 - handed to the driver (after_step, recover, finish)
            self._error = err

    def _batch(self) -> int:
        """Stripes per round of reads on Ray: REBUILD_BATCH flat out, fewer at a lower duty (a round is one burst of
        decoding that slows the steps beside it: smaller bursts, paused between, interleave with them better)."""
        if self.urgent():
            return REBUILD_BATCH
        return max(1, min(REBUILD_BATCH, round(REBUILD_BATCH * self.duty)))

    @property
    def duty(self) -> float:
        """The share of its wall time the rebuild works while it would slow training."""
        duty = self.share if self.governor is None else max(self.share, self.governor.duty)
        if self.deadline is not None:
            duty = max(duty, min(1.0, self.deadline.duty(len(self.coordinator.plan))))
        return duty

    def _wait(self, took: float, pause: float) -> None:
        """Sleeps ``pause`` seconds, cut short when the duty rises meanwhile (re-read every PAUSE_SLICE)."""
        waited, duty = 0.0, self.duty
        while waited < pause and not self._stop.is_set():
            start = time.perf_counter()
            self._stop.wait(min(PAUSE_SLICE, pause - waited))
            waited += time.perf_counter() - start
            if self.duty != duty:
                duty = self.duty
                pause = min(pause, took * (1.0 - duty) / duty)
        self.paused_seconds += waited

    def _pause(self, took: float, before: Optional[tuple], own_cpu: float = 0.0) -> float:
        """Seconds to leave to training after a batch that took ``took`` seconds, ``own_cpu`` of them on the CPU in
        this thread; ``before``: the machine's (idle, total) ticks when it began."""
        if self.duty >= 1.0 or self.urgent():
            return 0.0
        after = _cpu_ticks()
        if before is not None and after is not None and after[1] > before[1] and took > 0:
            idle_cores = (after[0] - before[0]) / (after[1] - before[1]) * self._cores
            if idle_cores + min(own_cpu / took, 1.0) >= IDLE_CORES:
                return 0.0  # training left a core unused while the batch was rebuilt: the rebuild takes nothing from it
        duty = self.duty
        return took * (1.0 - duty) / duty
