"""XdlModel: the model function of a script ported from XDL, run as a job's Keras model, and the layout that maps
the script's batches onto the job's.

An XDL script builds its model in one function of the reader's batch: ``xdl_ec.xdl.embedding(name, batch[feature],
...)`` per sparse feature, dense layers over the embeddings and the dense inputs, and the loss. :func:`trace` runs
that function once on (zeros shaped like) the reader's first batch to find its tables and features and returns
the :class:`Layout`; :class:`XdlModel` runs the same function inside the job's model, where

- ``batch[feature]`` of a sparse feature stands for its ids (:class:`SparseIds`) and ``xdl_ec.xdl.embedding`` of it
  returns the job's embedded tensor of that feature (the rows were pulled before the model ran); XDL's segments of
  several per example (``SparseTensor``, one segment per id of a history) become a fixed-width feature whose rows
  are summed per segment here (see :func:`classify`);
- ``xdl_ec.xdl.layers.dense`` and ``xdl_ec.xdl.layers.batch_normalization`` create their Keras layer when the model is
  built and reuse it, by call order, on every later call, so the layers keep their variables; a batch
  normalization's moving mean and variance are the model's non-trainable variables, moved by the training call;
- ``tf.compat.v1.get_variable`` (XDL's Dice and PReLU slopes) makes a trainable variable of the model, by its full
  variable-scope name, when the model is built, and returns that same variable to every later call that names it;
- ``batch['label']`` is the labels tensor, shaped as the reader's ([B], [B, 1] or [B, C]; zeros where the job
  predicts without labels), and the model function returns the loss it computed from it (first; then any extra
  outputs: an accuracy, its predictions). Where that loss is ``xdl_ec.xdl.losses.sigmoid_cross_entropy(
  batch['label'], logits)`` unchanged, the model returns those logits and the job computes the same loss from them
  (as before this module computed losses); any other loss (a hand-written cross entropy, a softmax over [B, 2],
  auxiliary terms) makes the model a :class:`~xdl_ec.model.loss_model.LossModel`: the job trains the loss the
  function returns, and its predictions are the marked logits' sigmoid, else the first output of rank >= 1 (the
  test function's, else the model function's after the loss), taken as probabilities where ``tf.sigmoid`` or
  ``tf.nn.softmax`` made them and as logits otherwise.

The job calls its model in two modes: its training step (``training=True``) runs the model function, XDL's
``tf_wrapper(is_training=True)`` graph; evaluation, prediction and the exported model (``training=False``) run the
``test`` function if the script has one (XDL's ``is_training=False`` graph) or else the model function again, over
the same layers and variables, with every batch normalization on its moving statistics.

The stand-ins for ids refuse to become tensors, so a model function that does anything else with raw ids gets an
:class:`XdlPortError` saying why, instead of a silently different model.
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from xdl_ec.job.user_frame import calling_line
from xdl_ec.model.dense_model import ModelError
from xdl_ec.model.feature_batch import InputError
from xdl_ec.model.loss_model import LossModel
from xdl_ec.xdl.sparse_tensor import SparseTensor, segment_lengths
from xdl_ec.xdl.tf1_rnn_cells import restore_tf1_rnn_cells

SINGLE, FIXED, RAGGED, SEGMENTS = "single", "fixed", "ragged", "segments"
TRAIN, TEST = "train", "test"  # the model function's graph, the script's is_training=False graph


class XdlPortError(ModelError):
    """A ported XDL script does something the port does not support (the message says what to do instead). The
    message starts with the line of the user's script that did it (the innermost frame outside xdl_ec, TensorFlow
    and Keras), where there is one."""

    def __init__(self, message: str) -> None:
        line = calling_line()
        rewrapped = "\n" in message  # Keras re-raises an error of a call as its type with its own message around it
        super().__init__(message if line is None or rewrapped else f"{line}: {message}")


# ---- stand-ins for what the model function may only pass on -----------------------------------------------
class StandIn:
    """An object standing for a batch entry or a loss inside the model function; it is no tensor (see
    :func:`_refuse`)."""

    what = "this value"
    use = ""

    def _refused(self) -> XdlPortError:
        return XdlPortError(f"{self.what} cannot be used as a tensor in the model function: {self.use}")

    def _refuse(self, *args: Any) -> Any:
        raise self._refused()


# arithmetic, comparison, indexing, iteration: each says why instead of Python's "unsupported operand type"
for _name in (
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and",
    "or",
    "xor",
    "lshift",
    "rshift",
):
    setattr(StandIn, f"__{_name}__", StandIn._refuse)
    setattr(StandIn, f"__r{_name}__", StandIn._refuse)
for _name in ("neg", "pos", "abs", "invert", "lt", "le", "gt", "ge", "getitem", "iter", "array"):
    setattr(StandIn, f"__{_name}__", StandIn._refuse)


def _refuse_conversion(value: StandIn, dtype: Any = None, name: Any = None, as_ref: bool = False) -> Any:
    raise value._refused()


tf.register_tensor_conversion_function(StandIn, _refuse_conversion)


class SparseIds(StandIn):
    """``batch[key]`` of a sparse feature: ``kind`` single / fixed (``width`` ids each) / ragged / segments
    (``segments`` per example, ``width`` ids in all)."""

    def __init__(self, key: str, kind: str, width: int, segments: int = 0) -> None:
        self.key, self.kind, self.width, self.segments = key, kind, width, segments
        self.what = f"batch[{key!r}] (a sparse feature's ids)"
        self.use = (
            "the job looks a feature's ids up before the model runs, so pass the entry as is to "
            "xdl_ec.xdl.embedding; transform ids in the reader instead"
        )


class XdlBatch(dict):
    """The batch the model function reads: a dict whose missing entries say which ones there are."""

    def __missing__(self, key: Any) -> Any:
        raise KeyError(f"the batch has no entry {key!r}; the reader's batches have {sorted(self)}")


# ---- what the trace found -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EmbeddingSpec:
    """One ``xdl_ec.xdl.embedding`` call as the model function made it (initializer and optimizer resolved)."""

    table: str
    dim: int
    initializer: Any
    optimizer: Any
    feature_dim: int
    vtype: str
    combiner: Optional[str]  # "sum", "mean", "sqrtn" or None
    seed: int

    def same_table(self, other: "EmbeddingSpec") -> bool:
        return (self.dim, self.initializer, self.optimizer, self.feature_dim, self.vtype, self.seed) == (
            other.dim,
            other.initializer,
            other.optimizer,
            other.feature_dim,
            other.vtype,
            other.seed,
        )


@dataclasses.dataclass(frozen=True)
class SparseEntry:
    """A sparse batch entry, the job feature of the same name: its ids' kind and width, and its lookup.
    ``segments``: of kind SEGMENTS, XDL's segments per example (``width // segments`` ids each)."""

    key: str
    kind: str
    width: int
    lookup: EmbeddingSpec
    segments: int = 0

    @property
    def job_combiner(self) -> Optional[str]:
        """The job feature's combiner: segments come one row per id, summed per segment in the model."""
        return None if self.kind == SEGMENTS else self.lookup.combiner

    def embedded_shape(self) -> Tuple[int, ...]:
        """One example's embedded shape (the job's, see dense_model.embedded_shapes)."""
        if self.kind == SEGMENTS or (self.kind == FIXED and self.lookup.combiner is None):
            return (self.width, self.lookup.dim)
        return (self.lookup.dim,)

    def as_read(self, embedded: Any) -> Any:
        """What ``xdl_ec.xdl.embedding`` returns of the job's embedded tensor: of segments, each segment's rows
        combined ([B * segments, dim], XDL's), else the tensor itself."""
        if self.kind != SEGMENTS:
            return embedded
        dim, per = self.lookup.dim, self.width // self.segments
        if per == 1:
            return tf.reshape(embedded, (-1, dim))
        rows = tf.reduce_sum(tf.reshape(embedded, (-1, per, dim)), axis=1)
        if self.lookup.combiner == "mean":
            return rows / float(per)
        if self.lookup.combiner == "sqrtn":
            return rows / float(np.sqrt(per))
        return rows

    def traced(self) -> Any:
        """Zeros shaped like what ``xdl_ec.xdl.embedding`` returns for one example (the trace's batch)."""
        if self.kind == SEGMENTS:
            return tf.zeros((self.segments, self.lookup.dim))
        return tf.zeros((1, *self.embedded_shape()))


