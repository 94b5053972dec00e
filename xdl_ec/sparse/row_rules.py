"""Admit and Evict: the rules that bound a table for endless training (which ids get a row, which rows go).

The decisions are made in the C++ shard (``cpp/include/xdl_ec/row_policy.h``) on per-row words kept in the slot
records, so parity, a rebuilt server and every save carry them. In short:

- ``Admit(min_count=N)``: an id gets its row on its N-th occurrence (one push of the id counts one; a cache
  write-back standing for c gradients counts c). Until then it reads zeros and its gradients are dropped; its exact
  count lives on the server in a record like a row's (parity-covered).
- ``Evict(ttl_steps= | ttl_seconds=, min_l2=, max_rows=, policy=)``: every ``every_steps`` steps (a deterministic
  boundary: after the push of a step that is a multiple of it) a pass frees rows not updated for more than
  ``ttl_steps`` steps (or ``ttl_seconds`` seconds of training wall time, see below), rows
  whose value has L2 norm below ``min_l2``, then, with ``max_rows``, the lowest ranked (``lfu``: fewest uses first,
  ``lru``: oldest update first) until at most ``max_rows - max_rows // 8`` remain. Between passes an id that would
  take the table past ``max_rows`` gets no row (it reads zeros), so ``max_rows`` is never exceeded. ``max_rows``
  bounds the table summed over its servers: each server keeps at most ``max_rows // servers``.

``ttl_seconds``: the servers never read a clock (a rebuilt server and a replayed push must decide as the original
did). The driver records when each step started (:class:`xdl_ec.ps.step_times.StepTimes`); the push of a pass step
carries the cutoff it works out from that record (rows whose last update came from a step that started more than
``ttl_seconds`` before the pass's step go), so replays and parity carry the decision with the push. Wall time makes
the choice of rows differ between two runs, ``--deterministic`` ones included; a run killed and recovered still
ends as its failure-free run with the same step times would.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Sequence

from xdl_ec import _core
from xdl_ec.settings import checks

__all__ = ["Admit", "Evict", "merged_reports", "row_policy_config", "rules_of"]

COUNTERS = ("exact", "sketch")
POLICIES = ("lfu", "lru")
DEFAULT_EVERY_STEPS = 100
SKETCH_MAX_COUNT = 65535  # the sketch's cells are 16-bit


@dataclasses.dataclass(frozen=True)
class Admit:
    """Feature admission: an id gets a row on its ``min_count``-th occurrence (1: at once, as without rules).

    ``counter``: "exact" (a per-id count on the server, in a record per id not yet admitted) or "sketch" (a
    count-min sketch per shard with conservative update, ``depth`` rows of ``width`` 16-bit cells: an id not yet
    admitted costs no record). The sketch never under-counts, so no id is admitted later than with "exact"; an id
    may be admitted early: with N occurrences counted since the cells were emptied, an estimate is more than
    e * N / ``width`` above the true count with probability at most exp(-``depth``), so size ``width`` to a few
    times the distinct ids a server sees between halvings. Its memory: ``width * depth * 2`` bytes per shard.
    ``decay_every_steps``: the push of every step that is a multiple of it halves every cell (aging, so an endless
    stream does not eventually admit everything; 0: never). A save holds the cells; a resume at another server count
    starts each server from the sum of the saved cells (an over-estimate). Sketch settings need ``counter="sketch"``.
    """

    min_count: int = 2
    counter: str = "exact"
    width: int = 1 << 14
    depth: int = 4
    decay_every_steps: int = 1000

    def __post_init__(self) -> None:
        checks.integer("Admit: min_count", self.min_count, 1)
        if self.counter not in COUNTERS:
            raise ValueError(f"Admit: counter must be one of {COUNTERS}, got {self.counter!r}")
        checks.integer("Admit: width (cells in each row of the sketch)", self.width, 16, 1 << 22)
        checks.integer("Admit: depth (rows of the sketch)", self.depth, 1, 8)
        checks.integer(
            "Admit: decay_every_steps (steps between halvings of the sketch; 0: never)", self.decay_every_steps, 0
        )
        if self.counter == "sketch":
            if not 2 <= self.min_count <= SKETCH_MAX_COUNT:
                raise ValueError(
                    f"Admit: min_count must be in [2, {SKETCH_MAX_COUNT}] with counter='sketch' (its cells are "
                    f"16-bit; 1 admits at once and needs no counter), got {self.min_count}"
                )
        elif (self.width, self.depth, self.decay_every_steps) != (1 << 14, 4, 1000):
            raise ValueError(
                "Admit: width, depth and decay_every_steps set the sketch counter; give counter='sketch' with them"
            )

    def describe(self) -> dict:
        out: Dict[str, Any] = {"min_count": self.min_count, "counter": self.counter}
        if self.counter == "sketch":  # only then: the descriptions of exact-counter saves stay as they were
            out.update(width=self.width, depth=self.depth, decay_every_steps=self.decay_every_steps)
        return out


@dataclasses.dataclass(frozen=True)
class Evict:
    """Row eviction (at least one of ``ttl_steps`` or ``ttl_seconds`` (not both), ``min_l2``, ``max_rows``), run
    every ``every_steps`` steps."""

    ttl_steps: Optional[int] = None
    min_l2: Optional[float] = None
    max_rows: Optional[int] = None
    policy: str = "lfu"
    every_steps: int = DEFAULT_EVERY_STEPS
    ttl_seconds: Optional[float] = None

    def __post_init__(self) -> None:
        if self.ttl_steps is not None:
            checks.integer("Evict: ttl_steps (steps a row lives without an update)", self.ttl_steps, 1)
        if self.ttl_seconds is not None:
            if self.ttl_steps is not None:
                raise ValueError(
                    f"Evict: give ttl_steps or ttl_seconds, not both (got ttl_steps={self.ttl_steps}, "
                    f"ttl_seconds={self.ttl_seconds})"
                )
            seconds = checks.number(
                "Evict: ttl_seconds (training seconds a row lives without an update)",
                self.ttl_seconds,
                0.0,
                low_open=True,
            )
            object.__setattr__(self, "ttl_seconds", seconds)
        if self.min_l2 is not None:
            if isinstance(self.min_l2, bool) or not isinstance(self.min_l2, (int, float)):
                raise TypeError(f"Evict: min_l2 must be a number, got {type(self.min_l2).__name__}")
            if not (math.isfinite(self.min_l2) and self.min_l2 > 0):
                raise ValueError(f"Evict: min_l2 must be finite and > 0, got {self.min_l2}")
            object.__setattr__(self, "min_l2", float(self.min_l2))
        if self.max_rows is not None:
            checks.integer("Evict: max_rows (live rows of the table, summed over its servers)", self.max_rows, 1)
        if self.policy not in POLICIES:
            raise ValueError(f"Evict: policy must be one of {POLICIES}, got {self.policy!r}")
        checks.integer("Evict: every_steps (steps between eviction passes)", self.every_steps, 1)
        if self.ttl_steps is None and self.ttl_seconds is None and self.min_l2 is None and self.max_rows is None:
            raise ValueError(
                "Evict: give at least one of ttl_steps, ttl_seconds, min_l2 or max_rows (an Evict with none would "
                "never free a row)"
            )

    def describe(self) -> dict:
        out: Dict[str, Any] = {
            "ttl_steps": self.ttl_steps,
            "min_l2": self.min_l2,
            "max_rows": self.max_rows,
            "policy": self.policy,
            "every_steps": self.every_steps,
        }
        if self.ttl_seconds is not None:  # only when set: the descriptions of saves made before it stay equal
            out["ttl_seconds"] = self.ttl_seconds
        return out


def rules_of(
    admit_min_count: Optional[int] = None,
    admit_counter: str = "exact",
    evict_ttl_steps: Optional[int] = None,
    evict_ttl_seconds: Optional[float] = None,
    max_rows: Optional[int] = None,
    evict_every_steps: int = DEFAULT_EVERY_STEPS,
) -> Dict[str, Any]:
    """``{"admit": Admit or None, "evict": Evict or None}`` of the command line's table flags (``--admit-min-count``,
    ``--admit-counter``, ``--evict-ttl-steps``, ``--evict-ttl-seconds``, ``--max-rows``, ``--evict-every-steps``):
    None where a rule is not asked for; a sketch counter halves at the eviction cadence."""
    admit = None
    if admit_min_count is not None and admit_counter == "sketch":
        admit = Admit(min_count=admit_min_count, counter="sketch", decay_every_steps=evict_every_steps)
    elif admit_min_count is not None:
        admit = Admit(min_count=admit_min_count, counter=admit_counter)
    evict = None
    if evict_ttl_steps is not None or evict_ttl_seconds is not None or max_rows is not None:
        evict = Evict(
            ttl_steps=evict_ttl_steps, ttl_seconds=evict_ttl_seconds, max_rows=max_rows, every_steps=evict_every_steps
        )
    return {"admit": admit, "evict": evict}


def row_policy_config(
    name: str, admit: Optional[Admit], evict: Optional[Evict], block_slots: int, servers: int = 1
) -> Any:
    """The core's ``RowPolicyConfig`` for one of ``servers`` shards of table ``name`` (each keeps its even share
    of ``max_rows``). Raises ValueError when a share is below one block of ``block_slots`` rows."""
    config = _core.RowPolicyConfig()
    if admit is not None:
        config.admit_min_count = int(admit.min_count)
        if admit.counter == "sketch":
            config.admit_counter = "sketch"
            config.sketch_width = int(admit.width)
            config.sketch_depth = int(admit.depth)
            config.sketch_decay_every_steps = int(admit.decay_every_steps)
    if evict is not None:
        config.ttl_steps = evict.ttl_steps
        config.min_l2 = evict.min_l2
        config.policy = evict.policy
        config.evict_every_steps = int(evict.every_steps)
        if evict.max_rows is not None:
            share = evict.max_rows // servers
            if share < block_slots:
                raise ValueError(
                    f"table {name!r}: Evict max_rows = {evict.max_rows} over {servers} server(s) leaves "
                    f"{share} rows per server, below one block (block_slots = {block_slots}); raise "
                    f"max_rows to at least {block_slots * servers} or lower block_slots"
                )
            config.max_rows = share
    return config


def merged_reports(parts: Sequence[Dict[str, Dict[str, Any]]]) -> Dict[str, Dict[str, Any]]:
    """The report's ``"tables"``: {table: {"rows", "admitted", "not_admitted_lookups", "evicted": {"ttl", "l2",
    "cap"}, "bytes"}} summed over ``parts`` (one {table: EmbeddingTable.bounded_report()} per server)."""
    out: Dict[str, Dict[str, Any]] = {}
    for part in parts:
        for name, report in part.items():
            into = out.setdefault(
                name,
                {
                    "rows": 0,
                    "admitted": 0,
                    "not_admitted_lookups": 0,
                    "evicted": {"ttl": 0, "l2": 0, "cap": 0},
                    "bytes": 0,
                },
            )
            for key in ("rows", "admitted", "not_admitted_lookups", "bytes"):
                into[key] += int(report[key])
            for reason in ("ttl", "l2", "cap"):
                into["evicted"][reason] += int(report["evicted"][reason])
    return out
