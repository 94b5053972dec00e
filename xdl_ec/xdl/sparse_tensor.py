"""SparseTensor: XDL's batch of sparse ids by segments, as a ported reader yields it.

XDL's ``xdl.SparseTensor(ids, values, segments)`` holds a batch's ids flat, with ``segments`` the running end of
each segment's ids (the last one is the ids' count) and ``values`` per-id weights. A segment is usually one
example; XDL's sequence models (DIN, DIEN) instead give every id of a padded history [B, T] a segment of its own, so
that ``xdl.embedding(..., combiner='sum')`` returns one row per id ([B * T, dim]) that the model reshapes to
[B, T, dim]. :func:`segment_lengths` checks one and gives each segment's length; the XDL port
(:mod:`xdl_ec.xdl.xdl_model`) maps B segments onto a variable-length feature and B * k segments of n ids each onto
a fixed-width one (see its ``classify``). Kept free of TensorFlow, so ``import xdl_ec`` stays light.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np


class SparseTensor:
    """XDL's ``SparseTensor(ids, values, segments)``: ``ids`` integer [nnz], ``values`` None (or empty) or
    float [nnz] of ones (the job weighs every id alike), ``segments`` integer [N], the running end of each segment's
    ids (XDL's: three examples [1, 5, 7], [2, 4, 10], [3] are ids [1, 5, 7, 2, 4, 10, 3], segments [3, 6, 7])."""

    def __init__(self, ids: Any, values: Any, segments: Any) -> None:
        self.ids, self.values, self.segments = ids, values, segments

    def __repr__(self) -> str:
        return f"SparseTensor(ids={self.ids!r}, values={self.values!r}, segments={self.segments!r})"


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return np.asarray(value.numpy())
    return np.asarray(value)


def segment_lengths(sparse: SparseTensor, what: str) -> Tuple[np.ndarray, np.ndarray]:
    """(ids int [nnz], each segment's length [N]) of ``sparse``, checked; ``what`` starts every error (a
    ValueError saying what is wrong and what XDL's segments are)."""
    ids = _numpy(sparse.ids)
    segments = _numpy(sparse.segments)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError(f"{what}: SparseTensor ids must be a 1-D integer array (int64), got {ids.dtype} {ids.shape}")
    if segments.ndim != 1 or segments.dtype.kind not in "iu" or segments.size == 0:
        raise ValueError(
            f"{what}: SparseTensor segments must be a non-empty 1-D integer array, got {segments.dtype} "
            f"{segments.shape}"
        )
    ends = segments.astype(np.int64)
    lengths = np.diff(ends, prepend=0)
    if ends[-1] != ids.size or np.any(lengths < 0):
        raise ValueError(
            f"{what}: SparseTensor segments must be the running end of each segment's ids, non-decreasing "
            f"up to the ids' count {ids.size}; got {ends.size} segments ending at {ends[-1]}"
            f"{' and decreasing' if np.any(lengths < 0) else ''} (XDL's: ids [1, 5, 7, 2, 4, 10, 3] "
            f"in examples of 3, 3 and 1 ids have segments [3, 6, 7])"
        )
    _check_unweighted(sparse.values, ids.size, what)
    return ids, lengths


def _check_unweighted(values: Optional[Any], count: int, what: str) -> None:
    if values is None:
        return
    weights = _numpy(values)
    if weights.size == 0:
        return
    if weights.shape != (count,) or not np.all(weights == 1):
        raise ValueError(
            f"{what}: SparseTensor values must be None or ones [{count}] (one per id): the job's "
            f"combiners weigh every id alike, weighted ids are not supported; got {weights.dtype} "
            f"{weights.shape}"
        )
