"""Cache: a worker's embedding cache for one table (HET's bounded-staleness cache), checked once.

``Cache(rows=N | "P%", staleness=S, policy="lfu" | "lru")``:

- ``rows``: capacity in rows, or ``"P%"``: that share of the rows the table holds on the servers, as their answers
  to every pull say (a table grows as new ids arrive; the cache keeps its lines), at least one row.
- ``staleness`` S: a worker may read its cached copy of a row while it is at most S versions (row clocks: one per
  push that changed the row) behind the server's, and holds its own gradients of a cached row until S of them
  accumulated, then writes back their sum, applied by the server as ONE optimizer step (see
  :mod:`xdl_ec.ps.cached_client`). ``staleness=0`` is exact: the run's model equals the run without a cache.
- ``policy``: which line to evict when full: least frequently used (the default: it saved more traffic than LRU
  in ``bench/bench_cache.py``, docs/results/worker-cache-2026-11-25.md) or least recently used.

``Cluster(cache=Cache(...))`` gives every table of the job that cache; ``cache={"users": Cache(...)}`` only the
named tables (the others have none).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Optional, Union

from xdl_ec.settings import checks
from xdl_ec.settings.flag import flag
from xdl_ec.settings.flag_types import non_negative_int

POLICIES = ("lru", "lfu")
_SHARE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)%")


def rows_or_share(text: str) -> Union[int, str]:
    """--cache-rows' text: digits are a row count, anything else a share ``"P%"`` (checked by :class:`Cache`)."""
    return int(text) if text.isdigit() else text


@dataclasses.dataclass(frozen=True)
class Cache:
    """A worker cache of one table: ``rows`` (int or ``"P%"``), ``staleness`` (int >= 0), ``policy``."""

    rows: Union[int, str] = dataclasses.field(
        metadata=flag(
            "--cache-rows",
            "a worker cache of every table (HET): N rows or P%% of the table's rows (needs --servers)",
            type=rows_or_share,
            metavar="N|P%",
            labels=("cache rows",),
        )
    )
    staleness: int = dataclasses.field(
        default=0,
        metadata=flag(
            "--staleness",
            "cache: read a cached row while at most S versions behind, write back after S local updates (default "
            "{default}: exact, the same model as without a cache)",
            type=non_negative_int,
            metavar="S",
            labels=("staleness",),
        ),
    )
    policy: str = dataclasses.field(
        default="lfu",
        metadata=flag(
            "--cache-policy",
            "cache eviction (default {default})",
            choices=tuple(sorted(POLICIES)),
            labels=("cache policy",),
        ),
    )

    def __post_init__(self) -> None:
        if isinstance(self.rows, str):
            share = self.share
            if share is None or not 0 < share <= 100:
                raise ValueError(
                    f"cache rows: {self.rows!r} is neither a row count nor a share of the table in "
                    f"(0%, 100%] such as '10%'"
                )
        else:
            checks.positive_int("cache rows", self.rows)
        checks.non_negative_int("staleness", self.staleness)
        checks.one_of("cache policy", self.policy, POLICIES)

    @property
    def share(self) -> Optional[float]:
        """The share of the table in percent (``rows="P%"``), or None for a row count."""
        if not isinstance(self.rows, str):
            return None
        m = _SHARE.fullmatch(self.rows.strip())
        return float(m.group(1)) if m else None

    def capacity(self, table_rows: int) -> int:
        """Rows this cache may hold when the table holds ``table_rows`` rows."""
        share = self.share
        if share is None:
            return int(self.rows)
        return max(1, int(table_rows * share / 100.0))

    def check_memory(self, table: str, dim: int, workers_here: int = 1) -> None:
        """A row-count cache whose lines (row and pending gradient, float32) would not fit in this machine's memory
        is refused before anything starts."""
        if self.share is not None:
            return
        need = int(self.rows) * (2 * dim * 4 + 64) * workers_here
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return
        if need > total:
            raise ValueError(
                f"cache of table {table!r}: {self.rows} rows of dim {dim} need about {need / 2**30:.1f} "
                f"GiB per worker ({workers_here} here), more than this machine's {total / 2**30:.1f} GiB; "
                f"give fewer rows or a share such as '10%'"
            )

    def describe(self) -> dict:
        return {"rows": self.rows, "staleness": self.staleness, "policy": self.policy}


def caches_for(cache: Any, tables: Any) -> dict:
    """{table name: Cache} for ``tables`` (Table configs) from a Cluster's ``cache`` (None, one Cache, or a
    mapping of table names to Caches)."""
    if cache is None:
        return {}
    if isinstance(cache, Cache):
        return {t.name: cache for t in tables}
    if isinstance(cache, dict):
        names = {t.name for t in tables}
        unknown = sorted(set(cache) - names)
        if unknown:
            raise ValueError(f"cache: names tables {unknown} that the job does not have (it has {sorted(names)})")
        for name, value in cache.items():
            checks.instance(f"cache[{name!r}]", value, Cache)
        return dict(cache)
    raise TypeError(f"cache: must be an xdl_ec.Cache or a dict of table name -> Cache, got {type(cache).__name__}")
