"""Which rows CPR saves at a partial checkpoint: MFU (most frequently used) and SSU (sub-sampled used).

CPR (Maeng et al., MLSys 2021) saves only part of the embedding between full checkpoints, choosing rows whose
loss would hurt most:

* MFU keeps a per-row counter of updates since the row was last saved and, at each partial checkpoint, saves the
  ``fraction`` of the table's rows with the highest counts; their counters restart from zero.
* SSU samples a ``fraction`` of the batches and remembers every row those batches touched; at a partial
  checkpoint it saves exactly those rows and forgets them. Cheaper to track than MFU (only sampled batches cost
  anything), and frequently used rows are likely to appear in a sampled batch.

Both keep their bookkeeping BESIDE the shard (never inside the parity-protected slot records), per table, and
answer "which keys to save now" deterministically given their seed: MFU breaks count ties by a seeded hash of the
key, SSU decides per batch index from a seeded hash, so the choice does not depend on call timing or on process.

:class:`AccessCounter` is the key -> count structure under both (and under the lost-update ledger of
:mod:`xdl_ec.ft.partial_restore`): a native hash table (``cpp/include/xdl_ec/access_counter.h``), because a numpy
version (np.unique per batch, merged into sorted arrays) cost about as much as the push it counted.
"""

from __future__ import annotations

import math
import numbers
from typing import Dict, Optional, Tuple

import numpy as np
from numpy.typing import ArrayLike

from xdl_ec import _core
from xdl_ec.settings import checks
from xdl_ec.sparse.table import as_keys

__all__ = ["AccessCounter", "MfuSelector", "SsuSelector", "key_hash"]


