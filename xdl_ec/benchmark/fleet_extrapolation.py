"""The sweep's fleet extrapolation: each strategy's overhead at a fleet's per-server MTBF (14 h and 30 h, the range
CPR reports for production recommendation training) for 10 to 1,000 servers, from the measured steady cost and
cost per failure (:class:`~xdl_ec.plan.overhead_model.StrategyCost`). It is an extrapolation, said as such: the
failures cost what they cost on the measured job (its bytes per server, its rate), and a job of N servers fails
N / MTBF times per hour."""

from __future__ import annotations

from typing import Any, Dict, List

from xdl_ec.plan.measured_constants import MeasuredConstants

FLEET_SERVERS = (10, 30, 100, 300, 1000)
FLEET_MTBF_HOURS = (14.0, 30.0)
NOTE = (
    "extrapolation, not a measurement: the lines fitted to the sweep's runs evaluated at N / MTBF failures per hour, "
    "with each failure costing what it cost on the measured job"
)


def fleet_extrapolation(constants: MeasuredConstants) -> Dict[str, Any]:
    """``{"note", "rows": [{"servers", "mtbf_h", "failures_per_hour", <strategy>: overhead, ...}]}``."""
    rows: List[Dict[str, Any]] = []
    for mtbf_h in FLEET_MTBF_HOURS:
        for servers in FLEET_SERVERS:
            rate = servers / mtbf_h
            row: Dict[str, Any] = {"servers": servers, "mtbf_h": mtbf_h, "failures_per_hour": rate}
            row.update({ft: cost.overhead(rate) for ft, cost in sorted(constants.costs.items())})
            rows.append(row)
    return {"note": NOTE, "labels": dict(constants.labels), "rows": rows}
