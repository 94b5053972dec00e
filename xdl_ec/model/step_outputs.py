"""StepOutputs: the extra scalar outputs a model returns beside its loss (an accuracy, an auxiliary loss), over a
run's last steps, for the report's ``outputs`` and the progress line."""

from __future__ import annotations

import collections
from typing import Deque, Dict, Mapping, Optional

LAST_STEPS = 50  # a report's final_loss and outputs are means over this many last steps


class StepOutputs:
    """The last ``last`` steps' outputs {name: value}; :meth:`means` averages each name over them."""

    def __init__(self, last: int = LAST_STEPS) -> None:
        self._steps: Deque[Mapping[str, float]] = collections.deque(maxlen=last)

    def add(self, outputs: Mapping[str, float]) -> None:
        if outputs:
            self._steps.append(dict(outputs))

    @property
    def latest(self) -> Optional[Mapping[str, float]]:
        """The last step's outputs (None before any)."""
        return self._steps[-1] if self._steps else None

    def means(self) -> Dict[str, float]:
        """{name: mean over the steps that gave it}; empty when no step gave outputs."""
        sums: Dict[str, float] = {}
        counts: Dict[str, int] = {}
        for outputs in self._steps:
            for name, value in outputs.items():
                sums[name] = sums.get(name, 0.0) + float(value)
                counts[name] = counts.get(name, 0) + 1
        return {name: sums[name] / counts[name] for name in sums}

    def report(self) -> Dict[str, Dict[str, float]]:
        """``{"outputs": means}`` for a run's report, or nothing when the model returns no extra outputs."""
        means = self.means()
        return {"outputs": means} if means else {}
