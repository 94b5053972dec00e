"""Dense (MLP) parameters in a parameter-server run: the driver holds the authoritative replica.

The weights and their optimizer state live with the driver (a :class:`~xdl_ec.model.dense_model.DenseModel`), not
on a server or a worker, so losing any server or worker loses nothing dense. With several workers a step call
carries the weights out and its answer the worker's gradients back, on the step's own round trip (no extra call):
sync mode averages them in worker order (:func:`average_gradients`, deterministic) and applies them once, async
mode applies each worker's as they arrive. A cluster's only worker applies its own updates inside its step's TF
call, as the one-process run does, and the driver logs its gradients (:class:`DriverDense`): the driver's model plus
the log is the worker's model, bit for bit, so a lost worker's successor gets that state whole. The design, its
exactness and why the log is never skipped: docs/design/how-it-works.md ("A cluster's step") and
docs/design/ray-step.md.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.model.dense_model import DenseModel
from xdl_ec.ps.worker import DenseState

LOG_STEPS = 64  # a worker applying its own dense updates hands the driver its state at least this often,
LOG_BYTES = 256 << 20  # and once the gradients logged since take this much memory (a large dense model)


def average_gradients(per_worker: Sequence[Sequence[np.ndarray]]) -> List[np.ndarray]:
    """Mean of the workers' gradients, summed in worker order (a fixed float order); one worker's are returned
    unchanged."""
    if not per_worker:
        raise ValueError("per_worker: need the gradients of at least one worker")
    if len(per_worker) == 1:
        return [np.asarray(g) for g in per_worker[0]]
    n = len(per_worker[0])
    if any(len(g) != n for g in per_worker):
        raise ValueError(f"per_worker: every worker must send {n} gradients, got {[len(g) for g in per_worker]}")
    out = []
    for i in range(n):
        total = np.array(per_worker[0][i], dtype=np.float32, copy=True)
        for grads in per_worker[1:]:
            total += grads[i]
        out.append(total / np.float32(len(per_worker)))
    return out


def dense_nbytes(dense: Any) -> int:
    """Bytes of the arrays in what a step call or answer carries of the dense model (weights, gradients, a
    DenseState, None)."""
    if dense is None:
        return 0
    if hasattr(dense, "weights") and hasattr(dense, "optimizer"):
        return dense_nbytes(dense.weights) + dense_nbytes(dense.optimizer)
    return int(sum(np.asarray(a).nbytes for a in dense))


class DriverDense:
    """The driver's dense model (``model``, a :class:`~xdl_ec.model.dense_model.DenseModel`) and, when the only worker
    applies its own dense updates (``worker_applies``), the log of the gradients it applied since the model was last
    brought up to date. ``fetch()`` asks that worker for its state: (weights, optimizer variables, iterations), or
    None when it cannot answer."""

    def __init__(
        self,
        model: DenseModel,
        worker_applies: bool,
        fetch: Callable[[], Optional[Tuple[List[np.ndarray], List[np.ndarray], int]]],
    ) -> None:
        self.model = model
        self.worker_applies = worker_applies
        self.log: List[List[np.ndarray]] = []
        self._log_bytes = 0
        self.worker_current = True  # the worker's model is this model plus the log (both start from the seed)
        self._fetch = fetch
        self.fetches = 0  # states taken from the worker, and logs applied here instead
        self.replays = 0
        # answers whose gradients this model holds already: a reattached driver loaded the worker's state with the
        # update of a step trained and not answered yet (docs/design/reattach.md); its retry's answer adds nothing
        self.ahead = 0

    def for_step(self) -> Any:
        """What a step call carries: the weights (the driver applies the gradients), None (the worker's model is
        current) or a :class:`~xdl_ec.ps.worker.DenseState` for the worker to load first."""
        if not self.worker_applies:
            return self.model.weights()
        if self.worker_current:
            return None
        self.sync(ask_worker=False)
        self.worker_current = True  # a step that fails before loading it loses its worker (restarted: stale again)
        weights, optimizer = self.model.state()
        return DenseState(weights, optimizer)

    def answered(self, per_worker: Sequence[Sequence[np.ndarray]]) -> None:
        """A step's dense gradients, one list per worker that trained it (in worker order)."""
        if not self.worker_applies:
            self.model.apply(average_gradients(per_worker))
            return
        (grads,) = per_worker
        if self.ahead:
            self.ahead -= 1
            return
        self.log.append(list(grads))
        self._log_bytes += dense_nbytes(grads)
        if len(self.log) >= LOG_STEPS or self._log_bytes >= LOG_BYTES:
            self.sync()

    def sync(self, ask_worker: bool = True) -> None:
        """Brings the model up to the worker's: its state when it answers with the expected iteration count, else
        the log applied here (the worker is then sent this state with its next step)."""
        if not self.log:
            return
        expected = int(self.model.optimizer.iterations.numpy()) + len(self.log)
        state = self._fetch() if ask_worker else None
        if state is not None and int(state[2]) == expected:
            self.model.load_state(state[0], state[1])
            self.fetches += 1
        else:
            for grads in self.log:
                self.model.apply(grads)
            self.replays += 1
            if state is not None:  # the worker went its own way (it should not): it gets this state back
                self.worker_current = False
        self.log, self._log_bytes = [], 0

    def current(self) -> DenseModel:
        """The model, up to date, for a caller that only reads it."""
        self.sync()
        return self.model

    def take(self) -> DenseModel:
        """The model, up to date, for a caller that may change it: the worker gets it whole with its next step."""
        self.sync()
        self.worker_current = not self.worker_applies
        return self.model

    def worker_lost(self) -> None:
        """The worker died: the log is applied here, and its successor gets the state with its first step."""
        self.sync(ask_worker=False)
        self.worker_current = not self.worker_applies
