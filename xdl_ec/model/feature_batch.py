"""FeatureBatch: one input batch checked against a job's features and reduced to what a training step needs
from the tables: for every table the batch's unique keys, for every feature where each of its ids' rows is.

What a batch is (the job API's contract): a mapping with ``"label"`` float [B] (or [B, C] of C classes, or, for a model
of several heads, ``"labels"``: {head: float [B]}), an optional ``"dense"`` float [B, D], one entry per declared feature
(integer ids [B], [B, n] or [B, T, n]; variable-length ids as a ``tf.RaggedTensor`` [B, (n)] or a ``(values,
row_splits)`` pair of numpy arrays; a sequence feature's ``(ids [B, T], lengths [B])`` or ragged ids) and one per
declared side input (:class:`~xdl_ec.model.side_input.Input`). Tensors (e.g. the elements of a ``tf.data.Dataset``) are
read as numpy.
Anything else is an :class:`InputError` naming the entry, the worker and the step, raised before any of the
batch's rows are pulled or pushed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, cast

import numpy as np

from xdl_ec import _core
from xdl_ec.model.feature import Feature
from xdl_ec.model.side_input import Input
from xdl_ec.model.table_groups import GroupKeys, TableGroup, plan_groups
from xdl_ec.sparse.hashing import fmix64

SINGLE, FIXED, RAGGED, SEQUENCE = "single", "fixed", "ragged", "sequence"


class InputError(ValueError):
    """A batch that does not match the job's declared features (nothing of it was applied)."""


@dataclasses.dataclass
class FeatureIds:
    """Where one feature's ids sit in its table's unique keys: ``inverse`` int32 ([B, 1] single-valued, [B, n] or
    [B, T, n] fixed multi-hot, [nnz] variable-length with ``row_splits`` int64 [B + 1], [B, T] for a sequence with
    -1 past each length)."""

    kind: str
    inverse: np.ndarray
    row_splits: Optional[np.ndarray] = None

    @property
    def width(self) -> Any:
        """Ids per example of a fixed multi-hot feature (1 for single-valued, 0 for variable-length and sequences;
        the shape past the batch, a tuple, for ids of rank 3 and more)."""
        if self.kind in (RAGGED, SEQUENCE):
            return 0
        return int(self.inverse.shape[1]) if self.inverse.ndim == 2 else tuple(int(d) for d in self.inverse.shape[1:])


