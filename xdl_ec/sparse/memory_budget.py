"""MemoryBudget: how much RAM one process's tables may hold, and the spill dir the rest of their rows live in.

The core's disk tier (``cpp/include/xdl_ec/spill_tier.h``) sits below each shard's record store: a budgeted shard
keeps its hot rows in RAM and the rest in a file under ``spill_dir``, with the same bytes, so every result (and
``model_digest``) is the unbudgeted run's. The budget is per process (a server, or the one process of
``job.fit``), shared evenly over its tables' shards; each share covers the rows with their optimizer state, the
key index and the slot lists. A server of ``--ft ec`` also holds parity, r/k of the data it covers, in the same
tier (``cpp/include/xdl_ec/parity_store.h``): its budget is then split k : r between its shards and the parity
stores it holds (one per table), the split of the bytes each holds. The spill files are unlinked as soon as they
are made, so they go with their process however it ends."""

from __future__ import annotations

import dataclasses
import os
import re
import resource
import sys
from typing import Any, Dict, Optional, Sequence, Tuple

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes of a size like ``"4G"``, ``"512M"``, ``"1.5GiB"`` or ``"1000000"`` (K, M, G, T: powers of 1024);
    ValueError naming the text otherwise."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"memory budget: expected a size like 4G, 512M or 1000000 (bytes), got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def check_spill_dir(spill_dir: str) -> str:
    """``spill_dir`` as an absolute path once it is an existing, writable directory; ValueError naming it and what
    to do otherwise (before training: the core checks again when it makes each file, and names the dir)."""
    path = os.path.abspath(os.fspath(spill_dir))
    if not os.path.exists(path):
        raise ValueError(f"spill dir {path!r} does not exist: create it, or pass another spill dir")
    if not os.path.isdir(path):
        raise ValueError(f"spill dir {path!r} is not a directory: pass a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"spill dir {path!r} is not writable: pass a writable spill dir")
    return path


@dataclasses.dataclass(frozen=True)
class MemoryBudget:
    """``budget_bytes`` of RAM for one process's tables (an int, or a size text like ``"4G"``), the rest of their
    rows in files under ``spill_dir``. Checked when made: a positive size and an existing writable directory.
    ``parity_code``: the (k, r) of the erasure code whose parity the process holds beside its shards (None: none),
    set by :meth:`holding_parity`."""

    budget_bytes: int
    spill_dir: str
    parity_code: Optional[Tuple[int, int]] = None

    def __post_init__(self) -> None:
        size = parse_size(self.budget_bytes) if isinstance(self.budget_bytes, str) else self.budget_bytes
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"memory budget: expected a positive number of bytes, got {self.budget_bytes!r}")
        object.__setattr__(self, "budget_bytes", size)
        object.__setattr__(self, "spill_dir", check_spill_dir(self.spill_dir))

    @staticmethod
    def of(memory_budget: Any, spill_dir: Optional[str]) -> Optional["MemoryBudget"]:
        """The budget of a ``memory_budget`` / ``spill_dir`` pair of keywords (both or neither; None: no budget)."""
        if memory_budget is None and spill_dir is None:
            return None
        if memory_budget is None or spill_dir is None:
            raise ValueError(
                "memory_budget / spill_dir: give both (the RAM the tables may hold, e.g. '4G', and the directory the "
                "rest of their rows live in) or neither"
            )
        return MemoryBudget(memory_budget, spill_dir)

    def holding_parity(self, code: Optional[Tuple[int, int]]) -> "MemoryBudget":
        """This budget for a server that also holds the parity of a (k, r) ``code`` (None: no parity, this one)."""
        if code is None:
            return self
        k, r = int(code[0]), int(code[1])
        if k < 1 or r < 1:
            raise ValueError(f"memory budget: parity code must be (k, r) with k, r >= 1, got {code!r}")
        return dataclasses.replace(self, parity_code=(k, r))

    def share(self, tables: int) -> int:
        """One shard's budget when this process holds ``tables`` shards: an even share of the shards' part (all of
        it, or k / (k + r) when the process holds parity too)."""
        if self.parity_code is None:
            return self.budget_bytes // max(1, tables)
        k, r = self.parity_code
        return self.budget_bytes * k // ((k + r) * max(1, tables))

    def parity_share(self, tables: int) -> int:
        """One table's parity store's budget when this process holds the parity of ``tables`` tables: an even
        share of r / (k + r) of the budget (0 when it holds no parity)."""
        if self.parity_code is None:
            return 0
        k, r = self.parity_code
        return self.budget_bytes * r // ((k + r) * max(1, tables))

    def shares(self, tables: Sequence[Any]) -> Dict[str, int]:
        """{table name: its shard's budget} over ``tables`` (anything with a ``name``), evenly."""
        return {t.name: self.share(len(tables)) for t in tables}

    def report(self) -> Dict[str, int]:
        """The run report's ``memory``: {"budget_bytes", "peak_rss_bytes"} of this process."""
        return {"budget_bytes": self.budget_bytes, "peak_rss_bytes": peak_rss_bytes()}


# A budgeted shard's counts (EmbeddingTable.tier_counts), as the core's memory stats name them.
TIER_COUNTS = (
    "rows_in_memory",
    "rows_on_disk",
    "disk_bytes",
    "disk_read_bytes",
    "disk_write_bytes",
    "memory_hits",
    "memory_misses",
)


def tier_reports(parts: Sequence[Dict[str, Dict[str, int]]]) -> Dict[str, Dict[str, Any]]:
    """The report's tier entries: {table: {"rows_in_memory", "rows_on_disk", "disk_bytes", "disk_read_bytes",
    "disk_write_bytes", "memory_hit_rate"}} summed over ``parts`` (one {table: tier counts} per server);
    memory_hit_rate: the share of the rows the fetch steps found in RAM (1.0 before any)."""
    summed: Dict[str, Dict[str, int]] = {}
    for part in parts:
        for name, counts in part.items():
            into = summed.setdefault(name, dict.fromkeys(TIER_COUNTS, 0))
            for key in TIER_COUNTS:
                into[key] += int(counts[key])
    out: Dict[str, Dict[str, Any]] = {}
    for name, c in summed.items():
        fetched = c["memory_hits"] + c["memory_misses"]
        entry: Dict[str, Any] = {k: v for k, v in c.items() if k not in ("memory_hits", "memory_misses")}
        entry["memory_hit_rate"] = c["memory_hits"] / fetched if fetched else 1.0
        out[name] = entry
    return out


def peak_rss_bytes() -> int:
    """This process's peak resident set size (getrusage's ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