@dataclasses.dataclass(frozen=True)
class Layout:
    """The model function and its batches: sparse entries (in first-lookup order) and dense entries with their
    widths (in the reader's order; the job's ``dense`` is their concatenation); ``test``: the script's
    is_training=False graph (None: the model function serves evaluation too)."""

    function: Callable[[Mapping[str, Any]], Any]
    sparse: Tuple[SparseEntry, ...]
    dense: Tuple[Tuple[str, int], ...]
    test: Optional[Callable[[Mapping[str, Any]], Any]] = None
    label_shape: Tuple[int, ...] = ()  # one example's label as the reader gives it: (), (1,) or (C,)
    own_loss: bool = False  # the model function computes the loss the job trains (see the module docstring)

    @property
    def label_classes(self) -> Optional[int]:
        """C of labels [B, C] (C > 1), else None: the job's labels are [B]."""
        return self.label_shape[0] if self.label_shape and self.label_shape[0] > 1 else None

    @property
    def keys(self) -> List[str]:
        return ["label", *(e.key for e in self.sparse), *(k for k, _ in self.dense)]

    def model_batch(self, dense: Any, labels: Any) -> XdlBatch:
        """The batch the model function reads inside the job's model (``dense`` as the job's: [B, D] or None;
        ``labels`` the job's, [B] or [B, C]); its sparse entries stand for the features whose embedded tensors the
        model was called with."""
        batch = XdlBatch(label=tf.reshape(tf.cast(labels, tf.float32), [-1, *self.label_shape]))
        for entry in self.sparse:
            batch[entry.key] = SparseIds(entry.key, entry.kind, entry.width)
        start = 0
        for key, width in self.dense:
            batch[key] = dense if len(self.dense) == 1 else dense[:, start : start + width]
            start += width
        return batch

    def job_batch(self, batch: Any, where: str) -> Dict[str, Any]:
        """The job's batch of one reader batch: sparse entries as they are (XDL's segments as the job's ids),
        dense ones concatenated."""
        if not isinstance(batch, Mapping):
            raise InputError(f"{where}: the reader must yield dict batches, got {type(batch).__name__}")
        if set(batch) != set(self.keys):
            raise InputError(
                f"{where}: the batch's entries {sorted(batch)} differ from the reader's first "
                f"batch's {sorted(self.keys)} (which the model was traced on)"
            )
        out = {"label": batch["label"]}
        size = _label_count(batch["label"], where)
        for entry in self.sparse:
            out[entry.key] = _job_ids(batch[entry.key], entry, size, where)
            if entry.lookup.vtype == "index":
                _check_index_range(out[entry.key], entry, where)
        parts = []
        for key, width in self.dense:
            value = _numpy(batch[key])
            if value.ndim != 2 or value.dtype.kind != "f" or value.shape[1] != width:
                raise InputError(
                    f"{where}: dense entry {key!r} must be float [B, {width}] like the first batch's, "
                    f"got {value.dtype} {value.shape}"
                )
            parts.append(value)
        if parts:
            out["dense"] = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        return out


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return np.asarray(value.numpy())
    return np.asarray(value)


