"""How often to checkpoint: Young's formula for ``ckpt`` and the lost-sample target for CPR.

Young (1974): with a save costing ``C`` seconds and failures arriving at mean interval ``M`` (the JOB's mean time
between failures: any server failing), the interval minimising expected lost time is ``T = sqrt(2 * C * M)``
(valid for C << M). ``--ckpt-interval auto`` uses it with ``C`` measured on the job's own saves.

CPR (Maeng et al., MLSys 2021) instead targets the portion of lost samples, PLS = lost samples / trained samples.
Derivation from that definition, for ``N`` embedding servers holding 1/N of the rows each, training at ``R``
samples/s for ``D`` seconds, checkpoint interval ``T``, job-level MTBF ``M``:

* a failure strikes at a uniformly random moment of an interval, so the failed shard loses on average the
  updates of the last ``T / 2`` seconds;
* those updates are 1/N of what the samples of those seconds did, so a failure loses ``R * T / (2 N)`` samples'
  worth of updates;
* ``D / M`` failures happen among ``R * D`` samples, so ``PLS = (D / M) * R * T / (2 N) / (R * D) = T / (2 N M)``.

Hence ``T = 2 * N * M * PLS``: :func:`cpr_interval`. (With per-server MTBF ``m`` the job MTBF is ``m / N`` and
``T = 2 * m * PLS``.) A full-recovery checkpoint (``ckpt``) would lose ``T / (2 M)`` instead: N times more.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Optional

from xdl_ec.settings import checks

__all__ = ["young_interval", "cpr_interval", "expected_pls", "IntervalPolicy", "parse_interval"]


def _positive(name: str, value: Any, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


def young_interval(save_seconds: float, mtbf_seconds: float) -> float:
    """Young's optimal checkpoint interval ``sqrt(2 * save_seconds * mtbf_seconds)`` in seconds."""
    c = _positive("save_seconds", save_seconds, allow_zero=True)
    m = _positive("mtbf_seconds", mtbf_seconds)
    return math.sqrt(2.0 * c * m)


def cpr_interval(target_pls: float, mtbf_seconds: float, num_servers: int) -> float:
    """CPR's interval (seconds) for a target portion of lost samples: ``2 * num_servers * mtbf * target_pls``."""
    pls = _positive("target_pls", target_pls)
    if pls >= 1:
        raise ValueError(f"target_pls must be < 1 (a portion of the samples, e.g. 0.02), got {target_pls!r}")
    num_servers = checks.integer("num_servers", num_servers, 1)
    return 2.0 * int(num_servers) * _positive("mtbf_seconds", mtbf_seconds) * pls


def expected_pls(interval_seconds: float, mtbf_seconds: float, num_servers: int = 1) -> float:
    """The PLS a checkpoint interval gives under partial recovery: ``T / (2 N M)`` (N = 1: full recovery)."""
    t = _positive("interval_seconds", interval_seconds)
    num_servers = checks.integer("num_servers", num_servers, 1)
    return t / (2.0 * int(num_servers) * _positive("mtbf_seconds", mtbf_seconds))


@dataclass
class IntervalPolicy:
    """When the next checkpoint is due: every ``steps`` steps, every ``seconds`` seconds, or Young's ``auto``.

    ``auto`` needs ``mtbf_seconds``; it checkpoints at the first :meth:`due` (which measures the save cost and
    gives a rollback point before any failure), then every ``young_interval(mean save cost, mtbf)`` seconds.
    Call :meth:`saved` after every save with its cost.
    """

    steps: Optional[int] = None
    seconds: Optional[float] = None
    auto: bool = False
    mtbf_seconds: Optional[float] = None

    def __post_init__(self) -> None:
        chosen = sum([self.steps is not None, self.seconds is not None, bool(self.auto)])
        if chosen != 1:
            raise ValueError("IntervalPolicy: give exactly one of steps, seconds or auto=True")
        if self.steps is not None and (
            isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1
        ):
            raise ValueError(f"steps must be an int >= 1, got {self.steps!r}")
        if self.seconds is not None:
            self.seconds = _positive("seconds", self.seconds)
        if self.auto:
            if self.mtbf_seconds is None:
                raise ValueError("auto checkpoint interval needs mtbf_seconds (Young's formula); give --mtbf")
            self.mtbf_seconds = _positive("mtbf_seconds", self.mtbf_seconds)
        self._last_step: Optional[int] = None
        self._last_time: Optional[float] = None
        self._cost_sum = 0.0
        self._saves = 0

    @property
    def save_cost(self) -> Optional[float]:
        """Mean measured seconds per save (None before the first)."""
        return self._cost_sum / self._saves if self._saves else None

    @property
    def interval_seconds(self) -> Optional[float]:
        """The current interval in seconds (None for a step interval or before auto has measured a save)."""
        if self.seconds is not None:
            return self.seconds
        if self.auto and self._saves and self.mtbf_seconds is not None:  # auto: __post_init__ checked mtbf
            return young_interval(self._cost_sum / self._saves, self.mtbf_seconds)
        return None

    def due(self, step: int, now: float) -> bool:
        """Whether to checkpoint after ``step`` at time ``now`` (seconds, any monotonic clock)."""
        if self.steps is not None:
            return step - (self._last_step if self._last_step is not None else 0) >= self.steps
        if self._last_time is None:
            if self.auto:
                return True  # the first save measures the cost Young's formula needs
            self._last_time = now  # a time interval counts from the first check
            return False
        interval = self.interval_seconds
        return interval is not None and now - self._last_time >= interval

    def restart(self, step: int, now: float) -> None:
        """After a rollback to a checkpoint of ``step``: the next interval counts from there (costs are kept)."""
        self._last_step, self._last_time = step, now

    def saved(self, step: int, now: float, cost_seconds: float) -> None:
        """Records a save finished at ``now`` that took ``cost_seconds``."""
        self._cost_sum += _positive("cost_seconds", cost_seconds, allow_zero=True)
        self._saves += 1
        self._last_step, self._last_time = step, now


_SECONDS = re.compile(r"(\d+(?:\.\d*)?|\.\d+)s")


def parse_interval(text: str, mtbf_seconds: Optional[float] = None) -> IntervalPolicy:
    """``--ckpt-interval``: ``auto`` (Young, needs mtbf_seconds), ``<number>s`` seconds, or ``<int>`` steps."""
    if not isinstance(text, str):
        raise TypeError(f"ckpt interval must be a str, got {type(text).__name__}")
    value = text.strip().lower()
    if value == "auto":
        return IntervalPolicy(auto=True, mtbf_seconds=mtbf_seconds)
    m = _SECONDS.fullmatch(value)
    if m:
        return IntervalPolicy(seconds=float(m.group(1)))
    if value.isdigit() and int(value) > 0:
        return IntervalPolicy(steps=int(value))
    raise ValueError(f"ckpt interval {text!r} is not 'auto', '<seconds>s' (e.g. '30s') or a step count (e.g. '500')")
