"""Serving export: a trained model as a TensorFlow SavedModel that needs neither xdl-ec nor its op library.

``export_saved_model(model, directory)`` writes a SavedModel whose ``serving_default`` signature takes the batch
the job's input yields, without the label, and returns ``{"probability": float32 [B]}`` equal to
``model.predict(batch)`` (to float rounding; float32 [B, C] for a model of C classes, or a model computing its own
loss whose probabilities are [B, C]), or for a model of several heads {head: float32 [B]}. Its inputs, one
per feature named after it:

- single-valued ids: ``<name>`` int64 [B];
- fixed multi-hot ids: ``<name>`` int64 [B, n] (or [B, T, n]; n and T as in the job's batches);
- variable-length ids: ``<name>_values`` int64 [nnz] and ``<name>_row_splits`` int64 [B + 1];
- a sequence: ``<name>`` int64 [B, T] and ``<name>_lengths`` int64 [B];
- ``dense`` float32 [B, D] when the job's batches carry dense features;
- each side input (``xdl_ec.Input``) under its name, of its dtype.

Load it with ``tf.saved_model.load(directory).signatures["serving_default"](**inputs)``: only standard TensorFlow
ops run. Per table, the trained rows are a matrix variable (row 0 all zeros, the row unknown keys read) and a
``tf.lookup.experimental.MutableHashTable`` maps a key to its row, both in ``variables/``. Every feature's keys are
computed in the graph as :meth:`xdl_ec.model.feature.Feature.keys` computes them (fmix64 of the id XOR the feature's
salt, over uint64; the ids themselves with ``shared_ids``), and pooled as ``xdl_ec.tf.tf_ops.gather`` pools them (the
sum in position order, then divided by the count for "mean", its square root for "sqrtn"; an empty row pools to
zeros). The dense Keras model's call is traced with its weights.

An id the table never trained reads the zero row, as prediction and evaluation do (:mod:`xdl_ec.model.evaluation`): it
inserts nothing and gets no initialised row. Not exported: optimizer state (sparse and dense), the tables'
initializers, the loss and the label. ``assets.extra/serving.json`` describes the inputs and the tables.

Fresh serving without a reload: the loaded object's ``apply_delta(tf.constant(delta_dir))`` (a ``tf.function``, standard
ops only) applies a delta (:mod:`xdl_ec.job.serving_delta`) to the tables and weights the signature reads: changed and
new rows are written in place (new keys take freed rows first, then the matrix grows by doubling: O(delta)
amortised), removed keys leave the hash table (they read zeros again), every dense weight is assigned; a table's
reset (after a failure) clears it before its rows are written. The model has
a ``base_id`` and counts the deltas applied (``sequence``, ``step``: the training step it serves); a delta of another
base, or not the next in sequence, raises ``InvalidArgumentError`` before anything changes; so does a missing file
(``NotFoundError``) or a malformed one. A request served while a delta is applied may see part of it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Protocol, Tuple, Union

import numpy as np

from xdl_ec.job import serving_delta
from xdl_ec.model.dense_model import model_arguments, signature_extras
from xdl_ec.model.feature import Feature
from xdl_ec.model.feature_batch import RAGGED, SEQUENCE, SINGLE
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.model.model_step import probabilities_of

SIGNATURE = "serving_default"
OUTPUT = "probability"
# MurmurHash3's fmix64 constants, as xdl_ec.sparse.hashing.fmix64 uses them
_FMIX_MULTIPLIERS = (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)
# what tf.function keeps as an argument's name (it renames others), so what a signature input can be named
_INPUT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class Servable(Protocol):
    """What an export reads of a trained model (:class:`~xdl_ec.job.trained_model.TrainedModel` is one; it calls
    this module, so this module names only what it reads)."""

    job: JobSpec
    tables: Any  # LocalTables
    dense: Any  # DenseModel
    signature: Any


class ExportError(ValueError):
    """The model or the output directory cannot be exported to (the message says why and what to do)."""


def tf_keys(feature: Feature, ids: Any) -> Any:
    """The table keys (int64 tensor) of ``feature``'s int64 ``ids`` tensor computed with standard TF ops, bit for
    bit as :meth:`Feature.keys`: fmix64(id XOR salt) with wrapping uint64 arithmetic (TF's CPU kernels multiply,
    shift and xor uint64), or the ids themselves with ``shared_ids``."""
    import tensorflow as tf

    if feature.shared_ids:
        return ids
    x = tf.bitwise.bitwise_xor(tf.bitcast(ids, tf.uint64), tf.constant(feature.salt, tf.uint64))
    shift = tf.constant(33, tf.uint64)
    for multiplier in _FMIX_MULTIPLIERS:
        x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, shift))
        x = x * tf.constant(multiplier, tf.uint64)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, shift))
    return tf.bitcast(x, tf.int64)


def export_saved_model(
    model: Servable, directory: Union[str, "os.PathLike[str]"], drop_rows_below_count: Optional[int] = None
) -> Path:
    """Writes ``model`` (e.g. ``job.model`` after ``job.fit``) as a SavedModel at ``directory`` (which must not
    exist, or be empty) and returns its path. ``drop_rows_below_count`` N: rows of ids seen fewer than N times
    (pushes, the per-row counts of a table with admit / evict rules) are left out; they then read zeros, as unknown
    ids do. Written beside it under a temporary name, then renamed: a reader
    never sees a partial export."""
    if not all(hasattr(model, part) for part in ("job", "tables", "dense", "signature")):
        raise ExportError(
            f"export: needs a trained model (job.model after job.fit, or xdl_ec.load(DIR)), got "
            f"{type(model).__name__}; train the job first"
        )
    _check_destination(Path(directory).expanduser().absolute())
    exports = {name: _exported_rows(name, table, drop_rows_below_count) for name, table in model.tables.tables.items()}
    return write_saved_model(model.job, model.signature, model.dense, exports, directory)


def write_saved_model(
    job: JobSpec,
    signature: Tuple[Any, ...],
    dense: Any,
    exports: Dict[str, Dict[str, np.ndarray]],
    directory: Union[str, "os.PathLike[str]"],
    base_id: Optional[str] = None,
    step: int = -1,
) -> Path:
    """The SavedModel of ``job`` with ``exports`` ({table: {"keys", "values"}}, every row it serves), ``dense`` (a
    DenseModel, its weights as they are now) and the batch ``signature``, at ``directory`` (new or empty);
    ``base_id`` names it for deltas (a fresh id when None), ``step``: the training step it holds (-1: unknown)."""
    out = Path(directory).expanduser().absolute()
    _check_destination(out)
    names = _input_names(job.features, signature)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    base_id = uuid.uuid4().hex if base_id is None else base_id
    try:
        saved = staging / "saved_model"
        module, serve = _serving_module(job, dense, signature, exports, base_id, step)
        import tensorflow as tf

        tf.saved_model.save(module, str(saved), signatures={SIGNATURE: serve})
        extra = saved / "assets.extra"
        extra.mkdir()
        width = serve.structured_outputs[OUTPUT].shape if OUTPUT in serve.structured_outputs else None
        output = "float32 [B]" if width is None or width.rank == 1 else f"float32 [B, {width[1]}]"
        described = _describe(job, signature, names, exports, output)
        described.update({"base_id": base_id, "step": step, "dense_weights": len(module.dense_variables)})
        (extra / "serving.json").write_text(json.dumps(described, indent=2))
        _check_destination(out)  # again: it may have appeared while the model was written
        os.rename(saved, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _exported_rows(name: str, table: Any, drop_rows_below_count: Optional[int]) -> Dict[str, np.ndarray]:
    """A table's rows to serve: all, or those whose count of uses reaches ``drop_rows_below_count``."""
    if drop_rows_below_count is None:
        return table.export()
    if not table.config.bounded:
        raise ExportError(
            f"export: --drop-rows-below-count needs per-row counts, which table {name!r} does not "
            f"keep; train it with admit / evict rules (xdl_ec.Admit, xdl_ec.Evict, or the flags "
            f"--admit-min-count, --evict-ttl-steps, --evict-ttl-seconds, --max-rows)"
        )
    rows = table.export(with_words=True)
    kept = rows["uses"] >= drop_rows_below_count
    return {field: rows[field][kept] for field in ("keys", "values", "state")}


