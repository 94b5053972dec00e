"""Feature: one input of a job's batches, looked up in a :class:`~xdl_ec.sparse.table_config.Table`.

A feature's ids are single-valued (int [B]), fixed multi-hot (int [B, n]) or variable-length (a
``tf.RaggedTensor``, or a ``(values, row_splits)`` pair of numpy arrays). ``combiner`` ("sum", "mean", "sqrtn")
reduces each example's ids to one row [B, dim]; ``None`` keeps one row per id: [B, dim] for single-valued ids,
[B, n, dim] for fixed multi-hot ones (variable-length ids need a combiner).

Several features may share a table. Their ids are salted per feature, so id 7 of "user" and id 7 of "item" are two
rows: the key of id ``x`` of feature ``f`` is ``fmix64(x XOR salt(f))`` with ``salt(f)`` the first 8 bytes of
sha256(f's name) (fmix64 is MurmurHash3's 64-bit finaliser, a bijection, so two ids of one feature never share a
row). ``shared_ids=True`` uses the ids as keys unchanged, so features that share it and a table share rows (e.g. a
"clicked items" list looked up in the "item" table's rows). Renaming a salted feature gives it new rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional

import numpy as np

from xdl_ec.settings import checks
from xdl_ec.sparse.hashing import fmix64
from xdl_ec.sparse.table_config import Table

COMBINERS = ("sum", "mean", "sqrtn")


@dataclasses.dataclass(frozen=True)
class Feature:
    """Feature ``name`` looked up in ``table``; see the module docstring for ``combiner`` and ``shared_ids``."""

    name: str
    table: Table
    combiner: Optional[str] = None
    shared_ids: bool = False

    def __post_init__(self) -> None:
        checks.non_empty_str("Feature name", self.name)
        if self.name in ("label", "dense"):
            raise ValueError(f"Feature name {self.name!r} is reserved for the batch's {self.name} entry: rename it")
        checks.instance(f"feature {self.name!r}: table", self.table, Table)
        if self.combiner is not None:
            checks.one_of(f"feature {self.name!r}: combiner", self.combiner, COMBINERS + (None,))
        checks.instance(f"feature {self.name!r}: shared_ids", self.shared_ids, bool)

    @property
    def salt(self) -> int:
        """The 64-bit salt of this feature's ids (0 with ``shared_ids``)."""
        if self.shared_ids:
            return 0
        return int.from_bytes(hashlib.sha256(self.name.encode()).digest()[:8], "little")

    def keys(self, ids: np.ndarray) -> np.ndarray:
        """Table keys (int64) of integer ``ids`` (any shape)."""
        ids = np.asarray(ids)
        words = ids.astype(np.int64, copy=False).view(np.uint64)
        if self.shared_ids:
            return np.ascontiguousarray(words).view(np.int64)
        return fmix64(words ^ np.uint64(self.salt)).view(np.int64)
