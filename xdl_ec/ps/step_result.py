"""StepResult: a worker's answer to one training step, what the driver's loop folds into the run."""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

import numpy as np


@dataclasses.dataclass
class StepResult:
    """A worker's answer to one step: loss, samples, dense gradients (``model.trainable_variables`` order), the
    last push seq sent to each server (what its push log covers), and whether it has another batch."""

    worker: int
    loss: float
    samples: int
    dense_grads: List[np.ndarray]
    push_seqs: Optional[List[int]] = None
    has_next: bool = True
    pending_updates: int = 0  # gradients held in this worker's caches, not yet pushed (lost if it dies)
    # progressive validation: the batch's labels and the probabilities the step gave before its update, one [B]
    # array each per head (``heads`` order; None: a model of one output)
    labels: Optional[List[np.ndarray]] = None
    probabilities: Optional[List[np.ndarray]] = None
    heads: Optional[Tuple[str, ...]] = None
    # the model's extra scalar outputs at this step (an accuracy, an auxiliary loss), by name
    outputs: Optional[Dict[str, float]] = None