def _check_destination(out: Path) -> None:
    if out.is_dir():
        if any(out.iterdir()):
            raise ExportError(
                f"export: {out} exists and is not empty; pass a new directory (an export never overwrites one)"
            )
    elif out.exists():
        raise ExportError(f"export: {out} exists and is not a directory; pass a new directory")


def _input_names(features: Any, signature: Tuple[Any, ...]) -> Dict[str, List[str]]:
    """{feature: its signature inputs' names}, checked: valid TF names, none used twice."""
    kinds = {name: kind for name, kind, _ in signature[1]}
    names: Dict[str, List[str]] = {}
    used = {"dense": "the dense input"} if signature[0] is not None else {}
    used.update({name: f"side input {name!r}" for name, _, _ in signature_extras(signature)[1]})
    for f in features:
        inputs = (
            [f"{f.name}_values", f"{f.name}_row_splits"]
            if kinds[f.name] == RAGGED
            else [f.name, f"{f.name}_lengths"]
            if kinds[f.name] == SEQUENCE
            else [f.name]
        )
        for name in inputs:
            if not _INPUT_NAME.fullmatch(name):
                raise ExportError(
                    f"export: feature {f.name!r} gives the input name {name!r}, which a TensorFlow "
                    f"signature would rename (ASCII letters, digits and '_', starting with a letter); "
                    f"rename the feature"
                )
            if name in used:
                raise ExportError(
                    f"export: feature {f.name!r} and {used[name]} both give the input {name!r}; rename one of them"
                )
            used[name] = f"feature {f.name!r}"
        names[f.name] = inputs
    return names


