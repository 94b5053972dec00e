"""DenseState: a dense model's whole state, as the driver sends it to a worker that applies its own dense updates."""

from __future__ import annotations

import dataclasses
from typing import List

import numpy as np


@dataclasses.dataclass(frozen=True)
class DenseState:
    """A dense model's whole state (weights in ``model.trainable_variables`` order, optimizer variables): what the
    driver sends a worker that applies its own dense updates when the driver's copy is the one to go on from (a
    restarted worker, a rollback, a resumed run)."""

    weights: List[np.ndarray]
    optimizer: List[np.ndarray]
