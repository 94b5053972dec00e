"""StrategyCost: one fault-tolerance strategy's overhead as a line in the failure rate, fitted to measured runs.

A run of ``T`` failure-free seconds that meets ``n`` failures takes ``T * (1 + steady) + n * per_failure``
seconds, so its overhead over the failure-free run is ``steady + per_failure * n / T``: the steady cost (parity
deltas) plus the seconds each failure costs (detection, rebuild, restore) times the failure rate. A strategy that
checkpoints at Young's interval ``sqrt(2 * save * MTBF)`` (ckpt's ``auto``) adds ``save / interval`` for the saves
and half an interval of replay per failure: ``sqrt(2 * save * rate)`` together, so its line has that term too, from
the save seconds its runs measured. The bench's MTBF sweep measures (rate, overhead) points;
:meth:`StrategyCost.fit` is the least squares line through them once the Young term is taken off, and the planner
and the fleet extrapolation evaluate it at other rates."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Mapping, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class StrategyCost:
    """``steady``: overhead with no failures (a fraction of the failure-free time); ``seconds_per_failure``: time one
    failure adds; ``save_seconds``: one checkpoint save, for a strategy at Young's interval (0: none);
    ``points``: how many runs the fit saw."""

    steady: float
    seconds_per_failure: float
    save_seconds: float = 0.0
    points: int = 0

    @classmethod
    def fit(cls, points: Sequence[Tuple[float, float]], save_seconds: float = 0.0) -> "StrategyCost":
        """Least squares over (failures per second of failure-free training, overhead) points, less the Young
        term of ``save_seconds``; with one distinct rate the line is flat through their mean (no cost per failure
        can be told apart from the steady cost). Neither cost can be negative: a negative slope (noise larger
        than the failures' cost) is clamped to 0, and a negative steady cost gives the line through the origin."""
        if not points:
            raise ValueError("strategy cost: no measured points to fit (run the sweep with at least one MTBF)")
        points = [(x, y - math.sqrt(2.0 * save_seconds * x)) for x, y in points]
        n = len(points)
        mean_x = sum(x for x, _ in points) / n
        mean_y = sum(y for _, y in points) / n
        sxx = sum((x - mean_x) ** 2 for x, _ in points)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx if sxx > 0 else 0.0
        slope = max(slope, 0.0)
        steady = mean_y - slope * mean_x
        if steady < 0:  # neither cost can be negative: the line through the origin, as least squares gives it
            sxy0 = sum(x * y for x, y in points)
            sxx0 = sum(x * x for x, _ in points)
            steady, slope = 0.0, max(0.0, sxy0 / sxx0) if sxx0 > 0 else 0.0
        return cls(steady=steady, seconds_per_failure=slope, save_seconds=save_seconds, points=n)

    def overhead(self, failures_per_hour: float) -> float:
        """The predicted overhead at ``failures_per_hour`` failures per hour of training."""
        if failures_per_hour < 0:
            raise ValueError(f"failures per hour: must be >= 0, got {failures_per_hour}")
        rate = failures_per_hour / 3600.0
        return self.steady + math.sqrt(2.0 * self.save_seconds * rate) + self.seconds_per_failure * rate

    def scaled(self, steady_factor: float, failure_factor: float) -> "StrategyCost":
        """The same strategy on a job whose steady cost is ``steady_factor`` times and whose failures and saves
        cost ``failure_factor`` times the measured job's."""
        return StrategyCost(
            self.steady * steady_factor,
            self.seconds_per_failure * failure_factor,
            self.save_seconds * failure_factor,
            self.points,
        )

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StrategyCost":
        return cls(
            float(data["steady"]),
            float(data["seconds_per_failure"]),
            float(data.get("save_seconds", 0.0)),
            int(data.get("points", 0)),
        )
