"""StepAgreement: a reattaching driver and the run's worker agree on the last completed step (docs/design/
reattach.md): the worker's count since the run record's boundary, on top of the driver's count at that boundary,
is where training is; the worker's dense state is the run's."""

from __future__ import annotations

from typing import Any, Dict

from xdl_ec.ps.dense_sync import DriverDense
from xdl_ec.ps.fault_tolerance import Unrecoverable
from xdl_ec.ps.run_keeper import RunRecord
from xdl_ec.ps.running_cluster import RunningCluster
from xdl_ec.ps.training_state import TrainingState

AGREE_TIMEOUT = 300.0  # a step in flight when the driver died ends first (it may be a slow one)


class ReattachRefused(Unrecoverable):
    """The run's roles cannot be continued exactly (a worker's count or dense state that does not add up): the run
    stops, its head ends, and the same command run again resumes from the backstop."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"cannot reattach to the run: {why}; run the same command again: it resumes from the newest save in "
            "--save-dir (the backstop), or starts over without one"
        )


class StepAgreement:
    """Sets ``state`` and ``dense`` of a driver reattaching to the roles of ``cluster`` from ``record``."""

    def __init__(self, cluster: RunningCluster, state: TrainingState, dense: DriverDense) -> None:
        self.cluster, self.state, self.dense = cluster, state, dense
        self.dispatched = 0  # the last step the dead driver sent the worker (the agreed one, or the one after)

    def agree(self, record: RunRecord) -> int:
        """The step training is at: every count of the state set from the worker's progress since ``record.base``
        (its step in flight, if any, completed first: the call waits for it), the dense model loaded from the
        worker's. Raises :class:`ReattachRefused` when they do not add up."""
        cluster, state, base = self.cluster, self.state, record.base
        progress: Dict[str, Any] = cluster.result(cluster.worker(0).progress(), AGREE_TIMEOUT)
        if int(progress["since"]) != int(base["position"]):
            raise ReattachRefused(
                f"the worker counts from batch {progress['since']}, the run record from {base['position']}"
            )
        trained = int(progress["position"]) - int(progress["since"])
        position = int(progress["position"])
        # the dense updates the worker applied: one per answered step, and one for a step whose push met a lost
        # server (a driver that died while recovering it): that step is not agreed as done, its retry answers it
        applied = trained
        unanswered = progress.get("unanswered")
        if unanswered is not None:
            trained = len(progress["losses"])
            position = int(progress["since"]) + trained
            applied = trained + 1
            at = int(base["step"]) + trained
            if int(unanswered) != at + 1:
                raise ReattachRefused(f"the worker holds step {unanswered} for its retry, the run is at step {at}")
        step = int(base["step"]) + trained
        self.dispatched = step + (0 if unanswered is None else 1)
        state.step = step
        state.step_times.resume(step)
        state.samples = int(base["samples"]) + int(progress["samples"])
        state.restored_samples = int(base["restored_samples"])
        state.worker_batches = [position]
        state.worker_samples = [int(base["worker_samples"]) + int(progress["samples"])]
        state.losses = [float(x) for x in base["losses"]] + [float(x) for x in progress["losses"]]
        state.has_next = [bool(progress["has_next"])]
        last = progress["last"]
        if last is not None:
            state.push_seqs[0] = last.push_seqs
            state.pending_updates[0] = last.pending_updates
        elif base.get("push_seqs") is not None:
            state.push_seqs[0] = list(base["push_seqs"])
        weights, optimizer, iterations = cluster.result(cluster.worker(0).dense_state(), AGREE_TIMEOUT)
        if int(iterations) != int(base["step"]) + applied:
            raise ReattachRefused(
                f"the worker's dense model applied {iterations} steps, the run is at step {step}"
                + ("" if unanswered is None else f" with step {unanswered} trained and not answered yet")
            )
        self.dense.model.load_state(weights, optimizer)
        self.dense.log.clear()
        self.dense.ahead = applied - trained  # the unanswered step's update is in the state loaded
        self.dense.worker_current = True
        if not any(role == "server" for role, _ in cluster.scheduler.dead):  # else the recovery replays them
            cluster.answers([cluster.worker(0).flush(True)])  # the in-flight step's pushes applied
        return step

    def base(self) -> Dict[str, Any]:
        """The driver's count now, at a boundary, with the worker counting its progress from here."""
        cluster, state = self.cluster, self.state
        position = cluster.result(cluster.worker(0).mark_progress())
        return {
            "position": int(position),
            "step": state.step,
            "samples": state.samples,
            "restored_samples": state.restored_samples,
            "worker_samples": int(state.worker_samples[0]),
            "losses": list(state.losses),
            "push_seqs": state.push_seqs[0],
        }
