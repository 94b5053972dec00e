"""JobPlan: servers, stripe code, memory per server and fault-tolerance strategy for a job, from its tables' rows,
widths and optimizers, the servers' RAM (and disk), their MTBF and the job's rate, priced with the bench's measured
constants (:class:`~xdl_ec.plan.measured_constants.MeasuredConstants`).

How it decides (each rule says why):

- **Servers**: for each strategy the fewest servers whose RAM holds their share (ec's with its parity); only when
  no count up to ``max_servers`` fits in RAM, the fewest whose RAM holds the disk tier's fixed part and whose disk
  holds the spill file (the tier runs at a fraction of in-memory speed: docs/results/tier-2026-12-07.md).
- **Code**: r = 2 when a second server is likely to fail during a rebuild (``servers - 1`` servers, each failing
  once per MTBF, over the rebuild's seconds: above :data:`SECOND_LOSS_RISK`), else r = 1; k = the servers left,
  at most :data:`K_MAX` (parity costs r / k of the rows; a decode reads k fragments).
- **Overhead**: each strategy's fitted line (:class:`~xdl_ec.plan.overhead_model.StrategyCost`) at servers / MTBF
  failures per hour, its steady cost scaled by the job's samples/s over the measured job's (the per-sample work
  is the same), the bytes-moving part of its cost per failure by the job's bytes per server over the measured
  job's (:func:`strategy_cost`).
- **Recommendation**: the exact strategy (ec or ckpt: the model is the failure-free one) of least predicted
  overhead; cpr is priced beside them but loses updates at each failure (the sweep reports its AUC delta)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

from xdl_ec.plan.measured_constants import STRATEGIES, MeasuredConstants
from xdl_ec.plan.memory_model import ServerMemory, fits, in_memory, rows_per_server, with_disk_tier
from xdl_ec.plan.overhead_model import StrategyCost
from xdl_ec.plan.row_layout import RowLayout

K_MAX = 8
SECOND_LOSS_RISK = 1e-3
EXACT = ("ec", "ckpt")


@dataclasses.dataclass(frozen=True)
class PlanRequest:
    """The job and its servers: ``rows`` and ``layouts`` per table, RAM and disk per server in bytes, per-server
    MTBF in seconds, samples/s (None: the measured job's), and the most servers to consider."""

    rows: Mapping[str, int]
    layouts: Mapping[str, RowLayout]
    memory_per_server: int
    mtbf_s: float
    disk_per_server: Optional[int] = None
    samples_per_sec: Optional[float] = None
    max_servers: int = 1000

    def __post_init__(self) -> None:
        if not self.rows:
            raise ValueError("rows: give the rows of at least one table (--rows N, or --rows TABLE=N with --script)")
        for name, n in self.rows.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"rows: table {name!r} needs a positive whole number of rows, got {n!r}")
            if name not in self.layouts:
                raise ValueError(f"rows: no table named {name!r} (tables: {', '.join(self.layouts)})")
        if self.memory_per_server < 1:
            raise ValueError(f"memory per server: must be positive, got {self.memory_per_server}")
        if self.disk_per_server is not None and self.disk_per_server < 1:
            raise ValueError(f"disk per server: must be positive, got {self.disk_per_server}")
        if not (math.isfinite(self.mtbf_s) and self.mtbf_s > 0):
            raise ValueError(f"mtbf: must be a positive duration, got {self.mtbf_s}")
        if self.samples_per_sec is not None and not (math.isfinite(self.samples_per_sec) and self.samples_per_sec > 0):
            raise ValueError(f"samples per sec: must be a positive number, got {self.samples_per_sec}")
        if self.max_servers < 1:
            raise ValueError(f"max servers: must be positive, got {self.max_servers}")