def _label_count(label: Any, where: str) -> int:
    """B, the examples of a batch: its label's length."""
    shape = _numpy(label).shape
    if len(shape) not in (1, 2) or shape[0] == 0:
        raise InputError(f"{where}: 'label' must be a non-empty float array [B] or [B, 1], got shape {shape}")
    return int(shape[0])


def _as_segments(value: Any) -> Optional[SparseTensor]:
    """``value`` as XDL's segments, if it is variable-length ids: a SparseTensor, or a (values, row_splits) pair
    (its rows' running ends)."""
    if isinstance(value, SparseTensor):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        ids, splits = value
        splits = _numpy(splits)
        if splits.ndim == 1 and splits.size >= 2 and splits.dtype.kind in "iu" and splits[0] == 0:
            return SparseTensor(ids, None, splits[1:])
    return None


def _segment_shape(key: str, value: SparseTensor, size: int, where: str) -> Tuple[np.ndarray, int, int]:
    """(ids, segments per example k, ids per segment n) of XDL's segments of B = ``size`` examples: B segments
    (one per example, n = 0: any lengths), or B * k segments of n ids each."""
    try:
        ids, lengths = segment_lengths(value, f"{where}: batch[{key!r}]")
    except ValueError as err:
        raise InputError(str(err)) from None
    count = lengths.size
    if count == size:
        return ids, 1, 0
    if count % size == 0 and lengths.min() == lengths.max() and lengths[0] >= 1:
        return ids, count // size, int(lengths[0])
    seen = sorted(set(lengths.tolist()))[:5]
    raise InputError(
        f"{where}: batch[{key!r}]: {count} segments for {size} examples (the label's length): XDL's "
        f"segments map onto the job as one per example, or k per example (e.g. one per id of a "
        f"history padded to k) of the same number of ids each (got lengths {seen}); pad the reader's "
        f"histories to a fixed length"
    )


