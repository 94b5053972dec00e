"""TrainingLoop: the driver's steps of a parameter-server run, fit by fit.

A fit runs the step loop (:func:`~xdl_ec.ps.sync_loop.run_sync` or :func:`~xdl_ec.ps.async_loop.run_async`) from
where the previous fit stopped, then waits at a boundary until every push is applied. Around each step it lets the
failure injector act (``before_step``) and, at a boundary with no push in flight, the strategy and the hooks
(``after_step``); a role lost there is recovered as a failed step's would be. It keeps the fit's figures: the
timeline, the loop's own seconds and the stages the workers' clocks measured.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from xdl_ec.model.step_outputs import LAST_STEPS
from xdl_ec.ps.cluster_view import ClusterView
from xdl_ec.ps.dense_sync import DriverDense
from xdl_ec.ps.fault_injector import FaultInjector
from xdl_ec.ps.progress import Progress
from xdl_ec.ps.recovery_coordinator import RecoveryCoordinator
from xdl_ec.ps.running_cluster import RunningCluster
from xdl_ec.ps.step_hook import StepHook
from xdl_ec.ps.step_stages import StageClock
from xdl_ec.ps.training_state import TrainingState
from xdl_ec.settings import checks

# a step loop: trains until step ``stop`` (None: until every worker's input is exhausted), updating the bar
Steps = Callable[["TrainingLoop", Progress, Optional[int]], None]


class TrainingLoop:
    """Trains the run of ``cluster`` at ``state`` with ``steps`` (the mode's step loop); ``run``: what the hooks get
    at a boundary (the driver's :class:`~xdl_ec.ps.training.PSTrainer`); ``progress``: show a progress bar."""

    def __init__(
        self,
        cluster: RunningCluster,
        state: TrainingState,
        dense: DriverDense,
        recovery: RecoveryCoordinator,
        view: ClusterView,
        steps: Steps,
        run: Any,
        injector: Optional[FaultInjector] = None,
        progress: bool = False,
    ) -> None:
        self.cluster, self.state, self.dense, self.recovery, self.view = cluster, state, dense, recovery, view
        self.steps, self.run, self.injector, self.progress = steps, run, injector, progress
        # at step boundaries with no push in flight, after the strategy: each hook's after_step(run); async mode
        # holds new steps while a hook's due(step) is True
        self.hooks: List[StepHook] = []
        self.timeline: List[List[float]] = []
        # the driver's seconds per part of its loop (sync mode): "call" (step calls sent until every answer is
        # in), "dense" (weights read, gradients applied), "boundary" (bookkeeping, after_step); dense_bytes:
        # dense arrays carried by step calls and answers (bench/bench_ray_step.py)
        self.loop_seconds: Dict[str, float] = {"call": 0.0, "dense": 0.0, "boundary": 0.0}
        self.dense_bytes = 0
        self._train_start: Optional[float] = None
        self._fit_start = 0.0
        self._first_step_end: Optional[float] = None  # when this fit's first step ended, and its samples then
        self._first_samples = 0
        self._fit_samples = 0  # samples before this fit

    # ---- what the step loops call -----------------------------------------------------------------------
    def before_step(self, step: int) -> None:
        """Step ``step`` is about to start: the failure injector may kill roles now."""
        if self.injector is not None:
            elapsed = 0.0 if self._train_start is None else time.perf_counter() - self._train_start
            injector = self.injector
            if self.cluster.config.mode != "sync":  # steps in flight: no boundary to recover at
                injector.before_step(self.view, step, elapsed)
                return
            # its quiesce may meet a role lost otherwise (with a driver that died): recovered as at a boundary
            self.recovery.at_boundary(lambda: injector.before_step(self.view, step, elapsed))

    def ttl_before(self, step: int) -> Optional[Dict[str, int]]:
        """{table: cutoff} of the Evict(ttl_seconds) passes that end ``step``'s pushes, for its workers (noting the
        step's start time the first time it is asked: a retried or replayed step keeps its first cutoffs)."""
        return self.state.step_times.start(step)

    def after_step(self, step: int) -> None:
        """A step boundary with no push in flight: the strategy's, then the hooks' (periodic saves)."""
        self.cluster.strategy.after_step(step)
        for hook in self.hooks:
            hook.after_step(self.run)

    def boundary(self) -> bool:
        """The step boundary after the current step (:meth:`after_step`, a role lost there recovered); True when
        a recovery rolled training back (the loop goes on from its step)."""
        return self.recovery.at_boundary(lambda: self.after_step(self.state.step))

    def _last_boundary(self) -> None:
        """A fit's last boundary: every push applied, and every server alive (the reads after training recover
        nothing), so a loss no step met is recovered here."""
        self.cluster.quiesce()
        self.cluster.check_servers()

    def wants_boundary(self, step: int) -> bool:
        """Async mode: hold new steps until none is in flight, so :meth:`after_step` comes."""
        return self.cluster.strategy.wants_boundary(step) or any(hook.due(step) for hook in self.hooks)

    def tick(self, bar: Progress) -> None:
        """A step was trained: the timeline and the bar move on."""
        state = self.state
        now = time.perf_counter()
        if self._first_step_end is None:
            self._first_step_end, self._first_samples = now, state.samples
        # (step, seconds since this fit began, samples so far, step loss): throughput and loss over time
        self.timeline.append([state.step, now - self._fit_start, state.samples - self._fit_samples, state.losses[-1]])
        bar.update(state.samples - self._fit_samples, state.losses[-1], state.outputs.latest)

    # ---- a fit ------------------------------------------------------------------------------------------
    def fit(self, steps: Optional[int] = None) -> Dict[str, Any]:
        """Trains at most ``steps`` more steps (None: until every worker's input is exhausted); the next call
        continues where this one stopped. Returns this call's figures plus the strategy's report."""
        cluster, state = self.cluster, self.state
        if steps is not None:
            steps = checks.non_negative_int("steps", steps)
        stop = None if steps is None else state.step + steps
        state.total_steps = stop
        if self.injector is not None:
            self.injector.validate(cluster.config.servers, cluster.config.workers, stop)
            self.injector.reset()
        self._first_step_end, self._first_samples = None, 0
        self._fit_samples = state.samples
        self.timeline = []
        bar = Progress(steps, self.progress, auc=state.progressive.auc)
        clock = StageClock(cluster.worker_stats(skip_lost=True))
        start = self._fit_start = time.perf_counter()
        if self._train_start is None:  # the first call: --mtbf kills count from here
            self._train_start = start
        first_step = state.step
        try:
            self.steps(self, bar, stop)
            while self.recovery.at_boundary(self._last_boundary):  # every push applied before the clock stops
                self.steps(self, bar, stop)  # rolled back by a recovery: train the steps again
        finally:
            bar.close()
        end = time.perf_counter()
        seconds = end - start
        samples = state.samples - self._fit_samples
        first_end, first_samples = self._first_step_end, self._first_samples
        steady = (
            (state.samples - first_samples) / (end - first_end)
            if first_end is not None and state.samples > first_samples
            else None
        )
        injected = [] if self.injector is None else self.injector.injected()
        return {
            "samples": samples,
            "steps": state.step,
            "steps_this_fit": state.step - first_step,
            "train_seconds": seconds,
            "samples_per_sec": samples / seconds if seconds > 0 else 0.0,
            "steady_samples_per_sec": steady,
            "final_loss": float(np.mean(state.losses[-LAST_STEPS:])) if state.losses else None,
            "timeline": self.timeline,
            "progressive": state.progressive.report(),
            **state.outputs.report(),
            "injected": [{**k, "seconds": k["time"] - start} for k in injected],
            "stages": clock.stages(cluster.worker_stats(skip_lost=True)),
            **cluster.strategy.report(),
        }