def _serving_module(
    job: JobSpec,
    dense: Any,
    signature: Tuple[Any, ...],
    exports: Dict[str, Dict[str, np.ndarray]],
    base_id: str,
    step: int,
) -> Tuple[Any, Any]:
    """(the tf.Module to save, the concrete serving function)."""
    import tensorflow as tf

    dense_model = dense.model
    computes_loss, classes = dense.computes_loss, dense.classes
    dense_width = signature[0]
    heads, side = signature_extras(signature)
    kinds = {name: (kind, width) for name, kind, width in signature[1]}
    module = tf.Module()
    module.base_id = tf.Variable(base_id, trainable=False, name="base_id")
    module.sequence = tf.Variable(0, dtype=tf.int64, trainable=False, name="sequence")  # deltas applied
    module.step = tf.Variable(step, dtype=tf.int64, trainable=False, name="step")
    module.matrices, module.row_of, module.used, module.free = {}, {}, {}, {}
    for i, t in enumerate(job.tables):
        keys, values = exports[t.name]["keys"], exports[t.name]["values"]
        # row 0: the zeros unknown keys read (the hash table's default); the trained rows from 1
        module.matrices[t.name] = tf.Variable(
            np.concatenate([np.zeros((1, t.dim), np.float32), values.astype(np.float32).reshape(-1, t.dim)]),
            trainable=False,
            shape=tf.TensorShape([None, t.dim]),
            name=f"embedding_{i}",
        )
        table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default_value=0, name=f"rows_of_{i}")
        if len(keys):
            table.insert(tf.constant(keys, tf.int64), tf.range(1, len(keys) + 1, dtype=tf.int64))
        module.row_of[t.name] = table
        module.used[t.name] = tf.Variable(len(keys) + 1, dtype=tf.int64, trainable=False, name=f"used_{i}")
        module.free[t.name] = tf.Variable(  # rows of removed keys, taken again by new keys first
            np.zeros([0], np.int64), trainable=False, shape=tf.TensorShape([None]), name=f"free_{i}"
        )

    def rows(f: Feature, ids: Any) -> Any:
        keys = tf_keys(f, ids)
        index = tf.ensure_shape(module.row_of[f.table.name].lookup(keys), keys.shape)  # a lookup's shape is unknown
        return tf.gather(module.matrices[f.table.name], index)

    def serve(**inputs: Any) -> Dict[str, Any]:
        size = None
        checks = []
        embedded = {}
        for f in job.features:
            kind, width = kinds[f.name]
            if kind == RAGGED:
                values, splits = inputs[f"{f.name}_values"], inputs[f"{f.name}_row_splits"]
                checks += _splits_checks(f.name, values, splits)
                with tf.control_dependencies(checks):
                    embedded[f.name] = _pool(rows(f, values), splits, f.combiner)
                batch = tf.shape(splits, out_type=tf.int64)[0] - 1
            elif kind == SEQUENCE:
                ids, lengths = inputs[f.name], inputs[f"{f.name}_lengths"]
                batch = tf.shape(ids, out_type=tf.int64)[0]
                steps = tf.shape(ids, out_type=tf.int64)[1]
                what = f"{f.name}_lengths must be B values in [0, T]"
                checks += [
                    tf.debugging.assert_equal(tf.shape(lengths, out_type=tf.int64)[0], batch, message=what),
                    tf.debugging.assert_non_negative(lengths, message=what),
                    tf.debugging.assert_less_equal(lengths, steps, message=what),
                ]
                inside = tf.range(steps)[None, :] < lengths[:, None]
                with tf.control_dependencies(checks):
                    embedded[f.name] = rows(f, ids) * tf.cast(inside, tf.float32)[:, :, None]
                embedded[f.mask_name] = inside
            else:
                ids = inputs[f.name]
                batch = tf.shape(ids, out_type=tf.int64)[0]
                widths = width if isinstance(width, tuple) else (width,)
                if kind == SINGLE:
                    embedded[f.name] = rows(f, ids)
                elif f.combiner is None:
                    embedded[f.name] = rows(f, ids)  # [B, n, dim] (or [B, T, n, dim])
                else:
                    # a [B, n] list is the ragged case with rows of n ids ([B, T, n]: B * T rows)
                    outer = batch * int(np.prod(widths[:-1], dtype=np.int64))
                    splits = tf.range(outer + 1, dtype=tf.int64) * widths[-1]
                    pooled = _pool(rows(f, tf.reshape(ids, [-1])), splits, f.combiner)
                    embedded[f.name] = (
                        tf.reshape(pooled, [-1, *widths[:-1], f.table.dim]) if len(widths) > 1 else pooled
                    )
            size, checks = _same_batch(size, batch, f.name, checks)
        dense = None
        if dense_width is not None:
            dense = inputs["dense"]
            size, checks = _same_batch(size, tf.shape(dense, out_type=tf.int64)[0], "dense", checks)
        extra = {}
        for name, _, _ in side:
            extra[name] = inputs[name]
            size, checks = _same_batch(size, tf.shape(extra[name], out_type=tf.int64)[0], name, checks)
        with tf.control_dependencies(checks):
            logits = dense_model(embedded, model_arguments(embedded, dense, extra, bool(side)), training=False)
        if heads is None:
            return {OUTPUT: probabilities_of(logits, computes_loss, classes)}
        return {head: tf.sigmoid(tf.reshape(logits[head], [-1])) for head in heads}

    specs = {}
    for f in job.features:
        kind, width = kinds[f.name]
        if kind == RAGGED:
            for name in (f"{f.name}_values", f"{f.name}_row_splits"):
                specs[name] = tf.TensorSpec([None], tf.int64, name=name)
        elif kind == SEQUENCE:
            specs[f.name] = tf.TensorSpec([None, None], tf.int64, name=f.name)
            specs[f"{f.name}_lengths"] = tf.TensorSpec([None], tf.int64, name=f"{f.name}_lengths")
        else:
            shape = [None] if kind == SINGLE else [None, *(width if isinstance(width, tuple) else (width,))]
            specs[f.name] = tf.TensorSpec(shape, tf.int64, name=f.name)
    if dense_width is not None:
        specs["dense"] = tf.TensorSpec([None, dense_width], tf.float32, name="dense")
    for name, dtype, shape in side:
        specs[name] = tf.TensorSpec([None, *shape], dtype, name=name)
    concrete = tf.function(serve).get_concrete_function(**specs)
    # the dense weights in DenseModel.variables order (a delta's dense files), and any other variable the traced call
    # reads, tracked so they are saved; not the model itself, whose own serving endpoints would be traced with it
    module.dense_variables = [_tf_variable(v) for v in dense.variables]
    known = {id(v) for v in [*module.dense_variables, *module.matrices.values()]}
    module.other_variables = [v for v in concrete.variables if id(v) not in known]
    module.apply_delta = tf.function(
        lambda directory: _apply_delta(module, job, directory), input_signature=[tf.TensorSpec([], tf.string)]
    )
    return module, concrete


