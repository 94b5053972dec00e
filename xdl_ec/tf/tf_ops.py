"""TensorFlow ops of xdl-ec: the embedding lookup over an :class:`xdl_ec.EmbeddingTable` and its gradient.

``lookup`` runs the ``XdlEcLookup`` kernel (C++, in ``_tf_ops.so``): it deduplicates the ids, pulls each
distinct key once from the table's shard (inserting missing keys with their initial row) and gathers or
pools the rows. Its registered gradient runs ``XdlEcScatterGradient``: the incoming gradient is summed per
distinct key and applied with ONE push into the table's own sparse optimizer. The table is therefore
trained by the backward pass itself, not by a Keras/TF optimizer.

Why a ``trigger``: a gradient tape only records an op when one of its inputs is watched, and ids are
integers, so the lookup takes a zero float scalar (normally a trainable variable, see
``xdl_ec.keras.SparseEmbedding``) whose only role is to put the op on the tape. Its gradient is a zero
that depends on the table update, so the update runs whenever a ``tape.gradient`` call backpropagates
through the lookup, exactly once per such call (a persistent tape asked twice updates twice), eagerly or
inside ``tf.function`` (both ops are stateful, so they are never pruned).

Step: the optimizer step (Adam's bias correction) is ``step`` when >= 1; with ``step=0`` (the default)
the op library keeps one counter per table handle that every successful update advances (1, 2, 3, ...).
That counter is separate from ``EmbeddingTable.step``; TensorFlow checkpoints of a ``SparseEmbedding`` save and
restore it (see :mod:`xdl_ec.tf.table_trackable`), anything else that resumes passes its own global step.

Not supported: XLA (``jit_compile``; these are plain CPU kernels), and loss scaling (the table would see
the scaled gradient). Each ``tape.gradient`` reaching the lookup applies one update.
"""

from __future__ import annotations

import numbers
import os
from typing import Any, List, Optional, Sequence, Union

import tensorflow as tf

__all__ = [
    "COMBINERS",
    "TFVersionMismatchError",
    "check_tf_version",
    "gather",
    "group_gather",
    "lookup",
    "normalize_combiner",
]

COMBINERS = ("none", "sum", "mean", "sqrtn")

# The built libraries sit in the package's root, above this room. Not resolved through symlinks: a development
# stage links the sources beside them.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY = os.path.join(_PACKAGE_DIR, "_tf_ops.so")
_BUILD_VERSION_FILE = os.path.join(_PACKAGE_DIR, "_tf_build_version.txt")


class TFVersionMismatchError(ImportError):
    """The TF ops were compiled against another TensorFlow release than the one importing them."""


def _release(version: str) -> tuple[str, ...]:
    # "2.21.0", "2.21.0rc1", "2.21.1-dev" -> ("2", "21")
    return tuple(version.strip().split(".")[:2])


def check_tf_version(runtime: str, built: str) -> None:
    """Raise :class:`TFVersionMismatchError` unless ``runtime`` and ``built`` are the same TF release.

    TensorFlow keeps the custom-op ABI within a release (major.minor), not across releases, so a
    patch-level difference is accepted and a different major.minor is an error naming both versions.
    """
    if _release(runtime) != _release(built):
        raise TFVersionMismatchError(
            f"xdl_ec's TensorFlow ops were built against TensorFlow {built.strip()} but TensorFlow "
            f"{runtime.strip()} is installed; custom ops only load into the TF release they were compiled "
            f"for. Install tensorflow-cpu=={'.'.join(_release(built))}.* or rebuild xdl-ec against the "
            f"installed TensorFlow (pip install --force-reinstall --no-binary xdl-ec xdl-ec, or scripts/dev-build)."
        )


def _load_library() -> Any:
    if not os.path.exists(_BUILD_VERSION_FILE) or not os.path.exists(_LIBRARY):
        raise ImportError(
            f"xdl_ec was built without its TensorFlow ops (no {_LIBRARY}): TensorFlow was not importable "
            f"when the package was compiled. Install tensorflow-cpu, then rebuild/reinstall xdl-ec."
        )
    with open(_BUILD_VERSION_FILE, encoding="utf-8") as f:
        built = f.read().strip()
    check_tf_version(tf.__version__, built)
    return tf.load_op_library(_LIBRARY)


_ops = _load_library()


def normalize_combiner(combiner: Optional[str]) -> str:
    """Map ``None`` to ``"none"`` and check the name; ValueError lists the accepted ones."""
    if combiner is None:
        return "none"
    if not isinstance(combiner, str) or combiner not in COMBINERS:
        raise ValueError(f"combiner must be one of {COMBINERS} (or None for 'none'), got {combiner!r}")
    return combiner


def _as_int64(tensor: tf.Tensor, what: str) -> tf.Tensor:
    if tensor.dtype == tf.int64:
        return tensor
    if tensor.dtype == tf.int32:  # lossless
        return tf.cast(tensor, tf.int64)
    raise TypeError(f"{what} must be int64 (or int32) ids, got dtype {tensor.dtype.name}")


