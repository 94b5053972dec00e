"""TrainingState: where a parameter-server run's training is, as the driver counts it.

The driver's loop advances it, a recovery rewinds it, a resume sets it from a save, and the report reads it; the
strategies see it through :class:`~xdl_ec.ps.cluster_view.ClusterView`. Kept apart from those so that each reads
and writes the same counts.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence

from xdl_ec.model.progressive import ProgressiveWindow
from xdl_ec.model.step_outputs import StepOutputs
from xdl_ec.ps.step_times import StepTimes
from xdl_ec.ps.worker import StepResult
from xdl_ec.sparse.table_config import Table


class TrainingState:
    """The step, the samples and each of ``workers`` workers' reader position and push seqs, the losses and the
    progressive validation of a run over ``tables``."""

    def __init__(self, tables: Sequence[Table], workers: int) -> None:
        self.step = 0
        self.total_steps: Optional[int] = None  # where the current fit stops (None: when the input ends)
        self.samples = 0  # samples trained so far (re-trained ones after a rollback included)
        self.restored_samples = 0  # samples a resumed run's save had trained
        self.worker_batches = [0] * workers  # reader position: batches each worker has trained
        self.worker_samples = [0] * workers
        self.has_next = [False] * workers
        self.pending_updates = [0] * workers  # per worker, as of its last answered step
        # each worker's last push seq sent to each server, as of its last answered step: what a worker's push log
        # covered when it died (--ft ec checks that a rebuilt server lost none of a dead worker's pushes)
        self.push_seqs: List[Optional[List[int]]] = [None] * workers
        self.unlogged_push_seqs: List[Optional[List[int]]] = [None] * workers  # of restarted predecessors
        self.losses: List[float] = []
        self.outputs = StepOutputs()  # the model's extra outputs, per worker answer
        # progressive validation over the steps this process drove (re-trained ones after a rollback included)
        self.progressive = ProgressiveWindow()
        self.step_times = StepTimes(tables)  # the wall time of Evict(ttl_seconds) passes

    @property
    def finished(self) -> bool:
        """True once every worker's input is exhausted."""
        return not any(self.has_next)

    def check_finite(self, result: StepResult) -> None:
        """Stops the run on a worker's non-finite loss (the step it trained is the next one)."""
        if not math.isfinite(result.loss):
            raise FloatingPointError(
                f"training diverged at step {self.step + 1} (worker {result.worker}): loss is "
                f"{result.loss}; lower the learning rates"
            )

    def note_result(self, i: int, result: StepResult) -> None:
        """Worker ``i`` answered a step with ``result``: its reader, its push seqs and the samples move on."""
        self.worker_batches[i] += 1
        self.worker_samples[i] += result.samples
        self.push_seqs[i] = result.push_seqs
        self.pending_updates[i] = result.pending_updates
        self.has_next[i] = result.has_next
        self.samples += result.samples
        if result.labels is not None and result.probabilities is not None:
            self.progressive.add(result.labels, result.probabilities, result.heads)
        if result.outputs:
            self.outputs.add(result.outputs)

    def samples_since(self, position: Any) -> int:
        """Samples trained after the reader position ``position`` ({"worker_samples": [...]}, or that list: what a
        rollback re-trains)."""
        then = position["worker_samples"] if isinstance(position, dict) else position
        return int(sum(max(now - was, 0) for now, was in zip(self.worker_samples, then)))

    def rewind(self, step: int, position: Any, drop_losses: bool) -> None:
        """Training rolled back to ``step`` with the readers at ``position`` ({"worker_batches": [...]} and
        optionally "worker_samples"); ``drop_losses``: forget the losses of the steps after it (sync mode, where
        loss i is step i's)."""
        if drop_losses:
            del self.losses[step:]
        self.step = step
        self.worker_batches = [int(n) for n in position["worker_batches"]]
        # the readers' sample counts rewind with them: a second rollback to the same position counts what was
        # trained since it once (re-trained samples stay counted in samples)
        if "worker_samples" in position:
            self.worker_samples = [int(n) for n in position["worker_samples"]]