def key_hash(keys: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of ``keys`` XOR a seed-derived constant: uint64 per key, a deterministic pseudo-random order."""
    with np.errstate(over="ignore"):
        z = keys.view(np.uint64) ^ np.uint64((seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & (2**64 - 1))
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _key_hash_int(key: int, seed: int) -> int:
    """:func:`key_hash` of one int, in plain Python (a numpy call per batch costs more than the hash)."""
    mask = 2**64 - 1
    z = (key & mask) ^ ((seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & mask)
    z = (z + 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def _check_fraction(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 < float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    return int(seed)


class AccessCounter:
    """Counts of int64 keys, over the native ``_core.AccessCounter`` (open addressing, no sort per batch).

    Keys are taken as :func:`xdl_ec.sparse.table.as_keys` does (any integer dtype; uint64 wraps bit for bit); every
    batch call runs in C++ with the GIL released.
    """

    def __init__(self) -> None:
        self._native = _core.AccessCounter()

    def add(self, keys: ArrayLike, *, once: bool = True) -> None:
        """Counts ``keys``; ``once`` counts each distinct key once per call (one push = one update per row)."""
        self._native.add(as_keys(keys), bool(once))

    def get(self, keys: ArrayLike) -> np.ndarray:
        """int64 counts of ``keys`` (0 for keys never counted)."""
        return self._native.get(as_keys(keys))

    def items(self) -> Tuple[np.ndarray, np.ndarray]:
        """(keys, counts) of every counted key, sorted by key."""
        return self._native.items()

    def total(self) -> int:
        """Sum of all counts."""
        return int(self._native.total())

    def set(self, keys: ArrayLike, counts: ArrayLike) -> None:
        """Sets the counts of unique ``keys`` (0 forgets a key); bad input raises and changes nothing."""
        keys = as_keys(keys)
        counts = np.asarray(counts)
        if counts.dtype.kind not in "iu":
            raise TypeError(f"counts must be integers, got dtype {counts.dtype}")
        if counts.shape != keys.shape:
            raise ValueError(f"counts must have shape (len(keys),) = {keys.shape}, got {counts.shape}")
        self._native.set(keys, np.ascontiguousarray(counts, dtype=np.int64))

    def discard(self, keys: ArrayLike) -> int:
        """Forgets ``keys`` (their counts restart from 0); returns how many were counted."""
        return int(self._native.discard(as_keys(keys)))

    def clear(self) -> None:
        """Forgets every key."""
        self._native.clear()

    def __len__(self) -> int:
        return int(self._native.size())

    def __repr__(self) -> str:
        return f"AccessCounter(keys={len(self)}, total={self.total()})"


class MfuSelector:
    """CPR-MFU: per table, count each row's updates since its last save; save the top ``fraction`` of rows.

    ``record`` after every push (the batch's keys of that table); ``select`` at a partial checkpoint;
    ``mark_saved`` once the save is durable (``keys=None`` after a full save).
    """

    def __init__(self, fraction: float, seed: int = 0) -> None:
        self.fraction = _check_fraction("fraction", fraction)
        self.seed = _check_seed(seed)
        self._counters: Dict[str, AccessCounter] = {}

    def record(self, table: str, keys: ArrayLike, batch: Optional[int] = None) -> None:
        """Counts one update of each distinct key (``batch`` is unused: the interface matches SSU's)."""
        self._counters.setdefault(table, AccessCounter()).add(keys)

    def counter(self, table: str) -> AccessCounter:
        """The table's counter of updates since the last save (empty when never recorded)."""
        return self._counters.setdefault(table, AccessCounter())

    def select(self, table: str, num_rows: int) -> np.ndarray:
        """Keys to save now: the ``ceil(fraction * num_rows)`` most-updated rows since their last save.

        ``num_rows`` is the table's live rows (``len(table)``). Rows never updated since their save are not
        candidates. Ties are broken by a seeded hash of the key, so the result is deterministic. Sorted by key.
        """
        num_rows = checks.integer("num_rows", num_rows, 0)
        keys, counts = self.counter(table).items()
        budget = min(keys.size, math.ceil(self.fraction * int(num_rows)))
        if budget == keys.size:
            return keys
        order = np.lexsort((key_hash(keys, self.seed), -counts))  # last key is primary: count descending
        return np.sort(keys[order[:budget]])

    def mark_saved(self, table: str, keys: Optional[ArrayLike] = None) -> None:
        """The rows' counts restart from zero (all rows when ``keys`` is None: after a full save)."""
        counter = self.counter(table)
        if keys is None:
            counter.clear()
        else:
            counter.discard(keys)


class SsuSelector:
    """CPR-SSU: sample a ``fraction`` of batches; save the rows the sampled batches touched.

    A batch is sampled iff ``key_hash(batch, seed) < fraction * 2**64``: a pure function of (seed, batch index),
    the same for every table and every process.
    """

    def __init__(self, fraction: float, seed: int = 0) -> None:
        self.fraction = _check_fraction("fraction", fraction)
        self.seed = _check_seed(seed)
        self._touched: Dict[str, AccessCounter] = {}

    def sampled(self, batch: int) -> bool:
        """Whether batch number ``batch`` is in the sample."""
        batch = checks.integer("batch", batch, 0)
        if self.fraction >= 1.0:
            return True
        return _key_hash_int(int(batch), self.seed) < int(self.fraction * 2.0**64)

    def record(self, table: str, keys: ArrayLike, batch: Optional[int] = None) -> None:
        """Remembers ``keys`` when batch ``batch`` is sampled (``batch`` is required)."""
        if batch is None:
            raise ValueError("batch is required for SSU: the global batch index decides the sample")
        if self.sampled(batch):
            self._touched.setdefault(table, AccessCounter()).add(keys)

    def select(self, table: str, num_rows: Optional[int] = None) -> np.ndarray:
        """Keys to save now: every row a sampled batch touched since its last save, sorted."""
        counter = self._touched.get(table)
        return counter.items()[0] if counter is not None else np.empty(0, dtype=np.int64)

    def mark_saved(self, table: str, keys: Optional[ArrayLike] = None) -> None:
        """Forgets saved rows (all of the table's when ``keys`` is None)."""
        counter = self._touched.get(table)
        if counter is None:
            return
        if keys is None:
            counter.clear()
        else:
            counter.discard(keys)