@dataclasses.dataclass
class FeatureBatch:
    """A checked batch: ``label`` float32 [B] (None when the batch has ``labels``), ``labels`` {head: float32 [B]}
    or None, ``dense`` float32 [B, D] or None, ``keys`` {table: unique int64 keys, ascending; a table group's name:
    its GroupKeys}, ``ids`` {feature: FeatureIds}, ``inputs`` {side input: array}; ``fresh`` {table or group: bool
    mask of keys the previous batch of the same stream did not touch} (set by the stream that prepared it);
    ``groups`` (:mod:`~xdl_ec.model.table_groups`) and ``group_inverse`` {group: int32, every feature's rows in the
    group's keys, one feature after another}."""

    label: Optional[np.ndarray]
    dense: Optional[np.ndarray]
    keys: Dict[str, np.ndarray]
    ids: Dict[str, FeatureIds]
    fresh: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    labels: Optional[Dict[str, np.ndarray]] = None
    inputs: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    input_specs: Tuple[Tuple[str, str, Tuple[Optional[int], ...]], ...] = ()  # (name, dtype, declared shape)
    heads: Optional[Tuple[str, ...]] = None  # the heads (sorted) of a model of several; None for one
    size: int = -1
    groups: Tuple[TableGroup, ...] = ()
    group_inverse: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    _signature: Optional[Tuple[Any, ...]] = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.size < 0:
            self.size = int(self.labels_of(None).shape[0])

    def labels_of(self, head: Optional[str]) -> np.ndarray:
        """The labels of ``head`` (None: the batch's one ``label``)."""
        found = self.label if head is None else (self.labels or {}).get(head)
        if found is None:
            which = "'label'" if head is None else f"labels of head {head!r}"
            raise InputError(f"the batch carries no {which} (prepared for prediction, without labels)")
        return found

    def __len__(self) -> int:
        return self.size

    def signature(self) -> Tuple[Any, ...]:
        """What fixes the shapes of a traced step: dense width and each feature's kind and width, then (only when
        the batch has them) its heads and its side inputs' dtypes and ranks (table groups follow from the features'
        kinds: :func:`~xdl_ec.model.table_groups.plan_groups`). Computed once (a step checks it more than once, and
        it walks every feature)."""
        if self._signature is None:
            self._signature = self._make_signature()
        return self._signature

    def _make_signature(self) -> Tuple[Any, ...]:
        dense = None if self.dense is None else int(self.dense.shape[1])
        features = tuple((name, f.kind, f.width) for name, f in sorted(self.ids.items()))
        if self.heads is None and not self.input_specs:
            return (dense, features)
        return (dense, features, (self.heads, tuple(sorted(self.input_specs))))

    @classmethod
    def prepare(
        cls,
        batch: Any,
        features: Sequence[Feature],
        where: str,
        inputs: Sequence[Input] = (),
        heads: Optional[Sequence[str]] = None,
        labelled: bool = True,
        grouped: bool = False,
    ) -> "FeatureBatch":
        """Checks ``batch`` against ``features`` and side ``inputs`` and computes its keys; ``heads``: the labels a
        batch must carry (the job's loss names them); ``labelled=False`` (prediction): labels are not read, and
        ``heads`` are the model's; ``grouped``: the tables that qualify go in table groups (one unique pass each);
        ``where`` ("worker 0, step 12") starts every error message."""
        if not isinstance(batch, Mapping):
            raise InputError(
                f"{where}: a batch must be a dict of feature name -> ids plus 'label' (and optional "
                f"'dense'), got {type(batch).__name__}"
            )
        declared = {f.name for f in features} | {i.name for i in inputs}
        unknown = sorted(set(batch) - declared - {"label", "labels", "dense"})
        if unknown:
            raise InputError(
                f"{where}: the batch carries undeclared entries {unknown}; declare a Feature (ids) or "
                f"an xdl_ec.Input (side input) for each (declared: {sorted(declared)}) or drop them from "
                f"input_fn's batches"
            )
        missing = [f.name for f in features if f.name not in batch]
        if missing:
            raise InputError(f"{where}: the batch lacks declared feature(s) {missing}")
        missing = [i.name for i in inputs if i.name not in batch]
        if missing:
            raise InputError(f"{where}: the batch lacks declared side input(s) {missing}")
        if labelled:
            label, labels = _labels_of(batch, heads, where)
            size = (
                next(iter(labels.values())).shape[0] if labels is not None else len(label) if label is not None else 0
            )
            heads = None if labels is None else tuple(sorted(labels))
        else:
            label, labels = None, None
            size = _size_of(batch, features, inputs, where)
            heads = None if heads is None else tuple(sorted(heads))
        dense = None
        if batch.get("dense") is not None:
            dense = _numpy(batch["dense"])
            if dense.ndim != 2 or dense.shape[0] != size or dense.dtype.kind not in "fiu":
                raise InputError(
                    f"{where}: 'dense' must be a float array [B, D] with B = {size}, got {dense.dtype} {dense.shape}"
                )
            dense = np.ascontiguousarray(dense, dtype=np.float32)
        side = {i.name: _side_input(batch[i.name], i, size, where) for i in inputs}
        # per table: the features' keys concatenated, then one unique over all of them
        raw: Dict[str, List[Tuple[Feature, np.ndarray]]] = {}  # per table, its features' ids
        shapes: Dict[str, Tuple[str, Tuple[int, ...], Optional[np.ndarray]]] = {}
        positions: Dict[str, np.ndarray] = {}  # a sequence's mask of positions within its lengths
        for f in features:
            kind, values, splits = _ids_of(batch[f.name], f, size, where)
            shapes[f.name] = (kind, values.shape, splits)
            if kind == SEQUENCE:
                mask = cast(np.ndarray, splits)  # a sequence's "splits" are its mask [B, T]
                positions[f.name] = mask
                values = values[mask]  # only the ids within each length are looked up
            raw.setdefault(f.table.name, []).append((f, values.reshape(-1)))  # salted below: a group in one pass
        keys: Dict[str, Any] = {}
        ids: Dict[str, FeatureIds] = {}
        groups: Tuple[TableGroup, ...] = ()
        group_inverse: Dict[str, np.ndarray] = {}
        if grouped:
            # a feature's width where a group can take it (one id, or fixed [B, n]), else None
            kinds = {
                name: (kind, 1 if kind == SINGLE else shape[1] if kind == FIXED and len(shape) == 2 else None)
                for name, (kind, shape, _) in shapes.items()
            }
            groups = plan_groups(features, kinds, list(raw))
            for group in groups:
                members = [raw.pop(t)[0] for t in group.tables]  # one feature per grouped table
                bounds = np.zeros(len(members) + 1, dtype=np.int64)
                np.cumsum([ids.size for _, ids in members], out=bounds[1:])
                unique, offsets, inverse = _core.group_sorted_unique(
                    _group_keys(members, bounds),
                    bounds,
                    np.arange(len(members), dtype=np.int32),
                    len(members),
                )
                keys[group.name] = GroupKeys(unique, offsets, group)
                group_inverse[group.name] = inverse
                for name, start, end in zip(group.features, bounds[:-1], bounds[1:]):
                    kind, shape, _ = shapes[name]
                    ids[name] = FeatureIds(
                        kind,
                        inverse[start:end].reshape(size, 1) if kind == SINGLE else inverse[start:end].reshape(shape),
                    )
        parts = {t: [(f.name, f.keys(ids)) for f, ids in table_raw] for t, table_raw in raw.items()}
        for table, table_parts in parts.items():
            flat = table_parts[0][1] if len(table_parts) == 1 else np.concatenate([k for _, k in table_parts])
            # numpy.unique's result (sorted keys, their inverse) by a radix sort: numpy's was most of the input's time
            unique, inverse = _core.sorted_unique(np.ascontiguousarray(flat, dtype=np.int64))
            keys[table] = unique
            start = 0
            for name, k in table_parts:
                kind, shape, splits = shapes[name]
                part = inverse[start : start + k.size]
                start += k.size
                if kind == SINGLE:
                    ids[name] = FeatureIds(kind, part.reshape(size, 1))
                elif kind == FIXED:
                    ids[name] = FeatureIds(kind, part.reshape(shape))
                elif kind == SEQUENCE:
                    mask = positions[name]
                    inverse_tb = np.full(mask.shape, -1, dtype=np.int32)
                    inverse_tb[mask] = part
                    ids[name] = FeatureIds(kind, inverse_tb)
                else:
                    ids[name] = FeatureIds(kind, part, splits)
        return cls(
            label,
            dense,
            keys,
            ids,
            labels=labels,
            inputs=side,
            input_specs=tuple((i.name, i.dtype, i.shape) for i in inputs),
            heads=heads,
            size=int(size),
            groups=groups,
            group_inverse=group_inverse,
        )