def _job_ids(value: Any, entry: SparseEntry, size: int, where: str) -> Any:
    """One sparse entry of a reader batch as the job's ids."""
    segments = _as_segments(value) if (isinstance(value, SparseTensor) or entry.kind == SEGMENTS) else None
    if segments is None:
        return value
    ids, k, per = _segment_shape(entry.key, segments, size, where)
    if entry.kind == SEGMENTS:
        if (k, per) != (entry.segments, entry.width // entry.segments):
            raise InputError(
                f"{where}: batch[{entry.key!r}]: {k} segments per example of {per or 'varying'} ids "
                f"each, the first batch had {entry.segments} of {entry.width // entry.segments} (the "
                f"model was traced on it): pad the reader's histories to that length"
            )
        return ids.reshape(size, entry.width)
    if k != 1:
        raise InputError(
            f"{where}: batch[{entry.key!r}]: {k} segments per example, the first batch had one: every "
            f"batch must segment an entry alike"
        )
    return ids, np.concatenate([[0], _numpy(segments.segments).astype(np.int64)])


def _check_index_range(value: Any, entry: SparseEntry, where: str) -> None:
    """vtype='index' (XDL's array-indexed tables): ids must lie in [0, feature_dim)."""
    if isinstance(value, tuple):
        value = value[0]
    elif isinstance(value, tf.RaggedTensor):
        value = value.flat_values
    ids = _numpy(value)
    limit = entry.lookup.feature_dim
    if ids.size and (ids.min() < 0 or ids.max() >= limit):
        raise InputError(
            f"{where}: feature {entry.key!r}: table {entry.lookup.table!r} has vtype='index', so its "
            f"ids must lie in [0, feature_dim={limit}), got ids from {ids.min()} to {ids.max()}"
        )


def classify(key: str, value: Any, size: int) -> Tuple[str, int, int]:
    """(kind, width, segments) of one entry of a reader batch of ``size`` examples: sparse ids (integers: single
    [B], fixed [B, n], ragged: a ``(values, row_splits)`` pair, a RaggedTensor or XDL's ``SparseTensor`` of one
    segment per example), XDL's segments of k per example with n ids each (SEGMENTS, width k * n: a job feature of
    fixed width whose rows the model sums per segment), or dense floats [B, D] ("dense", D)."""
    where = "the reader's first batch"
    if isinstance(value, tf.SparseTensor):
        raise XdlPortError(
            f"batch[{key!r}]: a tf.SparseTensor; give variable-length ids as a (values, row_splits) "
            f"pair of numpy arrays, a tf.RaggedTensor or XDL's xdl_ec.xdl.SparseTensor(ids, values, "
            f"segments)"
        )
    if isinstance(value, tf.RaggedTensor):
        return RAGGED, 0, 0
    segments = _as_segments(value)
    if segments is not None:
        _, k, per = _segment_shape(key, segments, size, where)
        return (RAGGED, 0, 0) if k == 1 else (SEGMENTS, k * per, k)
    if isinstance(value, tuple):
        raise XdlPortError(
            f"batch[{key!r}]: variable-length ids are a (values, row_splits) pair with row_splits "
            f"[B + 1] from 0, got a tuple of {len(value)}"
        )
    array = _numpy(value)
    if array.dtype.kind in "iu":
        if array.ndim == 1:
            return SINGLE, 1, 0
        if array.ndim == 2:
            return FIXED, int(array.shape[1]), 0
    elif array.dtype.kind == "f" and array.ndim == 2:
        return "dense", int(array.shape[1]), 0
    raise XdlPortError(
        f"batch[{key!r}]: expected integer ids [B] / [B, n] / variable-length, or float dense values "
        f"[B, D], got {array.dtype} {array.shape}"
    )


# ---- one run of the model function ---------------------------------------------------------------------------
_active: contextvars.ContextVar = contextvars.ContextVar("xdl_ec_model_pass", default=None)


def current() -> Optional["ModelPass"]:
    """The model pass running now (in this thread), if any."""
    return _active.get()


def active(caller: str) -> "ModelPass":
    """The model pass running now; outside one, an XdlPortError naming ``caller``."""
    model_pass = _active.get()
    if model_pass is None:
        raise XdlPortError(
            f"{caller}: only inside the model function of xdl_ec.xdl.xdl_job (it stands for a part of the "
            f"job's Keras model); in your own Keras model use tf.keras layers"
        )
    return model_pass


class ModelParts:
    """What the model function made on its first call: its layers in call order (with what each call asked for)
    and its ``tf.compat.v1.get_variable`` variables by full name. ``owner``: the Keras layer that owns those
    variables (the XdlModel; for the trace a throwaway layer); ``layers``: a list the owner tracks."""

    def __init__(self, owner: Any, layers: List[Any]) -> None:
        self.owner, self.layers = owner, layers
        self.calls: List[Tuple[Any, ...]] = []  # per layer call, in call order: what it asked for
        self.order: List[int] = []  # per layer call: the index in ``layers`` of the layer it ran
        self.named: Dict[str, int] = {}  # a named layer's full scope name -> its index in ``layers``
        self.variables: Dict[str, Any] = {}


class ModelPass:
    """One run of the model function: the trace (``embedded`` None: lookups are recorded and read as zeros), the
    build of an XdlModel (``create``: layers and variables are made) or one of its calls (layers reused by order,
    variables by name). ``training``: the job's training call (batch normalizations on the batch's statistics,
    moving their averages); ``graph``: TRAIN (the model function) or TEST (the script's is_training=False graph)."""

    def __init__(
        self,
        layout: Optional[Layout],
        embedded: Optional[Mapping[str, Any]],
        parts: ModelParts,
        create: bool,
        training: bool = False,
        graph: str = "train",
    ) -> None:
        self.layout, self.embedded, self.parts, self.create = layout, embedded, parts, create
        self.training, self.graph = training, graph
        self.lookups: Dict[str, EmbeddingSpec] = {}  # batch key -> lookup, in call order
        self.next_layer = 0
        self.marked: List[Tuple[Any, Any, Any]] = []  # (loss, logits, labels) of each sigmoid_cross_entropy
        self.regularization: List[Any] = []  # the terms of get_variable's regularizers, in call order
        self._making = False

    def run(self, function: Callable[[Mapping[str, Any]], Any], batch: XdlBatch) -> "PassOutput":
        """What ``function(batch)`` returned: of the model function (TRAIN), its loss first, a float scalar; a
        TEST graph returns what it likes (XDL's return their predictions first)."""
        restore_tf1_rnn_cells()  # the function may name tf.compat.v1.nn.rnn_cell's cells (XDL's GRUCell)
        token = _active.set(self)
        try:
            # the getter sees every tf.compat.v1.get_variable; re-entering the current scope object restores its
            # sub-scope counts on exit, so default_name scopes get the same names on every call
            with (
                tf.variable_creator_scope(self._create_variable),
                tf.compat.v1.variable_scope(
                    tf.compat.v1.get_variable_scope(), custom_getter=self._get_variable, auxiliary_name_scope=False
                ),
            ):
                out = function(batch)
        finally:
            _active.reset(token)
        flat = _flatten(out, self.graph_name)
        first = flat[0][1]
        if self.graph == TRAIN and not (tf.is_tensor(first) and first.shape.rank == 0 and first.dtype.is_floating):
            raise XdlPortError(
                f"the {self.graph_name} must return the loss it computed from the batch first (a float scalar "
                f"tensor, e.g. tf.reduce_mean of a cross entropy), then any other outputs; it returned "
                f"{_described(first)} first"
            )
        if self.next_layer != len(self.parts.order):
            raise XdlPortError(
                f"the {self.graph_name} made {self.next_layer} layer calls, the model function's first "
                f"call {len(self.parts.order)}: it must make the same xdl_ec.xdl.layers calls on every "
                f"call"
            )
        if self.layout is not None and len(self.lookups) != len(self.layout.sparse):
            raise XdlPortError(
                f"the {self.graph_name} looked up {sorted(self.lookups)}, on its first call "
                f"{sorted(e.key for e in self.layout.sparse)}: it must make the same lookups on every "
                f"call"
            )
        logits = self.marked[0][1] if len(self.marked) == 1 else None
        # the job computes the loss itself when it is one sigmoid cross entropy of the batch's labels, unchanged
        job_loss = (
            logits is not None
            and self.marked[0][0] is first
            and self.marked[0][2] is batch["label"]
            and len(logits.shape) in (1, 2)
            and (len(logits.shape) == 1 or logits.shape[1] == 1)
        )
        return PassOutput(first, flat[1:], logits, job_loss, self.graph)

    @property
    def graph_name(self) -> str:
        return "model function" if self.graph == TRAIN else "test function (is_training=False)"

    def _create_variable(self, next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        if not self._making:
            raise XdlPortError(
                f"the model function created a variable ({kwargs.get('name')!r}) outside "
                f"xdl_ec.xdl.layers.dense, xdl_ec.xdl.layers.batch_normalization and "
                f"tf.compat.v1.get_variable: a Keras layer or tf.Variable made inside it is made anew "
                f"on every call and never trained; use those (tf.layers' renames)"
            )
        return next_creator(**kwargs)

    def _get_variable(
        self,
        getter: Callable[..., Any],
        name: str,
        shape: Any = None,
        dtype: Any = None,
        initializer: Any = None,
        regularizer: Any = None,
        reuse: Any = None,
        trainable: Any = None,
        partitioner: Any = None,
        constraint: Any = None,
        **ignored: Any,
    ) -> Any:
        """tf.compat.v1.get_variable's custom getter: the model's variable ``name`` (its full scope name), made
        when the model is built. ``reuse`` is XDL's AUTO_REUSE whatever the scope says: a name is one variable,
        in every call and in both graphs. ``ignored``: placement and collections, which mean nothing here. A
        ``regularizer``'s term is kept for ``xdl_ec.xdl.losses.get_regularization_loss()`` (TF 1's collection), which
        the function adds to its loss if it means to, as in TF 1."""
        where = f"tf.compat.v1.get_variable({name!r})"
        given = sorted(k for k, v in (("partitioner", partitioner), ("constraint", constraint)) if v is not None)
        if given or trainable is False:
            raise XdlPortError(
                f"{where}: {', '.join(given + ([] if trainable is not False else ['trainable=False']))}"
                f" not supported: the job's dense variables are whole and all trained (statistics: "
                f"xdl_ec.xdl.layers.batch_normalization)"
            )
        value = self._variable(where, name, shape, dtype, initializer)
        if regularizer is not None:
            self.regularization.append(regularizer(value))
        return value

    def _variable(self, where: str, name: str, shape: Any, dtype: Any, initializer: Any) -> Any:
        dtype = tf.as_dtype(dtype or tf.float32)
        if not dtype.is_floating:
            raise XdlPortError(f"{where}: dtype {dtype.name}: a trained variable is a float")
        value = None
        if initializer is not None and not callable(initializer):  # TF 1 takes a value for its initial value
            value = np.asarray(_numpy(initializer), dtype=dtype.as_numpy_dtype)
            shape = value.shape if shape is None else shape
        dims = tf.TensorShape(shape)
        if dims.rank is None or not dims.is_fully_defined():
            raise XdlPortError(f"{where}: shape {shape!r}: a variable's shape must be fully known")
        shape = tuple(int(d) for d in dims.as_list())
        if value is not None and value.shape != shape:
            raise XdlPortError(
                f"{where}: the initial value's shape {list(value.shape)} differs from shape {list(shape)}"
            )
        known = self.parts.variables.get(name)
        if known is not None:
            if tuple(known.shape) != shape or known.dtype != dtype.name:
                raise XdlPortError(
                    f"{where}: shape {list(shape)} ({dtype.name}) differs from the variable of that "
                    f"name, {list(known.shape)} ({known.dtype}): a name is one variable, reused on "
                    f"every call and by both graphs (XDL's AUTO_REUSE); give another variable another "
                    f"name"
                )
            return known.value
        if not self.create:
            raise XdlPortError(
                f"{where}: the {self.graph_name} asks for a variable the model function did not make "
                f"on its first call (it made {sorted(self.parts.variables)}): it must make the same "
                f"variables on every call, and the test function only reuses them"
            )
        made = (
            (lambda shape, dtype=None: value)
            if value is not None
            else (initializer or keras.initializers.GlorotUniform())
        )  # TF 1's default for float variables
        self._making = True
        try:
            variable = self.parts.owner.add_weight(
                shape=shape, initializer=made, dtype=dtype.name, trainable=True, name=name.replace("/", "__")
            )  # Keras names take no '/'
        finally:
            self._making = False
        self.parts.variables[name] = variable
        return variable.value

    def embedding(self, sparse_input: Any, spec: EmbeddingSpec) -> Any:
        where = f"xdl_ec.xdl.embedding({spec.table!r})"
        if not isinstance(sparse_input, SparseIds):
            raise XdlPortError(
                f"{where}: sparse_input must be a sparse entry of the batch as read (batch['name']), "
                f"got {type(sparse_input).__name__}: the job looks a feature's ids up before the "
                f"model runs, so transform ids in the reader instead"
            )
        key = sparse_input.key
        if self.embedded is None or self.layout is None:  # the trace: no layout yet
            return self._record(key, sparse_input, spec, where)
        entry = next(e for e in self.layout.sparse if e.key == key)
        if entry.lookup != spec:
            raise XdlPortError(
                f"{where} of batch[{key!r}]: on the first batch the model function looked it up as "
                f"{entry.lookup}, now as {spec}: it must make the same lookups on every call"
            )
        self.lookups[key] = spec
        return entry.as_read(self.embedded[key])

    def _record(self, key: str, ids: SparseIds, spec: EmbeddingSpec, where: str) -> Any:
        known = self.lookups.get(key)
        if known is not None and known.table != spec.table:
            raise XdlPortError(
                f"{where}: batch[{key!r}] is already looked up in table {known.table!r}; the job gives "
                f"each batch entry one table: copy the entry under another name in the reader"
            )
        if known is not None and known != spec:
            raise XdlPortError(
                f"{where}: batch[{key!r}] is looked up twice with different settings ({known} and {spec})"
            )
        for other in self.lookups.values():
            if other.table == spec.table and not other.same_table(spec):
                raise XdlPortError(
                    f"{where}: the table is used with different settings ({other} and {spec}); "
                    f"use another name for another table"
                )
        if ids.kind in (RAGGED, SEGMENTS) and spec.combiner is None:
            raise XdlPortError(
                f"{where}: batch[{key!r}] has variable-length ids or segments, which need a combiner "
                f"('sum', 'mean' or 'sqrtn'), got combiner=None"
            )
        self.lookups[key] = spec
        return SparseEntry(key, ids.kind, ids.width, spec, ids.segments).traced()

    def layer(
        self,
        what: str,
        call: Tuple[Any, ...],
        make: Callable[[], Any],
        inputs: Any,
        name: Optional[str] = None,
        reuse: Any = None,
        **options: Any,
    ) -> Any:
        """The output of the model function's next layer call (``what``, asking for ``call``) on ``inputs``: the
        layer ``make()`` makes when the model is built, else the one its first call made at this place. A named
        layer whose ``reuse`` (or its variable scope's) is True or AUTO_REUSE is the layer of that full scope name
        if one was made (TF 1's layers sharing variables by name: DIEN's auxiliary net on clicks and non-clicks)."""
        if self.create:
            index = self._named_layer(what, name, reuse)
            if index is None:
                self._making = True
                try:
                    layer = make()
                    out = layer(inputs, **options)
                finally:
                    self._making = False
                index = len(self.parts.layers)
                self.parts.layers.append(layer)
                if name is not None:
                    self.parts.named[self._full_name(name)] = index
            else:
                out = self.parts.layers[index](inputs, **options)
            self.parts.calls.append(call)
            self.parts.order.append(index)
            self.next_layer += 1
            return out
        count = len(self.parts.order)
        if self.next_layer >= count:
            raise XdlPortError(
                f"{what}: the {self.graph_name} makes more layer calls than the model function's first "
                f"call made ({count}): it must make the same xdl_ec.xdl.layers calls every time"
            )
        made = self.parts.calls[self.next_layer]
        if made != call:
            raise XdlPortError(
                f"layer call {self.next_layer + 1}: {what}{call[1:]} differs from the first call's "
                f"{made[0]}{made[1:]}: the {self.graph_name} must make the same xdl_ec.xdl.layers calls, "
                f"in the same order, every time"
            )
        layer = self.parts.layers[self.parts.order[self.next_layer]]
        self.next_layer += 1
        return layer(inputs, **options)

    @staticmethod
    def _full_name(name: str) -> str:
        scope = tf.compat.v1.get_variable_scope().name
        return f"{scope}/{name}" if scope else name

    def _named_layer(self, what: str, name: Optional[str], reuse: Any) -> Optional[int]:
        """The index of the layer a call named ``name`` reuses, None for a new layer."""
        scope_reuse = tf.compat.v1.get_variable_scope().reuse
        sharing = reuse is True or reuse is tf.compat.v1.AUTO_REUSE or scope_reuse in (True, tf.compat.v1.AUTO_REUSE)
        if name is None:
            if reuse is True:
                raise XdlPortError(f"{what}: reuse=True needs the layer's name: layers are shared by name")
            return None
        full = self._full_name(name)
        found = self.parts.named.get(full) if sharing else None
        if found is None and (reuse is True or (reuse is None and scope_reuse is True)):
            raise XdlPortError(
                f"{what}: reuse=True but no layer named {full!r} was made before it (made: "
                f"{sorted(self.parts.named)}): make it first, or pass reuse=tf.compat.v1.AUTO_REUSE"
            )
        return found

    def dense(
        self,
        inputs: Any,
        units: int,
        activation: Any,
        use_bias: bool,
        kernel_initializer: Any,
        bias_initializer: Any,
        name: Optional[str],
        reuse: Any = None,
    ) -> Any:
        call = ("xdl_ec.xdl.layers.dense", units, keras.activations.get(activation), use_bias, name)
        return self.layer(
            call[0],
            call,
            lambda: keras.layers.Dense(
                units,
                activation=activation,
                use_bias=use_bias,
                kernel_initializer=kernel_initializer or "glorot_uniform",
                bias_initializer=bias_initializer or "zeros",
                name=name,
            ),
            inputs,
            name,
            reuse,
        )

    def batch_normalization(
        self,
        inputs: Any,
        training: bool,
        settings: Mapping[str, Any],
        initializers: Mapping[str, Any],
        name: Optional[str],
        reuse: Any = None,
    ) -> Any:
        """TF 1's batch normalization: on the batch's statistics, moving their averages, when ``training`` and
        in the job's training call; else on the moving averages (in evaluation and serving always: a prediction
        must not depend on the rest of its batch)."""
        call = ("xdl_ec.xdl.layers.batch_normalization", *sorted(settings.items()), name)
        made = {
            key: value if value is not None else default
            for (key, value), default in zip(initializers.items(), ("zeros", "ones", "zeros", "ones"))
        }
        return self.layer(
            "xdl_ec.xdl.layers.batch_normalization",
            call,
            lambda: keras.layers.BatchNormalization(**settings, **made, name=name),
            inputs,
            name,
            reuse,
            training=bool(training) and self.training,
        )

    def sigmoid_cross_entropy(self, labels: Any, logits: Any) -> Any:
        """TF 1's mean sigmoid cross entropy, remembered: returned unchanged as the model function's loss, the job
        computes it from the logits itself (see :meth:`run`)."""
        logits, given = tf.convert_to_tensor(logits), labels
        labels = tf.convert_to_tensor(labels)
        per_example = [shape.shape[1:].num_elements() for shape in (labels, logits)]
        if None not in per_example and max(per_example[0] or 1, 1) != max(per_example[1] or 1, 1):
            raise XdlPortError(
                f"xdl_ec.xdl.losses.sigmoid_cross_entropy: labels {labels.shape.as_list()} and logits "
                f"{logits.shape.as_list()} differ in shape: TF 1's sigmoid cross entropy takes one logit per label"
            )
        loss = tf.reduce_mean(
            tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.reshape(tf.cast(labels, logits.dtype), tf.shape(logits)), logits=logits
            )
        )
        self.marked.append((loss, logits, given))
        return loss

    def enter_test_graph(self, function: str) -> None:
        """A tf_wrapper(is_training=False) function is called: only in the test function."""
        if self.graph == TRAIN:
            raise XdlPortError(
                f"{function}: a tf_wrapper(is_training=False) function (XDL's eval graph, which "
                f"computes no gradients) ran in the model function the job trains; give the function "
                f"that builds the eval graph as xdl_ec.xdl.xdl_job(..., test=...): the job evaluates, "
                f"predicts and exports with it, over the same variables"
            )


# ---- the trace and the model -----------------------------------------------------------------------------
@dataclasses.dataclass
class PassOutput:
    """What one run of a model function returned: ``first`` (the model function's loss; the test function's
    first output), the other ``outputs`` named (a dict's keys, else ``output<i>`` by position), the ``logits`` of
    its one sigmoid cross entropy (None without exactly one), and whether the job computes its loss from them."""

    first: Any
    outputs: List[Tuple[str, Any]]
    logits: Any
    job_loss: bool
    graph: str

    def predictions(self) -> Any:
        """The probabilities it predicts, None if none: the marked logits' sigmoid, else its first output of rank
        1 or 2 (a test function's first output counts), as probabilities if tf.sigmoid / tf.nn.softmax made
        them, else as logits (a sigmoid of [B] or [B, 1], a softmax of [B, C])."""
        if self.logits is not None:
            return tf.sigmoid(self.logits)
        candidates = ([self.first] if self.graph == TEST else []) + [value for _, value in self.outputs]
        for value in candidates:
            if tf.is_tensor(value) and value.dtype.is_floating and value.shape.rank in (1, 2):
                if _squashed(value) is False:
                    return tf.sigmoid(value) if value.shape.rank == 1 or value.shape[1] == 1 else tf.nn.softmax(value)
                return value
        return None

    def scalars(self) -> Dict[str, Any]:
        """The extra outputs that are scalars (an accuracy, an auxiliary loss): what the report shows."""
        return {name: v for name, v in self.outputs if tf.is_tensor(v) and v.shape.rank == 0}


# ops a probability passes through on its way out of a model function (XDL's DIN adds an epsilon to its softmax)
_PASS_THROUGH = (
    "Identity",
    "AddV2",
    "Add",
    "Reshape",
    "Squeeze",
    "ExpandDims",
    "StridedSlice",
    "ClipByValue",
    "Maximum",
    "Minimum",
    "Cast",
    "ConcatV2",
    "Pack",
)


def _squashed(value: Any) -> Optional[bool]:
    """Whether tf.sigmoid or tf.nn.softmax made ``value`` (a few pass-through ops back); None when executing
    eagerly (no graph to read: a Keras build, where only shapes matter)."""
    if tf.executing_eagerly() or not hasattr(value, "op"):
        return None
    frontier = [value.op]
    for _ in range(4):
        following: List[Any] = []
        for op in frontier:
            if op.type in ("Sigmoid", "Softmax"):
                return True
            if op.type in _PASS_THROUGH:
                following.extend(t.op for t in op.inputs)
        frontier = following
    return False


def _described(value: Any) -> str:
    if tf.is_tensor(value):
        return f"a {value.dtype.name} tensor of shape {value.shape.as_list() if value.shape.rank is not None else '?'}"
    return f"a {type(value).__name__}"


def _flatten(out: Any, graph_name: str) -> List[Tuple[str, Any]]:
    """``out`` as [(name, value)]: its first value, then the rest with tuples and lists flattened (XDL's
    ``return loss, [accuracy, aux_loss]``), dicts' values by key, others ``output<i>`` by position."""
    if isinstance(out, (tuple, list)):
        if not out:
            raise XdlPortError(f"the {graph_name} returned an empty {type(out).__name__}: return the loss first")
        items: List[Tuple[str, Any]] = [("loss", out[0])]
        rest: List[Any] = list(out[1:])
    else:
        items, rest = [("loss", out)], []

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            items.extend((str(k), v) for k, v in value.items())
        elif isinstance(value, (tuple, list)):
            for inner in value:
                walk(inner)
        else:
            items.append((f"output{len(items)}", value))

    for value in rest:
        walk(value)
    return items


def trace(
    function: Callable[[Mapping[str, Any]], Any],
    first_batch: Any,
    test: Optional[Callable[[Mapping[str, Any]], Any]] = None,
) -> Layout:
    """The Layout of ``function`` (and ``test``, its eval graph) on the reader's first batch (run on zeros of its
    shapes, batch size 1)."""
    if not isinstance(first_batch, Mapping):
        raise InputError(f"the reader's first batch: must be a dict of entries, got {type(first_batch).__name__}")
    if "label" not in first_batch:
        raise InputError(f"the reader's first batch has no 'label' entry (entries: {sorted(first_batch)})")
    size = _label_count(first_batch["label"], "the reader's first batch")
    label_shape = tuple(int(d) for d in _numpy(first_batch["label"]).shape[1:])
    kinds = {key: classify(key, value, size) for key, value in first_batch.items() if key != "label"}
    batch = XdlBatch(label=tf.zeros((1, *label_shape)))
    for key, (kind, width, segments) in kinds.items():
        batch[key] = tf.zeros((1, width)) if kind == "dense" else SparseIds(key, kind, width, segments)
    parts = ModelParts(keras.layers.Layer(name="xdl_trace"), [])
    probe = ModelPass(None, None, parts, create=True)
    found = probe.run(function, batch)
    unread = [key for key, (kind, _, _) in kinds.items() if kind != "dense" and key not in probe.lookups]
    if unread:
        raise XdlPortError(
            f"batch entries {unread} hold integer ids that no xdl_ec.xdl.embedding reads: drop them from "
            f"the reader, or give dense values as floats"
        )
    evaluated = found
    if test is not None:
        check = ModelPass(None, None, parts, create=False, graph=TEST)
        evaluated = check.run(test, batch)
        if check.lookups != probe.lookups:
            raise XdlPortError(
                f"the test function looks up {dict(check.lookups)}, the model function "
                f"{dict(probe.lookups)}: both graphs read the same entries with the same "
                f"xdl_ec.xdl.embedding calls"
            )
        if found.job_loss and evaluated.logits is None:
            raise XdlPortError(
                "the test function (is_training=False) must mark its logits with xdl_ec.xdl.losses."
                "sigmoid_cross_entropy(batch['label'], logits) as the model function does: the job predicts "
                "with them"
            )
    if not found.job_loss and evaluated.predictions() is None:
        raise XdlPortError(
            f"the {'test function' if test is not None else 'model function'} returns no predictions (a float "
            f"tensor [B], [B, 1] or [B, C]) and marks no logits with xdl_ec.xdl.losses.sigmoid_cross_entropy: the "
            f"job evaluates, predicts and serves them; return them (the test function first, as XDL's do; the "
            f"model function after its loss)"
        )
    sparse = tuple(
        SparseEntry(key, kinds[key][0], kinds[key][1], spec, kinds[key][2]) for key, spec in probe.lookups.items()
    )
    dense = tuple((key, width) for key, (kind, width, _) in kinds.items() if kind == "dense")
    return Layout(function, sparse, dense, test, label_shape, not found.job_loss)


class XdlModel(LossModel):
    """The job's model of a ported XDL model function: ``model(embedded, dense, training, labels)`` runs the
    function (``training`` False: the test function if there is one). Where the job computes the loss (the
    function's loss is one sigmoid cross entropy of the labels), it returns the logits that loss was computed
    from; else it is a LossModel (:mod:`xdl_ec.model.loss_model`): the function's loss, its predictions and its
    scalar outputs with ``labels``, its predictions without.
    Its layers and variables are made here, by running the function once on zeros (Keras takes no new layers once
    a model is built); the test function runs once too, so that what it cannot reuse is refused here."""

    def __init__(self, layout: Layout) -> None:
        super().__init__(name="xdl_model")
        self._layout = layout
        self.computes_loss = layout.own_loss
        self.label_classes = layout.label_classes
        self.made_layers: List[Any] = []
        self._parts = ModelParts(self, self.made_layers)  # the tracked list Keras put in its place
        embedded = {e.key: tf.zeros((1, *e.embedded_shape())) for e in layout.sparse}
        width = sum(w for _, w in layout.dense)
        dense = tf.zeros((1, width)) if layout.dense else None
        self._run(embedded, dense, None, training=False, create=True)  # inference mode: the moving averages stay
        if layout.test is not None:
            self._run(embedded, dense, None, training=False)

    def _run(
        self, embedded: Mapping[str, Any], dense: Any, labels: Any, training: bool, create: bool = False
    ) -> PassOutput:
        test = not training and not create and self._layout.test is not None
        model_pass = ModelPass(self._layout, embedded, self._parts, create, training, TEST if test else TRAIN)
        function = self._layout.test if test and self._layout.test is not None else self._layout.function
        if labels is None:  # prediction: the function still reads labels; zeros stand for them
            size = tf.shape(next(iter(embedded.values())) if embedded else dense)[0]
            labels = tf.zeros(tf.concat([[size], tf.constant(self._layout.label_shape[:1], tf.int32)], 0))
        return model_pass.run(function, self._layout.model_batch(dense, labels))

    def call(self, embedded: Mapping[str, Any], dense: Any = None, training: Any = False, labels: Any = None) -> Any:
        if training is not None and not isinstance(training, (bool, np.bool_)):
            raise XdlPortError(
                f"XdlModel: training must be a Python bool (the job's training call or not), got "
                f"{type(training).__name__}"
            )
        found = self._run(embedded, dense, labels, training=bool(training))
        if not self._layout.own_loss:
            return found.logits
        if labels is not None:
            return found.first, found.predictions(), found.scalars()
        return found.predictions()


# ---- the job's factories -----------------------------------------------------------------------------------
class _ScriptPart:
    """A job factory around the script's functions. It carries the script's module name, so that a Ray cluster
    ships that module with the job (the backend pickles by value the modules job functions come from)."""

    def __init__(self, source: Callable[..., Any]) -> None:
        self.__module__ = getattr(source, "__module__", None) or type(self).__module__


class ModelFactory(_ScriptPart):
    """The job's ``model_fn``: a fresh XdlModel of the layout."""

    def __init__(self, layout: Layout) -> None:
        super().__init__(layout.function)
        self.layout = layout

    def __call__(self) -> XdlModel:
        return XdlModel(self.layout)


class ReaderInput(_ScriptPart):
    """The job's ``input_fn``: the script's ``reader(worker, num_workers)`` batches as the job's."""

    def __init__(self, reader: Callable[[int, int], Any], layout: Layout) -> None:
        super().__init__(reader)
        self.reader, self.layout = reader, layout

    def __call__(self, worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        for i, batch in enumerate(self.reader(worker, num_workers), 1):
            yield self.layout.job_batch(batch, f"reader({worker}, {num_workers}) batch {i}")


class HoldoutInput(_ScriptPart):
    """The job's ``eval_fn``: the script's ``eval_reader()`` batches as the job's."""

    def __init__(self, eval_reader: Callable[[], Any], layout: Layout) -> None:
        super().__init__(eval_reader)
        self.eval_reader, self.layout = eval_reader, layout

    def __call__(self) -> Iterator[Dict[str, Any]]:
        for i, batch in enumerate(self.eval_reader(), 1):
            yield self.layout.job_batch(batch, f"eval_reader() batch {i}")


def first_batch(reader: Callable[[int, int], Any]) -> Any:
    """The first batch of ``reader(0, 1)`` (what the model function is traced on)."""
    try:
        return next(iter(reader(0, 1)))
    except StopIteration:
        raise InputError("reader(0, 1) yielded no batch: the model function is traced on the first one") from None


def regularization_loss() -> Any:
    """TF 1's ``tf.losses.get_regularization_loss()`` in the running model function: the sum of the terms of its
    ``get_variable`` regularizers so far (0.0 without any)."""
    model_pass = active("xdl_ec.xdl.losses.get_regularization_loss")
    return tf.add_n(model_pass.regularization) if model_pass.regularization else tf.constant(0.0)
