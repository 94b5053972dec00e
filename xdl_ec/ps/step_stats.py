"""StepStats: a worker's steps and where their time went, what its ``stats()`` answers the driver (summed into
the report's ``stages`` by :mod:`xdl_ec.ps.step_stages`)."""

from __future__ import annotations

from typing import Any, Dict

from xdl_ec.ps.cached_client import CachedClient
from xdl_ec.ps.step_client import StepClient

# a step's phases: the driver's dense weights set, waiting for its rows, for its next batch, the TF call, handing
# the gradients over; "in_step": the whole call
PHASES = ("set_weights", "pull_wait", "data_wait", "compute", "push", "in_step")


class StepStats:
    """Steps trained and the wall seconds they spent per phase (:data:`PHASES`)."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = {phase: 0.0 for phase in PHASES}
        self.steps = 0

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] += seconds

    def report(self, index: int, client: StepClient, input_stats: Dict[str, Any]) -> Dict[str, Any]:
        """Worker ``index``'s stats: steps, seconds per phase, ``client``'s byte counters (and cache stats), and
        its input's ``input_stats``."""
        out = {
            "index": index,
            "steps": self.steps,
            **{f"{k}_seconds": v for k, v in self.seconds.items()},
            "bytes_pulled": client.bytes_pulled,
            "bytes_requested": client.bytes_requested,
            "bytes_pushed": client.bytes_pushed,
            "input": input_stats,
        }
        if isinstance(client, CachedClient):
            out["cache"] = client.cache_stats()
        return out
