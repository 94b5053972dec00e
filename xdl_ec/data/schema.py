"""The Criteo row schema shared by the file reader and the synthetic generator.

A row is a 0/1 label, 13 integer features (I1..I13) and 26 categorical features (C1..C26). Batches hold
``dense`` float32 [B, 13] = log(1 + max(x, 0)) (empty -> 0), ``sparse`` int64 [B, 26] feature keys for one
shared embedding table, and ``label`` float32 [B].

Feature keys: a categorical value is a 32-bit number (8 hex digits in the raw files); an empty field is the
value 2**32, so it gets its own key per column. The key is ``fmix64(column << 33 | value)`` (MurmurHash3's
64-bit finaliser, a bijection on 64-bit words), so the column acts as a salt: the same hex in two columns gives
two keys, and distinct (column, value) pairs never collide, while the keys are spread over the whole int64
range as the hash-sharded parameter servers want.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from xdl_ec.sparse.hashing import fmix64

NUM_DENSE = 13
NUM_SPARSE = 26
NUM_FIELDS = 1 + NUM_DENSE + NUM_SPARSE
EMPTY_VALUE = 1 << 32  # a categorical value outside the 32-bit range: the per-column "missing" value

_COLUMN_SALT = np.arange(NUM_SPARSE, dtype=np.uint64) << np.uint64(33)


class Batch(NamedTuple):
    """One batch of Criteo-shaped rows: dense float32 [B, 13], sparse int64 [B, 26], label float32 [B]."""

    dense: np.ndarray
    sparse: np.ndarray
    label: np.ndarray

    def __len__(self) -> int:
        return int(self.label.shape[0])


def categorical_keys(values: np.ndarray) -> np.ndarray:
    """Keys int64 [B, 26] of categorical values uint64 [B, 26] (each < 2**32, or EMPTY_VALUE)."""
    values = np.asarray(values, dtype=np.uint64)
    if values.ndim != 2 or values.shape[1] != NUM_SPARSE:
        raise ValueError(f"values: expected shape [B, {NUM_SPARSE}], got {values.shape}")
    return fmix64(values | _COLUMN_SALT).view(np.int64)


def column_keys(column: int, values: np.ndarray) -> np.ndarray:
    """Keys int64 [N] of one column's categorical values uint64 [N]: ``categorical_keys``' keys of that column."""
    if not 0 <= column < NUM_SPARSE:
        raise ValueError(f"column: must be in [0, {NUM_SPARSE}), got {column}")
    return fmix64(np.asarray(values, dtype=np.uint64) | _COLUMN_SALT[column]).view(np.int64)


def dense_transform(raw: np.ndarray) -> np.ndarray:
    """float32 log(1 + max(x, 0)) of raw integer features (computed in float64, rounded once)."""
    return np.log1p(np.maximum(np.asarray(raw, dtype=np.float64), 0.0)).astype(np.float32)


def tf_signature() -> tuple:
    """``tf.data`` output signature of a batch as a (dense, sparse, label) tuple (imports TensorFlow)."""
    import tensorflow as tf

    return (
        tf.TensorSpec([None, NUM_DENSE], tf.float32),
        tf.TensorSpec([None, NUM_SPARSE], tf.int64),
        tf.TensorSpec([None], tf.float32),
    )
