"""FeatureBatch: one input batch checked against a job's features and reduced to what a training step needs
from the tables: for every table the batch's unique keys, for every feature where each of its ids' rows is.

What a batch is (the job API's contract): a mapping with ``"label"`` float [B], an optional ``"dense"`` float
[B, D], and one entry per declared feature: integer ids [B] or [B, n], or variable-length ids as a
``tf.RaggedTensor`` [B, (n)] or a ``(values, row_splits)`` pair of numpy arrays. Tensors (e.g. the elements of a
``tf.data.Dataset``) are read as numpy. Anything else is an :class:`InputError` naming the feature, the worker
and the step, raised before any of the batch's rows are pulled or pushed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from .feature import Feature

SINGLE, FIXED, RAGGED = "single", "fixed", "ragged"


class InputError(ValueError):
    """A batch that does not match the job's declared features (nothing of it was applied)."""


@dataclasses.dataclass
class FeatureIds:
    """Where one feature's ids sit in its table's unique keys: ``inverse`` int32 ([B, 1] single-valued, [B, n]
    fixed multi-hot, [nnz] variable-length with ``row_splits`` int64 [B + 1])."""

    kind: str
    inverse: np.ndarray
    row_splits: Optional[np.ndarray] = None

    @property
    def width(self) -> int:
        """Ids per example of a fixed multi-hot feature (1 for single-valued, 0 for variable-length)."""
        return 0 if self.kind == RAGGED else int(self.inverse.shape[1])


@dataclasses.dataclass
class FeatureBatch:
    """A checked batch: ``label`` float32 [B], ``dense`` float32 [B, D] or None, ``keys`` {table: unique int64
    keys, ascending}, ``ids`` {feature: FeatureIds}; ``fresh`` {table: bool mask of keys the previous batch of the
    same stream did not touch} (set by the stream that prepared it)."""

    label: np.ndarray
    dense: Optional[np.ndarray]
    keys: Dict[str, np.ndarray]
    ids: Dict[str, FeatureIds]
    fresh: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def signature(self) -> Tuple[Any, ...]:
        """What fixes the shapes of a traced step: dense width and each feature's kind and width."""
        dense = None if self.dense is None else int(self.dense.shape[1])
        return (dense, tuple((name, f.kind, f.width) for name, f in sorted(self.ids.items())))

    @classmethod
    def prepare(cls, batch: Any, features: Sequence[Feature], where: str) -> "FeatureBatch":
        """Checks ``batch`` against ``features`` and computes its keys; ``where`` ("worker 0, step 12") starts
        every error message."""
        if not isinstance(batch, Mapping):
            raise InputError(f"{where}: a batch must be a dict of feature name -> ids plus 'label' (and optional "
                             f"'dense'), got {type(batch).__name__}")
        declared = {f.name for f in features}
        unknown = sorted(set(batch) - declared - {"label", "dense"})
        if unknown:
            raise InputError(f"{where}: the batch carries undeclared entries {unknown}; declare a Feature for each "
                             f"(declared: {sorted(declared)}) or drop them from input_fn's batches")
        missing = [f.name for f in features if f.name not in batch]
        if missing:
            raise InputError(f"{where}: the batch lacks declared feature(s) {missing}")
        if "label" not in batch:
            raise InputError(f"{where}: the batch lacks 'label' (float [B])")
        label = _numpy(batch["label"])
        if label.ndim == 2 and label.shape[1] == 1:
            label = label[:, 0]
        if label.ndim != 1 or label.dtype.kind not in "fiub" or label.shape[0] == 0:
            raise InputError(f"{where}: 'label' must be a non-empty float array [B], got {label.dtype} "
                             f"{label.shape}")
        size = label.shape[0]
        label = np.ascontiguousarray(label, dtype=np.float32)
        dense = None
        if batch.get("dense") is not None:
            dense = _numpy(batch["dense"])
            if dense.ndim != 2 or dense.shape[0] != size or dense.dtype.kind not in "fiu":
                raise InputError(f"{where}: 'dense' must be a float array [B, D] with B = {size}, got {dense.dtype} "
                                 f"{dense.shape}")
            dense = np.ascontiguousarray(dense, dtype=np.float32)
        # per table: the features' keys concatenated, then one unique over all of them
        parts: Dict[str, list] = {}
        shapes: Dict[str, Tuple[str, Tuple[int, ...], Optional[np.ndarray]]] = {}
        for f in features:
            kind, values, splits = _ids_of(batch[f.name], f, size, where)
            shapes[f.name] = (kind, values.shape, splits)
            parts.setdefault(f.table.name, []).append((f.name, f.keys(values).reshape(-1)))
        keys: Dict[str, np.ndarray] = {}
        ids: Dict[str, FeatureIds] = {}
        for table, table_parts in parts.items():
            flat = table_parts[0][1] if len(table_parts) == 1 else np.concatenate([k for _, k in table_parts])
            unique, inverse = np.unique(flat, return_inverse=True)
            keys[table] = unique
            inverse = inverse.astype(np.int32).reshape(-1)
            start = 0
            for name, k in table_parts:
                kind, shape, splits = shapes[name]
                part = inverse[start:start + k.size]
                start += k.size
                if kind == SINGLE:
                    ids[name] = FeatureIds(kind, part.reshape(size, 1))
                elif kind == FIXED:
                    ids[name] = FeatureIds(kind, part.reshape(shape))
                else:
                    ids[name] = FeatureIds(kind, part, splits)
        return cls(label, dense, keys, ids)


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return np.asarray(value.numpy())
    return np.asarray(value)