def _group_keys(members: Sequence[Tuple[Feature, np.ndarray]], bounds: np.ndarray) -> np.ndarray:
    """The table keys of a group's features' ids (``bounds``: where each feature's start and end), concatenated: what
    each feature's :meth:`Feature.keys` gives, salted in ONE pass over them all (a wide model's group has hundreds of
    features, and a salt pass per feature cost per feature what a step should cost per id)."""
    if any(f.shared_ids for f, _ in members):  # unsalted features' keys are their ids: each feature on its own
        return np.concatenate([f.keys(ids) for f, ids in members])
    words = np.concatenate([ids.astype(np.int64, copy=False) for _, ids in members]).view(np.uint64)
    salts = np.repeat(np.array([f.salt for f, _ in members], dtype=np.uint64), np.diff(bounds))
    return fmix64(words ^ salts).view(np.int64)


def _size_of(batch: Mapping[str, Any], features: Sequence[Feature], inputs: Sequence[Input], where: str) -> int:
    """The batch size of an unlabelled batch: its dense rows' count, else its first feature's examples."""
    if batch.get("dense") is not None:
        return int(_numpy(batch["dense"]).shape[0])
    first = batch[features[0].name]
    if type(first).__name__ == "RaggedTensor":
        return int(first.nrows())
    if isinstance(first, tuple) and len(first) == 2:
        return int(_numpy(first[1]).shape[0]) if features[0].sequence else int(_numpy(first[1]).shape[0]) - 1
    shape = _numpy(first).shape
    if not shape:
        raise InputError(f"{where}: feature {features[0].name!r}: ids must be [B] or more, got a scalar")
    return int(shape[0])


