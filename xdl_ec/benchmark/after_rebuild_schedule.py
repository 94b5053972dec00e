"""AfterRebuildSchedule: the bench's kills, none of which lands inside a rebuild.

``ec`` rebuilds a lost server at a limited share of wall time (``--rebuild-share``), so a rebuild spans many steps
(more on Ray, or for a large shard); a kill drawn for the bench could land while it runs, and with r = 1 two servers
missing at once cannot be decoded. The bench compares strategies through the same failures, so a kill due while the
strategy still rebuilds an earlier failure first lets that rebuild complete (the rest of it runs at that step
boundary, inside the measured rebuild window), then lands at its step like for every other strategy.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from xdl_ec.ft.failure_schedule import FailureSchedule, Kill


class AfterRebuildSchedule(FailureSchedule):
    """Server kills ``(step, server, seconds)`` for a run under ``strategy``; ``waited`` lists the steps whose kill
    first completed a rebuild of the strategy (``strategy.rebuilding`` / ``strategy.finish_rebuild()``, duck-typed:
    strategies without them recover inside the step loop and never wait)."""

    def __init__(self, kills: Sequence[Tuple[int, int, float]], seed: int, strategy: Any) -> None:
        super().__init__([Kill(int(step), "server", int(server)) for step, server, _ in kills], seed=seed)
        self.strategy = strategy
        self.waited: List[int] = []

    def due(self, step: int, elapsed: float, num_servers: Optional[int] = None) -> List[Kill]:
        out = super().due(step, elapsed, num_servers)
        if out and getattr(self.strategy, "rebuilding", False):
            self.strategy.finish_rebuild()
            self.waited.append(step)
        return out
