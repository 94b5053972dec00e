"""Feature: one input of a job's batches, looked up in a :class:`~xdl_ec.sparse.table_config.Table`.

A feature's ids are single-valued (int [B]), fixed multi-hot (int [B, n], or [B, T, n] and beyond) or
variable-length (a ``tf.RaggedTensor``, or a ``(values, row_splits)`` pair of numpy arrays). ``combiner`` ("sum",
"mean", "sqrtn") reduces each example's ids to one row [B, dim] (the last axis of fixed ids: [B, T, n] gives
[B, T, dim]); ``None`` keeps one row per id: [B, dim] for single-valued ids, [B, n, dim] (or [B, T, n, dim]) for
fixed multi-hot ones (variable-length ids need a combiner).

A ``sequence=True`` feature is a behaviour sequence (a user's last T clicked items): its entry is ``(ids int
[B, T], lengths int [B])`` or a ``tf.RaggedTensor`` [B, None]; the model receives ``embedded[name]`` float32
[B, T, dim] with zero rows past each length and ``embedded[name + "_mask"]`` bool [B, T]. Only the ids within each
length are looked up (padding makes no rows). ``max_length``: the longest sequence allowed (a longer one is an
InputError); ragged sequences are padded to the batch's longest.

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
#: a batch's entries that are not features
RESERVED = ("label", "labels", "dense")


@dataclasses.dataclass(frozen=True)
class Feature:
    """Feature ``name`` looked up in ``table``; see the module docstring for ``combiner`` and ``shared_ids``."""

    name: str
    table: Table
    combiner: Optional[str] = None
    shared_ids: bool = False
    sequence: bool = False
    max_length: Optional[int] = None

    def __post_init__(self) -> None:
        checks.non_empty_str("Feature name", self.name)
        if self.name in RESERVED:
            raise ValueError(f"Feature name {self.name!r} is reserved for the batch's {self.name} entry: rename it")
        checks.instance(f"feature {self.name!r}: table", self.table, Table)
        if self.combiner is not None:
            checks.one_of(f"feature {self.name!r}: combiner", self.combiner, COMBINERS + (None,))
        checks.instance(f"feature {self.name!r}: shared_ids", self.shared_ids, bool)
        checks.instance(f"feature {self.name!r}: sequence", self.sequence, bool)
        if self.sequence and self.combiner is not None:
            raise ValueError(
                f"feature {self.name!r}: a sequence keeps one row per position ([B, T, dim] and a mask); "
                f"drop combiner={self.combiner!r}, or declare sequence=False to pool the ids"
            )
        if self.max_length is not None:
            if not self.sequence:
                raise ValueError(
                    f"feature {self.name!r}: max_length applies to sequence features; pass "
                    f"sequence=True or drop max_length"
                )
            checks.integer(f"feature {self.name!r}: max_length", self.max_length, 1)

    @property
    def mask_name(self) -> str:
        """The model's ``embedded`` entry holding a sequence's mask."""
        return self.name + "_mask"

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