def _ids_and_splits(ids: Any, combiner: str) -> tuple[tf.Tensor, tf.Tensor]:
    """Reduce dense / ragged / sparse ids to the op's (ids, row_splits) pair."""
    if isinstance(ids, tf.SparseTensor):
        if combiner == "none":
            raise ValueError("combiner 'none' needs dense ids [batch, n]; sparse ids need 'sum', 'mean' or 'sqrtn'")
        if ids.shape.rank is not None and ids.shape.rank != 2:
            raise ValueError(f"sparse ids must be a 2-D tf.SparseTensor [batch, max_ids], got rank {ids.shape.rank}")
        # Row b pools the values whose index row is b, whatever their columns (as tf.nn.embedding_lookup_sparse
        # does): reorder to row-major, then row_splits from per-row counts over dense_shape[0] rows, so empty
        # and trailing rows pool to zeros.
        ids = tf.sparse.reorder(tf.SparseTensor(ids.indices, _as_int64(ids.values, "sparse ids"), ids.dense_shape))
        rows = ids.indices[:, 0]
        counts = tf.math.unsorted_segment_sum(tf.ones_like(rows), rows, ids.dense_shape[0])
        return ids.values, tf.concat([tf.zeros([1], tf.int64), tf.cumsum(counts)], 0)
    if isinstance(ids, tf.RaggedTensor):
        if combiner == "none":
            raise ValueError("combiner 'none' needs dense ids [batch, n]; ragged ids need 'sum', 'mean' or 'sqrtn'")
        if ids.ragged_rank != 1 or ids.shape.rank != 2:
            raise ValueError(f"ragged ids must be 2-D [batch, (n)] with one ragged dimension, got shape {ids.shape}")
        return _as_int64(ids.values, "ragged ids"), tf.cast(ids.row_splits, tf.int64)
    ids = tf.convert_to_tensor(ids)
    ids = _as_int64(ids, "ids")
    if ids.shape.rank is not None and ids.shape.rank != 2:
        raise ValueError(
            f"ids must be [batch, n] (rank 2), got shape {ids.shape}; for one id per example use ids[:, None], "
            f"for multi-hot lists a tf.RaggedTensor or tf.SparseTensor"
        )
    return ids, tf.zeros([0], tf.int64)


def lookup(
    table: Any,
    ids: Union[tf.Tensor, tf.RaggedTensor, tf.SparseTensor],
    combiner: Optional[str] = None,
    trigger: Optional[Union[tf.Tensor, tf.Variable]] = None,
    step: Union[int, tf.Tensor] = 0,
    name: Optional[str] = None,
    insert_missing: bool = True,
) -> tf.Tensor:
    """Look up ``ids`` in ``table`` (anything with ``.handle`` and ``.dim``, e.g. an EmbeddingTable).

    Dense int64 ids ``[batch, n]`` give ``[batch, n, dim]`` with ``combiner=None``/``"none"``, else
    ``[batch, dim]`` pooled by ``"sum"``, ``"mean"`` or ``"sqrtn"``; ``tf.RaggedTensor`` / ``tf.SparseTensor``
    ids ``[batch, (n)]`` need a pooling combiner (empty rows pool to zeros). ``trigger`` (a float scalar,
    normally a zero trainable variable) makes the lookup differentiable; without it the result carries no
    gradient and the table is never updated. ``step``: see the module docstring. ``insert_missing=False``
    (inference) reads keys the table lacks as zero rows without inserting them.
    """
    combiner = normalize_combiner(combiner)
    try:
        handle, dim = int(table.handle), int(table.dim)
    except AttributeError:
        raise TypeError(
            f"table must be an xdl_ec.EmbeddingTable (with .handle and .dim), got {type(table).__name__}"
        ) from None
    values, row_splits = _ids_and_splits(ids, combiner)
    integer_tensor = tf.is_tensor(step) and getattr(step, "dtype", tf.float32).is_integer
    if isinstance(step, bool) or not (isinstance(step, numbers.Integral) or integer_tensor):
        raise TypeError(f"step must be an int or an integer scalar tensor, got {step!r}")
    if isinstance(step, numbers.Integral) and step < 0:
        raise ValueError(f"step must be >= 1, or 0 for the table's automatic counter, got {step}")
    step = tf.cast(step, tf.int64)
    trigger = tf.zeros([], tf.float32) if trigger is None else tf.cast(trigger, tf.float32)
    with tf.name_scope(name or "xdl_ec_lookup"):
        embeddings, _, _ = _ops.xdl_ec_lookup(
            handle=tf.constant(handle, tf.int64),
            ids=values,
            row_splits=row_splits,
            step=step,
            trigger=trigger,
            combiner=combiner,
            dim=dim,
            insert_missing=bool(insert_missing),
        )
    return embeddings