def _ids_of(value: Any, feature: Feature, size: int, where: str) -> Tuple[str, np.ndarray, Optional[np.ndarray]]:
    """(kind, ids, row_splits) of one feature's entry, checked."""
    name = f"{where}: feature {feature.name!r}"
    splits = None
    if type(value).__name__ == "RaggedTensor":
        if value.ragged_rank != 1:
            raise InputError(f"{name}: ragged ids must have one ragged dimension [B, (n)], got ragged_rank "
                             f"{value.ragged_rank}")
        value, splits = value.values, value.row_splits
    elif isinstance(value, tuple):
        if len(value) != 2:
            raise InputError(f"{name}: variable-length ids are a (values, row_splits) pair, got a tuple of "
                             f"{len(value)}")
        value, splits = value
    ids = _numpy(value)
    if ids.dtype.kind not in "iu":
        raise InputError(f"{name}: ids must be integers (int64), got dtype {ids.dtype}; hash or map other ids "
                         f"to int64 first")
    if splits is not None:
        splits = _numpy(splits)
        if splits.dtype.kind not in "iu" or splits.ndim != 1:
            raise InputError(f"{name}: row_splits must be a 1-D integer array, got {splits.dtype} {splits.shape}")
        splits = splits.astype(np.int64)
        if ids.ndim != 1:
            raise InputError(f"{name}: ragged values must be 1-D, got shape {ids.shape}")
        if splits.shape[0] != size + 1 or splits[0] != 0 or splits[-1] != ids.shape[0] or \
                np.any(np.diff(splits) < 0):
            raise InputError(f"{name}: row_splits do not match: need B + 1 = {size + 1} non-decreasing offsets from "
                             f"0 to len(values) = {ids.shape[0]}, got {splits.shape[0]} offsets "
                             f"{splits[:1].tolist()}..{splits[-1:].tolist()}")
        if feature.combiner is None:
            raise InputError(f"{name}: variable-length ids need a combiner ('sum', 'mean' or 'sqrtn') to give one "
                             f"row per example; declare Feature(..., combiner=...)")
        return RAGGED, ids, splits
    if ids.ndim == 1 and ids.shape[0] == size:
        return SINGLE, ids, None
    if ids.ndim == 2 and ids.shape[0] == size and ids.shape[1] >= 1:
        return FIXED, ids, None
    raise InputError(f"{name}: ids must be [B] or [B, n] with B = {size} (the label's length), or variable-length; "
                     f"got shape {ids.shape}")
