"""StepHook: what the driver asks of a hook it runs at step boundaries (the job layer's RunSaver, Backstop, export
schedule, TensorBoard log and stop request; a resize's Resizer).

``after_step(run)`` comes at a step boundary with no push in flight, after the strategy's, with the run being
trained (:class:`~xdl_ec.ps.training.PSTrainer`); in async mode the driver holds new steps while ``due(step)`` is
True, so that boundary comes.
"""

from __future__ import annotations

from typing import Any, Protocol


class StepHook(Protocol):
    def due(self, step: int) -> bool: ...

    def after_step(self, run: Any) -> None: ...