@dataclasses.dataclass(frozen=True)
class StrategyPlan:
    """One strategy's sizing and price: ``servers``, ``code`` (k, r) for ec, its ``memory``, failures per hour at
    that size, and the predicted ``overhead``."""

    strategy: str
    servers: int
    code: Optional[Tuple[int, int]]
    memory: ServerMemory
    failures_per_hour: float
    overhead: float

    def to_json(self) -> Dict[str, Any]:
        return {
            "servers": self.servers,
            "code": None if self.code is None else {"k": self.code[0], "r": self.code[1]},
            "memory_per_server_bytes": self.memory.to_json(),
            "disk_per_server_bytes": self.memory.disk_bytes,
            "disk_tier": self.memory.tiered,
            "failures_per_hour": self.failures_per_hour,
            "overhead": self.overhead,
        }


def code_for(servers: int, mtbf_s: float, rebuild_s: float) -> Optional[Tuple[int, int]]:
    """(k, r) for ``servers`` (see the module doc); None below 2 servers (a stripe needs a data and a parity
    server)."""
    if servers < 2:
        return None
    risk = (servers - 1) * rebuild_s / mtbf_s
    r = 2 if risk > SECOND_LOSS_RISK and servers >= 3 else 1
    return min(servers - r, K_MAX), r


def strategy_cost(
    constants: MeasuredConstants, strategy: str, bytes_factor: float, samples_per_sec: Optional[float]
) -> StrategyCost:
    """``strategy``'s measured cost line moved to a job with ``bytes_factor`` times the measured job's bytes per
    server and ``samples_per_sec`` (None: the measured job's rate): the steady cost scales with the rate; for ec
    only the rebuild's part of a failure's cost scales with the bytes (detection and the recovery's pause do not),
    for ckpt and cpr the whole of it and the saves (a restore and a save move a server's bytes)."""
    measured = constants.costs[strategy]
    steady = 1.0 if samples_per_sec is None else samples_per_sec / constants.samples_per_sec
    if strategy != "ec":
        return measured.scaled(steady, bytes_factor)
    rebuild = min(constants.rebuild_seconds, measured.seconds_per_failure)
    per_failure = measured.seconds_per_failure - rebuild + rebuild * bytes_factor
    return StrategyCost(measured.steady * steady, per_failure, 0.0, measured.points)