def _tf_variable(variable: Any) -> Any:
    """The tf.Variable a Keras 3 variable holds (``.value``; the traced call captures it, not the wrapper)."""
    import tensorflow as tf

    return variable if isinstance(variable, tf.Variable) else variable.value


def _apply_delta(module: Any, job: JobSpec, directory: Any) -> Any:
    """The graph of ``apply_delta``: reads and checks every file of the delta first, then changes the tables and
    weights (see the module docstring); returns the sequence number applied."""
    import tensorflow as tf

    def read(name: str, dtype: Any) -> Any:
        return tf.io.parse_tensor(tf.io.read_file(tf.strings.join([directory, name], separator="/")), dtype)

    head = tf.ensure_shape(read(serving_delta.HEAD, tf.string), [3])
    sequence = tf.strings.to_number(head[1], tf.int64)
    checks = [
        tf.debugging.Assert(
            tf.equal(head[0], module.base_id),
            ["apply_delta: this delta is for another base (its base id, then this model's):", head[0], module.base_id],
        ),
        tf.debugging.Assert(
            tf.equal(sequence, module.sequence + 1),
            [
                "apply_delta: deltas apply in sequence: this one is number",
                sequence,
                "but the model expects number",
                module.sequence + 1,
            ],
        ),
    ]
    parts = []
    for i, t in enumerate(job.tables):
        keys = tf.ensure_shape(read(serving_delta.table_file(i, "keys"), tf.int64), [None])
        rows = tf.ensure_shape(read(serving_delta.table_file(i, "rows"), tf.float32), [None, t.dim])
        removed = tf.ensure_shape(read(serving_delta.table_file(i, "removed"), tf.int64), [None])
        reset = tf.ensure_shape(read(serving_delta.table_file(i, "reset"), tf.bool), [])
        checks.append(
            tf.debugging.assert_equal(
                tf.shape(keys)[0], tf.shape(rows)[0], message=f"apply_delta: table {t.name!r}: keys and rows differ"
            )
        )
        parts.append((t.name, keys, rows, removed, reset))
    weights = [
        tf.ensure_shape(read(serving_delta.dense_file(j), v.dtype), v.shape)
        for j, v in enumerate(module.dense_variables)
    ]
    with tf.control_dependencies(checks + [sequence] + [x for part in parts for x in part[1:]] + weights):
        for name, keys, rows, removed, reset in parts:
            _apply_rows(module, name, keys, rows, removed, reset)
        for v, w in zip(module.dense_variables, weights):
            v.assign(w)
        module.step.assign(tf.strings.to_number(head[2], tf.int64))
        module.sequence.assign(sequence)
    return tf.identity(module.sequence)


