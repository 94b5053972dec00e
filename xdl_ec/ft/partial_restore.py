"""CPR recovery: reload ONE failed server's shard from its own last full + partial checkpoints.

The other servers keep their state and training goes on; the rebuilt shard holds each row as of that row's last
save, so the updates applied after it are lost. :func:`restore_server` counts them.

Layout of one server's :class:`CheckpointChain` directory::

    <root>/full-000004-step-000000003000/      ShardCheckpoint (every row), 4th save of this server
    <root>/partial-000005-step-000000003500/   ShardCheckpoint (the MFU/SSU-selected rows)
    <root>/partial-000006-step-000000004000/

A restore loads the newest full save, then every newer partial save in order (a later save of a row overwrites
the earlier one), so each row ends as of its newest save. Older chains are deleted once a new full save is
durable (``keep_full`` chains are kept).

Lost updates: the caller keeps a ledger, one :class:`~xdl_ec.ft.row_selection.AccessCounter` per table counting
the pushes applied to this server's rows (outside the server: it dies with its shard), and passes the ledger's
``get`` as ``update_counts`` when saving, so each saved row records its count at save time. Then
``lost updates = sum over rows of (ledger count - count at the row's newest save)``, a row never saved counting
from 0.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from xdl_ec.ft.row_selection import AccessCounter
from xdl_ec.keep.checkpoint import ShardCheckpoint, Table, UpdateCounts, fresh_table
from xdl_ec.settings import checks

__all__ = ["CheckpointChain", "RestoreResult", "restore_server"]

_NAME = re.compile(r"(full|partial)-(\d{6,})-step-(\d{12,})")


class CheckpointChain:
    """One server's CPR checkpoints in ``root``: full saves and the partial saves after them."""

    def __init__(self, root: Union[str, os.PathLike], keep_full: int = 1) -> None:
        keep_full = checks.integer("keep_full", keep_full, 1)
        self.root = Path(root)
        self.keep_full = keep_full

    def _entries(self) -> List[tuple]:
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = _NAME.fullmatch(p.name)
            if m:
                found.append((int(m.group(2)), m.group(1), int(m.group(3)), p))
        return sorted(found)

    def _next_seq(self) -> int:
        entries = self._entries()
        return entries[-1][0] + 1 if entries else 1

    def save_full(
        self, step: int, tables: Mapping[str, Table], update_counts: Optional[Mapping[str, UpdateCounts]] = None
    ) -> ShardCheckpoint:
        """Saves every row of ``tables`` atomically, then deletes chains older than the last ``keep_full``."""
        for leftover in self.root.glob(".tmp-*"):  # saves that crashed before their rename
            shutil.rmtree(leftover, ignore_errors=True)
        path = self.root / f"full-{self._next_seq():06d}-step-{step:012d}"
        saved = ShardCheckpoint.write(path, tables, step=step, update_counts=update_counts)
        fulls = [e for e in self._entries() if e[1] == "full"]
        if len(fulls) > self.keep_full:
            cutoff = fulls[-self.keep_full][0]
            for seq, _, _, p in self._entries():
                if seq < cutoff:
                    shutil.rmtree(p, ignore_errors=True)
        return saved

    def save_partial(
        self,
        step: int,
        tables: Mapping[str, Table],
        keys: Mapping[str, Any],
        update_counts: Optional[Mapping[str, UpdateCounts]] = None,
    ) -> ShardCheckpoint:
        """Saves the rows of ``keys`` (name -> keys) atomically; needs a full save before it."""
        if not any(e[1] == "full" for e in self._entries()):
            raise ValueError(
                f"{self.root}: no full checkpoint yet; save_full first (a partial save alone cannot restore a shard)"
            )
        path = self.root / f"partial-{self._next_seq():06d}-step-{step:012d}"
        return ShardCheckpoint.write(path, tables, step=step, keys=keys, update_counts=update_counts)

    def chain(self) -> List[ShardCheckpoint]:
        """The newest full save and every partial save after it, oldest first (empty before any full save)."""
        entries = self._entries()
        fulls = [i for i, e in enumerate(entries) if e[1] == "full"]
        if not fulls:
            return []
        return [ShardCheckpoint.open(e[3]) for e in entries[fulls[-1] :]]

    def nbytes(self) -> int:
        """Bytes of the array files of every checkpoint kept."""
        return sum(ShardCheckpoint.open(e[3]).nbytes() for e in self._entries())

    def __repr__(self) -> str:
        return f"CheckpointChain({str(self.root)!r}, saves={[e[3].name for e in self._entries()]})"