class JobPlan:
    """The plan of a :class:`PlanRequest` under ``constants``: :meth:`strategy` sizes and prices one strategy,
    :meth:`to_json` is ``xdl-ec plan --json``'s object. ValueError naming what to change when nothing fits."""

    def __init__(self, request: PlanRequest, constants: MeasuredConstants) -> None:
        self.request, self.constants = request, constants
        self.plans: Dict[str, StrategyPlan] = {s: self.strategy(s) for s in STRATEGIES}
        self.recommended = min(EXACT, key=lambda s: self.plans[s].overhead)

    def _bytes_factor(self, memory: ServerMemory) -> float:
        records = memory.disk_bytes if memory.tiered else memory.rows + memory.optimizer_state
        return records / self.constants.bytes_per_server if self.constants.bytes_per_server > 0 else 1.0

    def _sized(
        self, strategy: str, servers: int, tiered: bool
    ) -> Tuple[Optional[Tuple[int, int]], Optional[ServerMemory]]:
        req = self.request
        rows = rows_per_server(req.rows, servers)
        code: Optional[Tuple[int, int]] = None
        if strategy == "ec":
            bare = in_memory(rows, req.layouts, self.constants.row_memory, 0.0)
            rebuild = self.constants.rebuild_seconds * self._bytes_factor(bare)
            code = code_for(servers, req.mtbf_s, rebuild)
            if code is None:
                return None, None
        share = code[1] / code[0] if code else 0.0
        if tiered:
            return code, with_disk_tier(rows, req.layouts, self.constants.row_memory, share, req.memory_per_server)
        return code, in_memory(rows, req.layouts, self.constants.row_memory, share)

    def _fewest(self, strategy: str, tiered: bool) -> Optional[Tuple[int, Optional[Tuple[int, int]], ServerMemory]]:
        req = self.request
        for servers in range(1, req.max_servers + 1):
            code, memory = self._sized(strategy, servers, tiered)
            if memory is not None and fits(memory, req.memory_per_server, req.disk_per_server)[0]:
                return servers, code, memory
        return None

    def strategy(self, strategy: str) -> StrategyPlan:
        """Sizes and prices ``strategy`` (ec, ckpt or cpr)."""
        req = self.request
        found = self._fewest(strategy, tiered=False)
        if found is None and req.disk_per_server is not None:
            found = self._fewest(strategy, tiered=True)
        if found is None:
            largest = self._sized(strategy, req.max_servers, False)[1]
            need = "" if largest is None else f" (at {req.max_servers:,} servers each needs {largest.total:,} B of RAM)"
            raise ValueError(
                f"{strategy}: the tables do not fit on {req.max_servers:,} servers of {req.memory_per_server:,} B"
                f"{need}: raise --memory-per-server, give --disk-per-server for the disk tier, or raise --max-servers"
            )
        servers, code, memory = found
        rate = servers * 3600.0 / req.mtbf_s
        cost = strategy_cost(self.constants, strategy, self._bytes_factor(memory), req.samples_per_sec)
        return StrategyPlan(strategy, servers, code, memory, rate, cost.overhead(rate))

    def why(self) -> str:
        """The recommendation in words."""
        rec, other = self.plans[self.recommended], self.plans[[s for s in EXACT if s != self.recommended][0]]
        cpr = self.plans["cpr"]
        text = (
            f"{rec.strategy} has the least predicted overhead of the exact strategies: {100 * rec.overhead:+.2f}% "
            f"against {other.strategy}'s {100 * other.overhead:+.2f}% at {rec.failures_per_hour:.3g} failures per "
            f"hour ({rec.servers} servers, one failure per server every {self.request.mtbf_s / 3600:.3g} h)"
        )
        if rec.code is not None:
            text += f"; code k={rec.code[0]} r={rec.code[1]}"
        if rec.memory.tiered:
            text += "; the rows do not fit in RAM on this many servers: the disk tier holds them (slower per step)"
        if cpr.overhead < rec.overhead:
            text += (
                f". cpr would cost {100 * cpr.overhead:+.2f}% but loses the updates since its last checkpoint at "
                "each failure (not the failure-free model)"
            )
        return text

    def to_json(self) -> Dict[str, Any]:
        rec = self.plans[self.recommended]
        ec = self.plans["ec"]
        return {
            "servers": rec.servers,
            "code": None if ec.code is None else {"k": ec.code[0], "r": ec.code[1]},
            "memory_per_server_bytes": rec.memory.to_json(),
            "disk_per_server_bytes": rec.memory.disk_bytes,
            "overhead": {s: self.plans[s].overhead for s in STRATEGIES},
            "recommendation": {"strategy": self.recommended, "why": self.why()},
            "strategies": {s: p.to_json() for s, p in self.plans.items()},
            "constants": self.constants.provenance.get("command", ""),
        }

    def text(self) -> List[str]:
        """The plan as lines for a terminal."""
        rec = self.plans[self.recommended]
        m = rec.memory.to_json()
        lines = [
            f"recommendation: {self.recommended} on {rec.servers} servers"
            + (f", code k={rec.code[0]} r={rec.code[1]}" if rec.code else "")
        ]
        lines.append("memory per server: " + ", ".join(f"{k} {v / 2**20:,.1f} MiB" for k, v in m.items()))
        if rec.memory.tiered:
            lines.append(f"disk per server (spill file): {rec.memory.disk_bytes / 2**30:,.2f} GiB")
        for s, p in self.plans.items():
            code = f" k={p.code[0]} r={p.code[1]}" if p.code else ""
            lines.append(
                f"  {s}: {p.servers} servers{code}, {p.memory.total / 2**20:,.1f} MiB each, "
                f"{p.failures_per_hour:.3g} failures/h -> overhead {100 * p.overhead:+.2f}%"
            )
        lines.append(f"why: {self.why()}")
        lines.append(f"constants measured by: {self.constants.provenance.get('command', '(unknown)')}")
        return lines