def _apply_rows(module: Any, name: str, keys: Any, rows: Any, removed: Any, reset: Any) -> None:
    """One table's part of a delta: with ``reset`` every key leaves first (``keys`` are then the whole table); removed
    keys leave (their rows join the free list), then each key's row is written, a new key's into a free row or a
    new one past the rows in use (the matrix doubles when full)."""
    import tensorflow as tf

    table, matrix = module.row_of[name], module.matrices[name]
    used, free = module.used[name], module.free[name]
    if reset:  # O(table), after a failure only: the rows are written again from row 1
        table.remove(table.export()[0])
        free.assign(tf.zeros([0], tf.int64))
        used.assign(1)
    gone = tf.ensure_shape(table.lookup(removed), [None])
    with tf.control_dependencies([gone]):
        table.remove(removed)
    free.assign(tf.concat([free, tf.boolean_mask(gone, gone > 0)], 0))
    index = tf.ensure_shape(table.lookup(keys), [None])
    new = tf.where(tf.equal(index, 0))
    fresh_count = tf.shape(new, out_type=tf.int64)[0]
    free_count = tf.shape(free, out_type=tf.int64)[0]
    reused = tf.minimum(fresh_count, free_count)
    rows_given = tf.concat([free.value()[free_count - reused :], used + tf.range(fresh_count - reused)], 0)
    free.assign(free.value()[: free_count - reused])
    used.assign_add(fresh_count - reused)
    capacity = tf.shape(matrix, out_type=tf.int64)[0]
    if used > capacity:  # grows by doubling: a delta's cost stays its rows, amortised
        grow = tf.maximum(capacity, used - capacity)
        matrix.assign(tf.concat([matrix.value(), tf.zeros(tf.stack([grow, tf.shape(rows, out_type=tf.int64)[1]]))], 0))
    index = tf.tensor_scatter_nd_update(index, new, rows_given)
    table.insert(tf.gather_nd(keys, new), rows_given)
    matrix.scatter_update(tf.IndexedSlices(rows, index))


