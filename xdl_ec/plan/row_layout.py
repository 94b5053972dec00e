"""RowLayout: the bytes of one table row's record, as the core lays it out (12 bytes of key and words, the values,
the optimizer's state), read from a shard the core builds for that width and optimizer."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any


@dataclasses.dataclass(frozen=True)
class RowLayout:
    """``header_bytes`` (key and per-row words), ``value_bytes`` (``dim`` floats), ``state_bytes`` (the optimizer's
    state floats)."""

    header_bytes: int
    value_bytes: int
    state_bytes: int

    @property
    def record_bytes(self) -> int:
        return self.header_bytes + self.value_bytes + self.state_bytes

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def of(dim: int, optimizer: str) -> "RowLayout":
        """The layout of a ``dim``-wide row under ``optimizer`` (a name of :mod:`xdl_ec.optim`); ValueError naming
        a bad dim or an unknown optimizer."""
        from xdl_ec.sparse.table import EmbeddingTable

        table = EmbeddingTable("layout", dim, optimizer=optimizer, initializer="zeros")
        try:
            record, state = table.record_bytes, table.state_floats
        finally:
            table.close()
        return RowLayout(record - 4 * (dim + state), 4 * dim, 4 * state)

    @staticmethod
    def of_table(table: Any) -> "RowLayout":
        """The layout of a :class:`~xdl_ec.sparse.table_config.Table` (its optimizer a name or an object)."""
        optimizer = table.optimizer if isinstance(table.optimizer, str) else type(table.optimizer).__name__.lower()
        return RowLayout.of(table.dim, optimizer)
