"""TrainedSince: what a worker trained since its reader was last set, kept in the worker so that a driver that died
mid-step and reattaches can agree with it on the last completed step (docs/design/reattach.md)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from xdl_ec.ps.step_result import StepResult


class TrainedSince:
    """The batches a worker trained since its reader was set at ``since``: their samples, their losses, the last
    answer (what a reattaching driver agrees on, docs/design/reattach.md)."""

    def __init__(self, since: int) -> None:
        self.since = since
        self.samples = 0
        self.losses: List[float] = []
        self.last: Optional[StepResult] = None

    def add(self, result: StepResult) -> None:
        self.samples += int(result.samples)
        self.losses.append(float(result.loss))
        self.last = result

    def report(self) -> Dict[str, Any]:
        return {"since": self.since, "samples": self.samples, "losses": list(self.losses), "last": self.last}
