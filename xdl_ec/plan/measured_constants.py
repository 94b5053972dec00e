"""MeasuredConstants: the figures the planner computes with, every one measured by ``xdl-ec bench --sweep-mtbf``
and written to ``plan-constants.json`` in the bench's --out directory.

The planner reads the file ``xdl-ec plan --constants PATH`` names, else the copy shipped beside this module
(``measured_constants.json``, from a sweep on the project's build machine; its command is in the file). The
shipped copy lives in the package so that ``xdl-ec plan`` works on an install with no bench run, and is plain JSON
in the bench's own format so that re-measuring on the user's machine is one bench run and one flag, no edit."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Dict, Mapping, Union

from xdl_ec.plan.overhead_model import StrategyCost

SHIPPED = Path(__file__).with_name("measured_constants.json")
STRATEGIES = ("ec", "ckpt", "cpr")


@dataclasses.dataclass(frozen=True)
class RowMemory:
    """What a row costs beyond its record, measured on a filled table. The key index is a power-of-two table that
    doubles when full: it holds at most ``index_rows_per_byte`` rows per byte, so ``rows`` need the next power
    of two above ``rows / index_rows_per_byte`` bytes (:meth:`index_bytes`). ``rss_per_held_byte``: resident
    bytes per byte the shard says it holds (allocator slack); ``tier_slot_bytes``: the disk tier's words per slot
    in RAM (where its frame is, its key while on disk)."""

    index_rows_per_byte: float
    rss_per_held_byte: float
    tier_slot_bytes: int

    def index_bytes(self, rows: int) -> int:
        """Bytes of the key index of a shard of ``rows`` rows."""
        if rows <= 0:
            return 0
        return 1 << max(0, math.ceil(math.log2(rows / self.index_rows_per_byte)))


@dataclasses.dataclass(frozen=True)
class MeasuredConstants:
    """The strategies' costs (``ec``, ``ckpt``, ``cpr``), the measured job they belong to (its samples/s and table
    bytes per server, by which the planner scales them), ec's mean rebuild seconds, row memory, and where the
    figures came from (``provenance``: command, date, load average, machine)."""

    costs: Dict[str, StrategyCost]
    labels: Dict[str, str]
    samples_per_sec: float
    bytes_per_server: float
    rebuild_seconds: float
    row_memory: RowMemory
    provenance: Dict[str, Any]

    def to_json(self) -> Dict[str, Any]:
        return {
            "costs": {k: v.to_json() for k, v in self.costs.items()},
            "labels": self.labels,
            "samples_per_sec": self.samples_per_sec,
            "bytes_per_server": self.bytes_per_server,
            "rebuild_seconds": self.rebuild_seconds,
            "row_memory": dataclasses.asdict(self.row_memory),
            "provenance": self.provenance,
        }

    def write(self, path: Union[str, Path]) -> Path:
        Path(path).write_text(json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return Path(path)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "MeasuredConstants":
        missing = [s for s in STRATEGIES if s not in data.get("costs", {})]
        if missing:
            raise ValueError(
                f"constants: no measured cost for {', '.join(missing)}; run the sweep with a row of each strategy "
                "(xdl-ec bench --sweep-mtbf ...)"
            )
        return cls(
            costs={k: StrategyCost.from_json(v) for k, v in data["costs"].items()},
            labels=dict(data["labels"]),
            samples_per_sec=float(data["samples_per_sec"]),
            bytes_per_server=float(data["bytes_per_server"]),
            rebuild_seconds=float(data["rebuild_seconds"]),
            row_memory=RowMemory(**data["row_memory"]),
            provenance=dict(data.get("provenance", {})),
        )

    @classmethod
    def load(cls, path: Union[str, Path, None] = None) -> "MeasuredConstants":
        """The constants at ``path`` (None: the shipped copy); ValueError naming the file when it is unreadable."""
        where = Path(path) if path is not None else SHIPPED
        try:
            data = json.loads(where.read_text(encoding="utf-8"))
            return cls.from_json(data)
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(
                f"constants: cannot read {where} ({type(err).__name__}: {err}); give the plan-constants.json an "
                "'xdl-ec bench --sweep-mtbf' run wrote"
            ) from None