@tf.RegisterGradient("XdlEcLookup")
def _lookup_gradient(op: tf.Operation, grad: Any, *_unused: Any) -> list:
    handle, ids, row_splits, step, trigger = op.inputs
    _, unique_keys, inverse = op.outputs
    if grad is None:  # the embeddings do not reach the target: nothing to apply
        return [None, None, None, None, tf.zeros_like(trigger)]
    grad = tf.convert_to_tensor(grad, tf.float32)  # IndexedSlices from a downstream gather -> dense
    applied = _ops.xdl_ec_scatter_gradient(
        handle=handle,
        grad=grad,
        ids=ids,
        row_splits=row_splits,
        unique_keys=unique_keys,
        inverse=inverse,
        step=step,
        combiner=op.get_attr("combiner"),
    )
    # The returned (zero) gradient is computed FROM the update's output, a data dependency: with a control
    # dependency on a zeros_like, Grappler's constant folding and dependency optimisation dropped the update under
    # Keras Adam's model.fit. applied_step >= 0, so min(applied_step, 0) is 0, which no pass can know.
    zero = tf.cast(tf.minimum(applied, tf.constant(0, applied.dtype)), trigger.dtype)
    return [None, None, None, None, tf.reshape(zero, tf.shape(trigger))]


def gather(
    rows: Any, inverse: Any, combiner: Optional[str] = None, row_splits: Any = None, name: Optional[str] = None
) -> tf.Tensor:
    """The lookup over rows fed by the caller: ``rows[U, dim]`` are the rows of a batch's unique keys (pulled from
    parameter servers) and ``inverse`` int32 gives, for every id, its row. Dense ``inverse [batch, n]`` gives
    ``[batch, n, dim]`` for combiner ``"none"`` and ``[batch, dim]`` otherwise; a rank-1 ``inverse`` with
    ``row_splits [batch + 1]`` is ragged (pooling combiners only).

    Differentiable with respect to ``rows``: the gradient is the per-unique-row summed gradient ``[U, dim]``,
    computed by the same C++ code (same float additions, same order) as the gradient of :func:`lookup`, so a
    worker pushing it updates a table exactly as the single-process path does.
    """
    combiner = normalize_combiner(combiner)
    rows = tf.convert_to_tensor(rows, tf.float32)
    inverse = tf.convert_to_tensor(inverse)
    if inverse.dtype != tf.int32:
        raise TypeError(f"inverse must be int32 row indices, got dtype {inverse.dtype.name}")
    row_splits = tf.zeros([0], tf.int64) if row_splits is None else tf.cast(row_splits, tf.int64)
    with tf.name_scope(name or "xdl_ec_gather"):
        return _ops.xdl_ec_gather(rows=rows, inverse=inverse, row_splits=row_splits, combiner=combiner)


@tf.RegisterGradient("XdlEcGather")
def _gather_gradient(op: tf.Operation, grad: Any) -> list:
    rows, inverse, row_splits = op.inputs
    grad = tf.convert_to_tensor(grad, tf.float32)
    row_grads = _ops.xdl_ec_gather_gradient(
        grad=grad, rows=rows, inverse=inverse, row_splits=row_splits, combiner=op.get_attr("combiner")
    )
    return [row_grads, None, None]


GROUP_MODES = ("single", *COMBINERS)


def group_gather(
    rows: Any, inverse: Any, widths: Sequence[int], modes: Sequence[str], name: Optional[str] = None
) -> List[tf.Tensor]:
    """:func:`gather` of every feature of a table group in ONE op (:mod:`xdl_ec.model.table_groups`): ``rows`` [U,
    dim] are the group's rows, ``inverse`` int32 the features' row indices one feature after another (feature i's
    [batch, widths[i]] row-major); feature i gives [batch, dim] for mode "single" or a pooling combiner, [batch,
    widths[i], dim] for "none". Differentiable with respect to ``rows`` by ONE scatter whose sums are
    :func:`gather`'s, feature by feature, bit for bit (a table of the group serves one feature)."""
    widths, modes = [int(w) for w in widths], list(modes)
    if not widths or len(widths) != len(modes) or any(m not in GROUP_MODES for m in modes) or min(widths) < 1:
        raise ValueError(
            f"group_gather: one width >= 1 and one mode of {GROUP_MODES} per feature, got widths {widths} and "
            f"modes {modes}"
        )
    rows = tf.convert_to_tensor(rows, tf.float32)
    inverse = tf.convert_to_tensor(inverse)
    if inverse.dtype != tf.int32:
        raise TypeError(f"inverse must be int32 row indices, got dtype {inverse.dtype.name}")
    with tf.name_scope(name or "xdl_ec_group_gather"):
        return list(_ops.xdl_ec_group_gather(rows=rows, inverse=inverse, N=len(widths), widths=widths, modes=modes))


@tf.RegisterGradient("XdlEcGroupGather")
def _group_gather_gradient(op: tf.Operation, *grads: Any) -> list:
    rows, inverse = op.inputs
    # a feature the loss does not reach has no gradient: zeros of its output's shape
    dense = [
        tf.zeros_like(out) if g is None else tf.convert_to_tensor(g, tf.float32) for g, out in zip(grads, op.outputs)
    ]
    row_grads = _ops.xdl_ec_group_gather_gradient(
        grads=dense, rows=rows, inverse=inverse, widths=op.get_attr("widths"), modes=op.get_attr("modes")
    )
    return [row_grads, None]
