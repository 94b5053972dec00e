"""One server's CPR checkpointing: MFU or SSU row tracking, a partial save every interval, a full save every
``full_every`` intervals, and the partial restore of that server alone after it failed.

The schedule: the first save is full (a partial save needs a base), then ``full_every - 1`` partial saves of the
rows the selector chose, then a full save again, and so on. Each save tells the selector which rows are now
durable. When to save (the interval) comes from :func:`xdl_ec.settings.interval.cpr_interval`; the caller asks
:class:`~xdl_ec.settings.interval.IntervalPolicy` and calls :meth:`CprCheckpointer.save` when it is due.

The lost-update ledger (``ledger``: table name -> AccessCounter of the pushes applied to this server's rows) is
owned by the caller outside the server, because it must survive the server; when given, every save records the
ledger's counts of the saved rows and :meth:`CprCheckpointer.restore` reports the updates lost.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Union

from xdl_ec.ft.partial_restore import CheckpointChain, RestoreResult, restore_server
from xdl_ec.ft.row_selection import AccessCounter, MfuSelector, SsuSelector
from xdl_ec.keep.checkpoint import ShardCheckpoint, Table
from xdl_ec.settings import checks

__all__ = ["CprCheckpointer", "MODES"]

MODES = ("mfu", "ssu")


class CprCheckpointer:
    """CPR checkpointing of one server's tables into its own :class:`CheckpointChain` directory."""

    def __init__(
        self,
        root: Union[str, os.PathLike],
        mode: str = "mfu",
        fraction: float = 0.1,
        full_every: int = 10,
        seed: int = 0,
        ledger: Optional[Mapping[str, AccessCounter]] = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES} (--cpr-mode), got {mode!r}")
        full_every = checks.integer("full_every", full_every, 1)
        self.mode = mode
        self.full_every = int(full_every)
        self.selector = MfuSelector(fraction, seed) if mode == "mfu" else SsuSelector(fraction, seed)
        self.chain = CheckpointChain(root)
        self.ledger = ledger
        self._saves = 0
        self.bytes_written = 0
        self.rows_written = 0

    def record(self, table: str, keys: Any, batch: int) -> None:
        """After a push of ``keys`` to ``table`` was applied (``batch``: the global batch index)."""
        self.selector.record(table, keys, batch)

    def next_is_full(self) -> bool:
        """Whether the next :meth:`save` is a full one."""
        return self._saves % self.full_every == 0

    def save(self, step: int, tables: Mapping[str, Table]) -> ShardCheckpoint:
        """Saves now (full or partial per the schedule) and tells the selector which rows are durable."""
        counts = None if self.ledger is None else {n: self.ledger[n].get for n in tables if n in self.ledger}
        if self.next_is_full():
            saved = self.chain.save_full(step, tables, update_counts=counts)
            for name in tables:
                self.selector.mark_saved(name)
        else:
            chosen = {name: self.selector.select(name, len(table)) for name, table in tables.items()}
            saved = self.chain.save_partial(step, tables, chosen, update_counts=counts)
            for name, keys in chosen.items():
                self.selector.mark_saved(name, keys)
        self._saves += 1
        self.bytes_written += saved.nbytes()
        self.rows_written += sum(saved.rows(n) for n in saved.tables)
        return saved

    def restore(self, templates: Mapping[str, Table]) -> RestoreResult:
        """Fresh tables rebuilt from this server's saves, with the lost updates counted (see restore_server).

        The ledger is rewound to the restored rows (a later failure does not count these losses again) and the
        selector restarts: every restored row is as durable as its newest save says.
        """
        result = restore_server(self.chain, templates, self.ledger, rewind_ledger=self.ledger is not None)
        for name in templates:
            self.selector.mark_saved(name)
        return result

    def stats(self) -> Dict[str, Any]:
        """Saves so far, bytes and rows written (for the run report)."""
        return {
            "mode": self.mode,
            "saves": self._saves,
            "bytes_written": self.bytes_written,
            "rows_written": self.rows_written,
        }

    def __repr__(self) -> str:
        return f"CprCheckpointer({str(self.chain.root)!r}, mode={self.mode!r}, saves={self._saves})"
