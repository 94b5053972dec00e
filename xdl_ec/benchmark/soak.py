"""Soak: a run trained under ``ec`` with a backstop while SIGKILLs hit servers, workers and the driver at a seeded
rate, checked against its failure-free twin, which trains the same steps beside it in one process (issue #51's
``bench/soak.py``). The steps: what the failure-free run on the soak's backend trains in ``minutes``, from a
calibration run's steady rate.

The driver is a real ``xdl-ec train`` process. Its servers and workers are killed for real by the run's own
failure injection (``--mtbf`` for servers, ``--fail-worker-at`` at seeded steps for workers: the local backend's
roles live in the driver's process, where only the run can reach them); the driver itself is SIGKILLed from outside
and started again, as an orchestrator would: on Ray with the same command, whose ``--run-dir`` reattaches it to its
servers, parity and worker (nothing re-trained), or resumes from the backstop when it cannot (docs/design/
reattach.md); in one process (``local``: the roles die with the driver) with ``--resume`` of its save dir. The three
roles share the rate: one kill every ``kill_every`` seconds on average, a third of them each. Every process the soak
starts carries a marker in its environment, so what outlives its run (a dead driver's Ray processes) is found and
counted as leaked once ``leak_grace`` seconds have passed, then killed.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

MARKER = "XDL_EC_SOAK_ID"
_STEP = re.compile(r"^step (\d+)/(\d+)")
_DIGEST = re.compile(r"^model_digest ([0-9a-f]{64})")
_INJECTED = re.compile(r"injected failure: (server|worker) \d+ killed before step (\d+)")
_RECOVERED = re.compile(r"(server|worker) \d+ recovered in ([0-9.]+) s")
_REATTACHED = re.compile(r"reattached at step (\d+)")
_REFUSED = re.compile(r"cannot reattach: (.*); the run starts again")
CALIBRATION_STEPS = 200  # the calibration run's: its steady rate sets the soak's steps


@dataclasses.dataclass(frozen=True)
class SoakPlan:
    """What to soak: ``minutes`` of training (the failure-free twin's length), on ``backend``, kills seeded by
    ``seed`` every ``kill_every`` seconds on average over the three roles."""

    minutes: float
    backend: str = "local"
    seed: int = 0
    kill_every: float = 20.0
    servers: int = 3
    code: Tuple[int, int] = (2, 1)
    batch_size: int = 256
    backstop_every: str = "5s"
    hang_after: float = 300.0  # seconds without a line of output: the run counts as hung and is killed
    leak_grace: float = 60.0  # seconds a dead run's processes may take to end before they count as leaked

    def __post_init__(self) -> None:
        if not self.minutes > 0:
            raise ValueError(f"minutes: expected a positive number, got {self.minutes!r}")
        if self.backend not in ("local", "ray"):
            raise ValueError(f"backend: expected 'local' or 'ray', got {self.backend!r}")
        if not self.kill_every > 0:
            raise ValueError(f"kill_every: expected a positive number of seconds, got {self.kill_every!r}")


@dataclasses.dataclass
class _Segment:
    """One driver process of the soak: what it printed that the soak counts."""

    started: float
    first_step_at: Optional[float] = None
    last_step: int = 0
    digest: Optional[str] = None
    injected: Dict[str, int] = dataclasses.field(default_factory=lambda: {"server": 0, "worker": 0})
    recovered: Dict[str, List[float]] = dataclasses.field(default_factory=lambda: {"server": [], "worker": []})
    returncode: Optional[int] = None
    hung: bool = False
    worker_kills_made: List[int] = dataclasses.field(default_factory=list)  # the steps they were made before
    reattached_at: Optional[int] = None  # the step a driver restarted on Ray reattached at (None: it did not)
    refused: Optional[str] = None  # why it did not (its log line), when it found a run to reattach to
    tail: Deque[str] = dataclasses.field(default_factory=lambda: collections.deque(maxlen=20))


class Soak:
    """Runs a :class:`SoakPlan` in ``workdir`` (a fresh temporary directory when None) and returns its result
    (:meth:`run`): ``{"kills": {"server", "worker", "driver"}, "digest_equal", "lost_samples", "hung",
    "leaked_processes", "recovery_s": {role: [median, max]}}`` plus what it was measured on."""

    def __init__(self, plan: SoakPlan, workdir: Optional[str] = None, log: Callable[[str], None] = print) -> None:
        self.plan = plan
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="xdl-ec-soak-"))
        self.workdir.mkdir(parents=True, exist_ok=True)  # a --workdir given may not exist yet
        self.log = log
        self.marker = uuid.uuid4().hex
        self._rng = np.random.default_rng(plan.seed)
        self.run_dir = self.workdir / "run"  # the Ray run's --run-dir

    # ---- the runs ---------------------------------------------------------------------------------------
    def _command(
        self,
        steps: int,
        save_dir: Path,
        kills: Sequence[int],
        resume: bool,
        faults: bool,
        backend: Optional[str] = None,
    ) -> List[str]:
        """The driver's command (on ``backend``, default the plan's); its report goes to ``save_dir``'s sibling
        ``<name>.json``."""
        plan = self.plan
        backend = backend or plan.backend
        k, r = plan.code
        command = [sys.executable, "-P", "-m", "xdl_ec", "train", "--synthetic", "--deterministic"]
        command += ["--seed", str(plan.seed), "--steps", str(steps), "--batch-size", str(plan.batch_size)]
        command += ["--servers", str(plan.servers), "--backend", backend, "--ft", "ec", "--code", f"{k},{r}"]
        command += ["--save-dir", str(save_dir), "--backstop-every", plan.backstop_every]
        command += ["--report", str(save_dir.with_suffix(".json"))]
        if backend == "ray" and faults:  # the roles outlive a killed driver: the restart reattaches
            command += ["--run-dir", str(self.run_dir)]
        if faults:
            command += ["--mtbf", f"{3 * plan.kill_every:g}"]
            command += [arg for step in kills for arg in ("--fail-worker-at", f"{step}:0")]
        if resume:
            command += ["--resume", str(save_dir)]
        return command

    def _segment(self, command: List[str], kill_after: Optional[float], marker: Optional[str] = None) -> _Segment:
        """Runs one driver process; SIGKILLs it ``kill_after`` seconds after its first step (None: never).
        ``marker``: its processes' marker (default the soak's, whose survivors count as leaked)."""
        env = dict(os.environ, **{MARKER: marker or self.marker, "TF_CPP_MIN_LOG_LEVEL": "2"})
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        segment = _Segment(started=time.monotonic())
        lines: "queue.Queue[Optional[str]]" = queue.Queue()

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line)
            lines.put(None)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        last_output = time.monotonic()
        while True:
            deadline = None
            if kill_after is not None and segment.first_step_at is not None:
                deadline = segment.first_step_at + kill_after
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                if process.poll() is not None:  # ended; its children (Ray's) may still hold the pipe open
                    time.sleep(0.5)
                    while not lines.empty():
                        rest = lines.get_nowait()
                        if rest is not None:
                            self._read_line(rest.rstrip("\n"), segment)
                    segment.returncode = process.returncode
                    return segment
                now = time.monotonic()
                killed = deadline is not None and now >= deadline
                segment.hung = not killed and now - last_output > self.plan.hang_after
                if killed or segment.hung:
                    process.send_signal(signal.SIGKILL)  # the driver alone, as a crash would
                    segment.returncode = process.wait()
                    return segment
                continue
            if line is None:
                segment.returncode = process.wait()
                return segment
            last_output = time.monotonic()
            self._read_line(line.rstrip("\n"), segment)

    @staticmethod
    def _read_line(line: str, segment: _Segment) -> None:
        segment.tail.append(line)
        step = _STEP.match(line)
        if step:
            segment.last_step = int(step.group(1))
            if segment.first_step_at is None:
                segment.first_step_at = time.monotonic()
        injected = _INJECTED.search(line)
        if injected:
            segment.injected[injected.group(1)] += 1
            if injected.group(1) == "worker":
                segment.worker_kills_made.append(int(injected.group(2)))
        recovered = _RECOVERED.search(line)
        if recovered:
            segment.recovered[recovered.group(1)].append(float(recovered.group(2)))
        digest = _DIGEST.match(line)
        if digest:
            segment.digest = digest.group(1)
        reattached = _REATTACHED.search(line)
        if reattached:
            segment.reattached_at = int(reattached.group(1))
        refused = _REFUSED.search(line)
        if refused:
            segment.refused = refused.group(1)

    def _steps_for(self, minutes: float) -> Tuple[int, float]:
        """(steps, steps per second): what the failure-free run trains in about ``minutes``, from a short
        calibration run's steady rate (its report's): timed from its first step line to its exit, 40 steps also
        counted the digest, the report and Ray's shutdown, and an "8-minute" soak's twin trained for 51 s."""
        calibration_dir = self.workdir / "calibration"
        calibration = self._segment(
            self._command(CALIBRATION_STEPS, calibration_dir, (), resume=False, faults=False), kill_after=None
        )
        if calibration.returncode != 0 or calibration.first_step_at is None:
            raise RuntimeError(
                f"the calibration run failed (exit {calibration.returncode}, hung: {calibration.hung}); its last "
                "lines:\n" + "\n".join(calibration.tail)
            )
        report = json.loads(calibration_dir.with_suffix(".json").read_text())
        samples_per_second = float(report.get("steady_samples_per_sec") or report["samples_per_sec"])
        steps_per_second = samples_per_second / self.plan.batch_size
        return max(CALIBRATION_STEPS, int(steps_per_second * minutes * 60)), steps_per_second

    def run(self) -> Dict[str, object]:
        plan = self.plan
        steps, steps_per_second = self._steps_for(plan.minutes)
        self.log(
            f"soak: {steps} steps of batch {plan.batch_size} on {plan.backend}, a kill every ~{plan.kill_every:g} s"
        )
        # the failure-free twin trains beside the soak, in one process (the same model_digest as on Ray with one
        # worker, at the least cost): after it, a 60-minute soak took over two hours
        started = time.monotonic()
        twin_command = self._command(steps, self.workdir / "twin", (), resume=False, faults=False, backend="local")
        twins: List[Tuple[_Segment, float]] = []
        twin_thread = threading.Thread(
            target=lambda: twins.append(
                (self._segment(twin_command, None, marker=f"{self.marker}-twin"), time.monotonic() - started)
            ),
            name="soak-twin",
            daemon=True,
        )
        twin_thread.start()
        # worker kills at seeded steps, a third of the rate (the driver's and the servers' are the other two)
        gaps = self._rng.exponential(3 * plan.kill_every * steps_per_second, size=4 * steps)
        worker_kills = sorted({int(s) for s in np.cumsum(gaps) if 2 <= s < steps})
        save_dir = self.workdir / "soak"
        segments: List[_Segment] = []
        driver_recovery: List[float] = []
        killed_at: Optional[float] = None
        dead_step = 0  # the step the last killed driver had completed
        retrained = 0  # steps trained again by restarts that resumed from the backstop
        on_ray = plan.backend == "ray"
        while True:
            done = self._resumed_step(save_dir) if segments else 0
            # as an orchestrator's script: on Ray the same command (its run dir reattaches, or resumes from the
            # backstop); in one process --resume once a save was committed, else start over
            resume = done > 0 and not on_ray
            # a kill is an event in time, made once: not again when a restart trains its step again (a restart that
            # resumed from the backstop would otherwise meet it each time, and a driver killed during the worker's
            # restart would loop there); nor one of a step the saves passed (made by a run before them)
            made = {s for seg in segments for s in seg.worker_kills_made}
            kills = [s for s in worker_kills if s > done and s not in made]
            kill_after = float(self._rng.exponential(3 * plan.kill_every))
            segment = self._segment(self._command(steps, save_dir, kills, resume, faults=True), kill_after)
            segments.append(segment)
            if killed_at is not None and segment.first_step_at is not None:
                driver_recovery.append(segment.first_step_at - killed_at)
            if len(segments) > 1 and segment.reattached_at is None and segment.first_step_at is not None:
                retrained += max(dead_step - done, 0)
            if segment.returncode != -9:
                break
            killed_at = time.monotonic()  # by the soak: at its time, or hung
            dead_step = self._dead_step(segment)
            why = f"no output for {plan.hang_after:g} s: hung" if segment.hung else "driver killed"
            again = "the same command" if on_ray else "--resume"
            self.log(f"soak: {why} after step {dead_step}; restarting it with {again}")
        soak_seconds = time.monotonic() - started
        twin_thread.join()
        if not twins:
            raise RuntimeError("the failure-free twin's run did not report (its thread failed; see above)")
        twin, twin_seconds = twins[0]
        if twin.returncode != 0:
            self.log(f"soak: the twin ended with exit {twin.returncode}:\n" + "\n".join(twin.tail))
        final = segments[-1]
        if final.returncode != 0:
            self.log(f"soak: the run ended with exit {final.returncode}:\n" + "\n".join(final.tail))
        leaked = self._leaked()
        recovery = {
            "server": [s for seg in segments for s in seg.recovered["server"]],
            "worker": [s for seg in segments for s in seg.recovered["worker"]],
            "driver": driver_recovery,
        }
        return {
            "kills": {
                "server": sum(s.injected["server"] for s in segments),
                "worker": sum(s.injected["worker"] for s in segments),
                "driver": sum(1 for s in segments if s.returncode == -9 and not s.hung),
            },
            "digest_equal": final.returncode == 0 and final.digest is not None and final.digest == twin.digest,
            "lost_samples": self._lost_samples(save_dir, final),
            "hung": sum(1 for s in segments if s.hung),
            "leaked_processes": leaked,
            "recovery_s": {role: _median_max(values) for role, values in recovery.items()},
            "reattached": sum(1 for s in segments if s.reattached_at is not None),
            "steps_retrained": retrained,
            "not_reattached": [s.refused or "no run to reattach to" for s in segments[1:] if s.reattached_at is None],
            "steps": steps,
            "twin_seconds": round(twin_seconds, 1),
            "twin_backend": "local",
            "soak_seconds": round(soak_seconds, 1),
            "exit": final.returncode,
            "backend": plan.backend,
            "seed": plan.seed,
        }

    @staticmethod
    def _lost_samples(save_dir: Path, final: _Segment) -> Optional[int]:
        """Samples the finished run reports lost to its in-run recoveries (None when it did not finish). A driver's
        restart loses none it does not show: its model would then differ from the twin's (``digest_equal``)."""
        report = save_dir.with_suffix(".json")
        if final.returncode != 0 or not report.exists():
            return None
        return int(json.loads(report.read_text()).get("lost_samples", 0))

    def _dead_step(self, segment: _Segment) -> int:
        """The step a killed driver had completed: its heartbeat's on Ray (written at every boundary), else the
        last step line it printed."""
        if self.plan.backend == "ray":
            from xdl_ec.ps.run_heartbeat import last_heartbeat

            beat = last_heartbeat(self.run_dir)
            if beat is not None:
                return int(beat.get("step", 0))
        return segment.last_step

    @staticmethod
    def _resumed_step(save_dir: Path) -> int:
        from xdl_ec.keep.saved_run import SavedRun

        try:
            return SavedRun.open(save_dir).step
        except (FileNotFoundError, ValueError):
            return 0  # killed before its first save: it starts over

    def _leaked(self) -> int:
        """Processes still carrying this soak's marker ``leak_grace`` seconds after its last run ended (then
        killed)."""
        deadline = time.monotonic() + self.plan.leak_grace
        while True:
            alive = _marked_processes(self.marker)
            if not alive or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(alive)


def _marked_processes(marker: str) -> List[int]:
    """Pids of this machine's processes whose environment holds ``MARKER=marker``."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue  # gone, or not ours to read
    return found


def _median_max(values: List[float]) -> List[Optional[float]]:
    if not values:
        return [None, None]
    return [round(statistics.median(values), 3), round(max(values), 3)]


def write_result(result: Dict[str, object], path: str) -> None:
    Path(path).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
