"""Dense (MLP) parameters in a parameter-server run.

Mechanism (a choice between XDL, which keeps dense parameters on the servers, and ECRec, which replicates them on
workers with their optimizer state): the AUTHORITATIVE replica, weights and optimizer state, lives with the
driver (the scheduler's process) as a :class:`~xdl_ec.model.dense_model.DenseModel`; every worker holds a copy. With
several workers a step call carries the current weights to the worker and its answer carries the worker's dense
gradients back, so the dense traffic rides on the step's own round trip (no extra RPC) and no parameter server
becomes a hot spot for the ~10^4-10^5 dense floats that every sample touches.

- Several workers, sync mode: the driver averages the W workers' gradients in worker order
  (:func:`average_gradients`, deterministic) and applies them once: every worker then trains step t+1 on the same
  weights.
- Several workers, async mode: the driver applies each worker's gradients as they arrive; a worker's next step gets
  the weights of that moment (staleness of at most its own step).

Survival (several workers): the dense state is held by the driver, not by any server or worker, so losing any one
of those loses nothing dense; a restarted worker simply receives the current weights with its next step.

One worker (sync or async: its steps come one after another either way): the worker applies its dense gradients
itself, inside its step's TF call, as the one-process run does, and the step call carries no weights; its answer
still carries the gradients, which the driver LOGS without applying them (:class:`DriverDense`). The driver's model
plus that log is exactly the worker's model, so losing the worker loses nothing dense: the driver applies the log
to its copy (the same ``optimizer.apply`` on the same gradients, bit for bit) and the restarted worker gets that
state whole (:class:`~xdl_ec.ps.worker.DenseState`) with its first step. Every ``LOG_STEPS`` steps (sooner when the
log reaches ``LOG_BYTES``), and whenever the driver's dense state is read (a save, a checkpoint, the digest, an
evaluation), the driver brings its copy up to date by asking the worker for its state (one call), checked by the
optimizer's iteration count (the driver's plus the log's length; on a mismatch, or when the worker cannot answer,
the log is applied here instead). Whoever takes the driver's model to change it (a rollback, a resume) makes the
worker get it whole with its next step.
What this saves per step: the weights sent out, the worker's ``set_weights``, the driver's ``optimizer.apply``.
Exactness: the worker's in-step ``optimizer.apply`` is the single-process trainer's (the same ModelStep), and the
driver's replay of its log is :meth:`DenseModel.apply` on the same gradients in the same order, the arithmetic the
model_digest tests check bit for bit (one worker on either backend ends at the one-process run's digest; a worker
killed twice under ``ec``, once with a log of 3 steps, ends at the failure-free digest). Why not less often than
every step: a step's sparse push reaches the servers with it, so a dense update the driver has not got when the
worker dies would leave the tables one step ahead of the dense model, with nothing to bring them back together.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

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
        model: Any,
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

    def for_step(self) -> Any:
        """What a step call carries: the weights (the driver applies the gradients), None (the worker's model is
        current) or a :class:`~xdl_ec.ps.worker.DenseState` for the worker to load first."""
        if not self.worker_applies:
            return self.model.weights()
        if self.worker_current:
            return None
        from .worker import DenseState

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

    def current(self) -> Any:
        """The model, up to date, for a caller that only reads it."""
        self.sync()
        return self.model

    def take(self) -> Any:
        """The model, up to date, for a caller that may change it: the worker gets it whole with its next step."""
        self.sync()
        self.worker_current = not self.worker_applies
        return self.model

    def worker_lost(self) -> None:
        """The worker died: the log is applied here, and its successor gets the state with its first step."""
        self.sync(ask_worker=False)
        self.worker_current = not self.worker_applies
