"""Dense (MLP) parameters in a parameter-server run.

Mechanism (a choice between XDL, which keeps dense parameters on the servers, and ECRec, which replicates them on
workers with their optimizer state): the AUTHORITATIVE replica, weights and optimizer state, lives with the
driver (the scheduler's process) as a :class:`~xdl_ec.dense_model.DenseModel`; every worker holds a copy of the weights. A step
call carries the current weights to the worker and its answer carries the worker's dense gradients back, so the
dense traffic rides on the step's own round trip (no extra RPC) and no parameter server becomes a hot spot for
the ~10^4-10^5 dense floats that every sample touches.

- Sync mode: the driver averages the W workers' gradients in worker order (:func:`average_gradients`,
  deterministic) and applies them once: every worker then trains step t+1 on the same weights.
- Async mode: the driver applies each worker's gradients as they arrive; a worker's next step gets the weights
  of that moment (staleness of at most its own step).

Survival: the dense state is held by the driver, not by any server or worker, so losing any one of those loses
nothing dense; a restarted worker simply receives the current weights with its next step. With one worker,
:meth:`DenseModel.apply` performs exactly the single-process trainer's ``optimizer.apply`` on the same gradients,
which the model_digest test checks bit for bit.
"""

from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np


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