def _pool(rows: Any, splits: Any, combiner: Optional[str]) -> Any:
    """[B, dim]: per example the sum of its rows in position order (unsorted_segment_sum's CPU kernel adds each
    input row into its segment in input order, as the C++ gather does), divided by the combiner's divisor."""
    import tensorflow as tf

    batch = tf.shape(splits)[0] - 1
    segments = tf.repeat(tf.range(batch, dtype=tf.int64), splits[1:] - splits[:-1])
    summed = tf.math.unsorted_segment_sum(rows, segments, batch)
    if combiner == "sum":
        return summed
    counts = tf.cast(splits[1:] - splits[:-1], tf.float32)
    divisor = counts if combiner == "mean" else tf.sqrt(counts)
    divisor = tf.where(counts > 0, divisor, tf.ones_like(divisor))  # an empty row stays zeros
    return summed / divisor[:, None]


def _splits_checks(name: str, values: Any, splits: Any) -> List[Any]:
    import tensorflow as tf

    what = f"{name}_row_splits must be B + 1 non-decreasing offsets from 0 to len({name}_values)"
    return [
        tf.debugging.assert_greater_equal(tf.size(splits), 1, message=what),
        tf.debugging.assert_equal(splits[:1], tf.zeros([1], tf.int64), message=what),
        tf.debugging.assert_equal(splits[-1:], tf.reshape(tf.size(values, out_type=tf.int64), [1]), message=what),
        tf.debugging.assert_non_negative(splits[1:] - splits[:-1], message=what),
    ]


def _same_batch(size: Any, batch: Any, name: str, checks: List[Any]) -> Tuple[Any, List[Any]]:
    import tensorflow as tf

    if size is None:
        return batch, checks
    return size, checks + [
        tf.debugging.assert_equal(
            batch,
            size,
            message=f"input {name} holds another number of examples than the first input; every input "
            f"must hold the same B examples",
        )
    ]


def _describe(
    job: JobSpec,
    signature: Tuple[Any, ...],
    names: Dict[str, List[str]],
    exports: Dict[str, Dict[str, np.ndarray]],
    output: str = "float32 [B]",
) -> Dict[str, Any]:
    """What ``assets.extra/serving.json`` holds: the signature's inputs and output, the features and tables."""
    kinds = {name: (kind, width) for name, kind, width in signature[1]}
    inputs: Dict[str, str] = {}
    for f in job.features:
        kind, width = kinds[f.name]
        if kind == RAGGED:
            inputs.update({names[f.name][0]: "int64 [nnz]", names[f.name][1]: "int64 [B + 1]"})
        elif kind == SEQUENCE:
            inputs.update({names[f.name][0]: "int64 [B, T]", names[f.name][1]: "int64 [B]"})
        else:
            widths = width if isinstance(width, tuple) else (width,)
            inputs[f.name] = "int64 [B]" if kind == SINGLE else f"int64 [B, {', '.join(map(str, widths))}]"
    if signature[0] is not None:
        inputs["dense"] = f"float32 [B, {signature[0]}]"
    heads, side = signature_extras(signature)
    for name, dtype, shape in side:
        inputs[name] = f"{dtype} [{', '.join(['B'] + ['?' if d is None else str(d) for d in shape])}]"
    outputs = {OUTPUT: output} if heads is None else {head: "float32 [B]" for head in heads}
    return {
        "signature": SIGNATURE,
        "inputs": inputs,
        "outputs": outputs,
        "features": job.describe()["features"],
        "tables": [
            {
                "name": t.name,
                "dim": t.dim,
                "rows": int(len(exports[t.name]["keys"])),
                "unknown_ids": "read a row of zeros",
            }
            for t in job.tables
        ],
    }