@dataclass
class RestoreResult:
    """What a partial restore rebuilt and what it lost."""

    tables: Dict[str, Table]
    step: Optional[int]  # step of the newest save applied (None: no checkpoint, fresh tables)
    restored_rows: int
    lost_updates: int  # updates applied after their row's newest save
    lost_rows: int  # rows with at least one lost update
    unsaved_rows: int  # rows that no save held: they restart from their initial value
    checkpoints: List[Path] = field(default_factory=list)


def _latest_counts(keys: List[np.ndarray], counts: List[np.ndarray]) -> tuple:
    """(unique keys, count at each key's NEWEST save) from saves listed oldest first."""
    if not keys:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    k = np.concatenate(keys)[::-1]
    c = np.concatenate(counts)[::-1]
    unique, first = np.unique(k, return_index=True)  # first occurrence in reversed order = newest save
    return unique, c[first]


def restore_server(
    saves: Union[CheckpointChain, Sequence[ShardCheckpoint]],
    templates: Mapping[str, Table],
    ledger: Optional[Mapping[str, AccessCounter]] = None,
    rewind_ledger: bool = False,
) -> RestoreResult:
    """Rebuilds one server's tables into fresh tables from its full + partial saves; counts lost updates.

    Args:
      saves: the server's chain (or its saves, full first, oldest first).
      templates: name -> a table configured like the lost one (the lost object itself, or one like it).
      ledger: name -> AccessCounter of the updates applied to this server's rows (see the module docstring);
        without it lost_updates, lost_rows and unsaved_rows are 0.
      rewind_ledger: afterwards set the ledger to what the restored rows hold (each row's count at its newest
        save; unsaved rows forgotten), so a later failure does not count these lost updates again.

    Every save is verified before any table is created; a bad file raises ValueError naming it.
    """
    chain = saves.chain() if isinstance(saves, CheckpointChain) else list(saves)
    if chain and chain[0].partial:
        raise ValueError(f"{chain[0].directory}: a partial save cannot start a restore; pass the full save first")
    verified = [(save, save.verify(templates)) for save in chain]
    tables = {name: fresh_table(template) for name, template in templates.items()}
    saved_keys: Dict[str, List[np.ndarray]] = {n: [] for n in templates}
    saved_counts: Dict[str, List[np.ndarray]] = {n: [] for n in templates}
    for save, arrays in verified:
        for name, a in arrays.items():
            save.load_rows(tables[name], name, a)
            saved_keys[name].append(a["keys"])
            saved_counts[name].append(a["updates"] if "updates" in a else np.zeros(a["keys"].size, np.int64))
    lost = lost_rows = unsaved = 0
    for name in templates:
        if ledger is None or name not in ledger:
            continue
        keys, counts = ledger[name].items()
        saved, at_save = _latest_counts(saved_keys[name], saved_counts[name])
        pos = np.minimum(np.searchsorted(saved, keys), max(saved.size - 1, 0))
        found = saved[pos] == keys if saved.size else np.zeros(keys.size, bool)
        base = np.where(found, at_save[pos] if saved.size else 0, 0)
        missed = np.maximum(counts - base, 0)
        lost += int(missed.sum())
        lost_rows += int(np.count_nonzero(missed))
        unsaved += int(np.count_nonzero(~found))
        if rewind_ledger:
            ledger[name].clear()
            ledger[name].set(saved, at_save)
    return RestoreResult(
        tables=tables,
        step=chain[-1].step if chain else None,
        restored_rows=sum(len(t) for t in tables.values()),
        lost_updates=lost,
        lost_rows=lost_rows,
        unsaved_rows=unsaved,
        checkpoints=[s.directory for s in chain],
    )