def _labels_of(
    batch: Mapping[str, Any], heads: Optional[Sequence[str]], where: str
) -> Tuple[Optional[np.ndarray], Optional[Dict[str, np.ndarray]]]:
    """(label, None) of a one-head batch, or (None, {head: labels}) of a batch with ``labels``, checked."""
    if "label" in batch and "labels" in batch:
        raise InputError(
            f"{where}: the batch carries both 'label' and 'labels'; give one label as 'label' or "
            f"several as 'labels': {{head: float [B]}}"
        )
    if "labels" not in batch:
        if heads is not None:
            raise InputError(
                f"{where}: the job's loss names heads {sorted(heads)}, so batches must carry 'labels': "
                f"{{head: float [B]}}; this one has " + ("'label'" if "label" in batch else "no labels")
            )
        if "label" not in batch:
            raise InputError(f"{where}: the batch lacks 'label' (float [B]), or 'labels' ({{head: float [B]}})")
        return _label_array(batch["label"], "'label'", None, where, classes=True), None
    given = batch["labels"]
    if not isinstance(given, Mapping) or not given:
        raise InputError(f"{where}: 'labels' must be a non-empty dict {{head: float [B]}}, got {type(given).__name__}")
    missing = sorted(set(heads or ()) - set(given))
    if missing:
        raise InputError(
            f"{where}: the batch's 'labels' lack head(s) {missing} that the job's loss names "
            f"(labels given: {sorted(given)})"
        )
    out: Dict[str, np.ndarray] = {}
    size = None
    for head in sorted(given):
        if not isinstance(head, str) or not head:
            raise InputError(f"{where}: 'labels' keys must be head names (non-empty str), got {head!r}")
        out[head] = _label_array(given[head], f"labels[{head!r}]", size, where)
        size = out[head].shape[0]
    return None, out


def _label_array(value: Any, name: str, size: Optional[int], where: str, classes: bool = False) -> np.ndarray:
    """Labels [B] (from [B] or [B, 1]); ``classes``: also [B, C] of C > 1 classes (a model of one head)."""
    label = _numpy(value)
    if label.ndim == 2 and label.shape[1] == 1:
        label = label[:, 0]
    multi = classes and label.ndim == 2 and label.shape[1] > 1
    if (label.ndim != 1 and not multi) or label.dtype.kind not in "fiub" or label.shape[0] == 0:
        shapes = "[B] or [B, C] of C classes" if classes else "[B]"
        raise InputError(f"{where}: {name} must be a non-empty float array {shapes}, got {label.dtype} {label.shape}")
    if size is not None and label.shape[0] != size:
        raise InputError(f"{where}: {name} has {label.shape[0]} labels where the other heads have {size}")
    return np.ascontiguousarray(label, dtype=np.float32)


def _side_input(value: Any, spec: Input, size: int, where: str) -> np.ndarray:
    """A side input's entry as a numpy array [B, *shape] of its declared dtype, checked."""
    array = _numpy(value)
    kind = np.dtype(spec.dtype).kind
    same_kind = (
        array.dtype.kind == kind
        or (kind == "f" and array.dtype.kind in "iu")
        or (kind in "iu" and array.dtype.kind in "iu")
    )
    if not same_kind:
        raise InputError(f"{where}: input {spec.name!r} must be {spec.dtype}, got {array.dtype}")
    if (
        array.ndim != 1 + len(spec.shape)
        or array.shape[0] != size
        or any(d is not None and d != a for d, a in zip(spec.shape, array.shape[1:]))
    ):
        want = ", ".join(["B"] + ["?" if d is None else str(d) for d in spec.shape])
        raise InputError(f"{where}: input {spec.name!r} must be shaped [{want}] with B = {size}, got {array.shape}")
    return np.ascontiguousarray(array, dtype=spec.dtype)


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return np.asarray(value.numpy())
    return np.asarray(value)


def _ids_of(value: Any, feature: Feature, size: int, where: str) -> Tuple[str, np.ndarray, Optional[np.ndarray]]:
    """(kind, ids, row_splits) of one feature's entry, checked."""
    name = f"{where}: feature {feature.name!r}"
    if feature.sequence:
        return _sequence_of(value, feature, size, name)
    splits = None
    if type(value).__name__ == "RaggedTensor":
        if value.ragged_rank != 1:
            raise InputError(
                f"{name}: ragged ids must have one ragged dimension [B, (n)], got ragged_rank {value.ragged_rank}"
            )
        value, splits = value.values, value.row_splits
    elif isinstance(value, tuple):
        if len(value) != 2:
            raise InputError(
                f"{name}: variable-length ids are a (values, row_splits) pair, got a tuple of {len(value)}"
            )
        value, splits = value
    ids = _numpy(value)
    if ids.dtype.kind not in "iu":
        raise InputError(
            f"{name}: ids must be integers (int64), got dtype {ids.dtype}; hash or map other ids to int64 first"
        )
    if splits is not None:
        splits = _numpy(splits)
        if splits.dtype.kind not in "iu" or splits.ndim != 1:
            raise InputError(f"{name}: row_splits must be a 1-D integer array, got {splits.dtype} {splits.shape}")
        splits = splits.astype(np.int64)
        if ids.ndim != 1:
            raise InputError(f"{name}: ragged values must be 1-D, got shape {ids.shape}")
        if splits.shape[0] != size + 1 or splits[0] != 0 or splits[-1] != ids.shape[0] or np.any(np.diff(splits) < 0):
            raise InputError(
                f"{name}: row_splits do not match: need B + 1 = {size + 1} non-decreasing offsets from "
                f"0 to len(values) = {ids.shape[0]}, got {splits.shape[0]} offsets "
                f"{splits[:1].tolist()}..{splits[-1:].tolist()}"
            )
        if feature.combiner is None:
            raise InputError(
                f"{name}: variable-length ids need a combiner ('sum', 'mean' or 'sqrtn') to give one "
                f"row per example; declare Feature(..., combiner=...)"
            )
        return RAGGED, ids, splits
    if ids.ndim == 1 and ids.shape[0] == size:
        return SINGLE, ids, None
    if ids.ndim >= 2 and ids.shape[0] == size and all(d >= 1 for d in ids.shape[1:]):
        return FIXED, ids, None
    raise InputError(
        f"{name}: ids must be [B], [B, n] or [B, T, n] with B = {size} (the label's length), or "
        f"variable-length; got shape {ids.shape}"
    )


def _sequence_of(value: Any, feature: Feature, size: int, name: str) -> Tuple[str, np.ndarray, np.ndarray]:
    """(SEQUENCE, ids [B, T], mask [B, T]) of a sequence feature's ``(ids, lengths)`` or ragged ids, checked."""
    if type(value).__name__ == "RaggedTensor":
        if value.ragged_rank != 1 or value.shape.rank != 2:
            raise InputError(f"{name}: a ragged sequence must be [B, None], got shape {value.shape}")
        lengths = _numpy(value.row_lengths())
        ids = _numpy(value.to_tensor(default_value=0))
        if ids.ndim != 2:
            ids = ids.reshape(size, -1)
    elif isinstance(value, tuple) and len(value) == 2:
        ids, lengths = _numpy(value[0]), _numpy(value[1])
    else:
        raise InputError(
            f"{name}: a sequence feature takes (ids int [B, T], lengths int [B]) or a "
            f"tf.RaggedTensor [B, None], got {type(value).__name__}"
        )
    if ids.dtype.kind not in "iu":
        raise InputError(
            f"{name}: ids must be integers (int64), got dtype {ids.dtype}; hash or map other ids to int64 first"
        )
    if ids.ndim != 2 or ids.shape[0] != size:
        raise InputError(f"{name}: sequence ids must be [B, T] with B = {size}, got shape {ids.shape}")
    if lengths.ndim == 2:
        raise InputError(
            f"{name}: the second entry is the sequence's lengths int [B], got an array {lengths.shape} "
            f"(a mask?); pass mask.sum(axis=1) instead"
        )
    if lengths.dtype.kind not in "iu" or lengths.shape != (size,):
        raise InputError(f"{name}: lengths must be integers [B] with B = {size}, got {lengths.dtype} {lengths.shape}")
    steps = ids.shape[1]
    if lengths.size and (lengths.min() < 0 or lengths.max() > steps):
        bad = int(np.flatnonzero((lengths < 0) | (lengths > steps))[0])
        raise InputError(f"{name}: lengths must lie in [0, T = {steps}], got {int(lengths[bad])} at example {bad}")
    if feature.max_length is not None and lengths.size and lengths.max() > feature.max_length:
        raise InputError(
            f"{name}: a sequence of {int(lengths.max())} ids is longer than the declared max_length "
            f"{feature.max_length}"
        )
    mask = np.arange(steps)[None, :] < lengths.astype(np.int64)[:, None]
    return SEQUENCE, ids, mask
