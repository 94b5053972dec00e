"""XdlModel: the model function of a script ported from XDL, run as a job's Keras model, and the layout that maps
the script's batches onto the job's.

An XDL script builds its model in one function of the reader's batch: ``xdl_ec.embedding(name, batch[feature],
...)`` per sparse feature, dense layers over the embeddings and the dense inputs, and the loss. :func:`trace` runs
that function once on (zeros shaped like) the reader's first batch to find its tables and features and returns
the :class:`Layout`; :class:`XdlModel` runs the same function inside the job's model, where

- ``batch[feature]`` of a sparse feature stands for its ids (:class:`SparseIds`) and ``xdl_ec.embedding`` of it
  returns the job's embedded tensor of that feature (the rows were pulled before the model ran);
- ``xdl_ec.layers.dense`` creates its Keras layer when the model is built and reuses it, by call order, on every
  later call, so the layers keep their variables;
- ``batch['label']`` stands for the labels (:class:`Labels`): the only thing to do with them is
  ``xdl_ec.losses.sigmoid_cross_entropy(labels, logits)``, which marks the logits the model returns (the job
  computes that same loss, the mean sigmoid cross-entropy, from them).

The stand-ins refuse to become tensors, so a model function that does anything else with raw ids or labels gets
an :class:`XdlPortError` saying why, instead of a silently different model.
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from xdl_ec.model.dense_model import ModelError
from xdl_ec.model.feature_batch import InputError

SINGLE, FIXED, RAGGED = "single", "fixed", "ragged"


class XdlPortError(ModelError):
    """A ported XDL script does something the port does not support (the message says what to do instead)."""


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
for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift",
              "rshift"):
    setattr(StandIn, f"__{_name}__", StandIn._refuse)
    setattr(StandIn, f"__r{_name}__", StandIn._refuse)
for _name in ("neg", "pos", "abs", "invert", "lt", "le", "gt", "ge", "getitem", "iter", "array"):
    setattr(StandIn, f"__{_name}__", StandIn._refuse)


def _refuse_conversion(value: StandIn, dtype: Any = None, name: Any = None, as_ref: bool = False) -> Any:
    raise value._refused()


tf.register_tensor_conversion_function(StandIn, _refuse_conversion)


class SparseIds(StandIn):
    """``batch[key]`` of a sparse feature: ``kind`` single / fixed (``width`` ids each) / ragged."""

    def __init__(self, key: str, kind: str, width: int) -> None:
        self.key, self.kind, self.width = key, kind, width
        self.what = f"batch[{key!r}] (a sparse feature's ids)"
        self.use = ("the job looks a feature's ids up before the model runs, so pass the entry as is to "
                    "xdl_ec.embedding; transform ids in the reader instead")


class Labels(StandIn):
    what = "batch['label']"
    use = ("the job feeds the labels to its loss itself; pass them as is to xdl_ec.losses.sigmoid_cross_entropy "
           "(the only loss the port supports)")


class Loss(StandIn):
    """The result of ``xdl_ec.losses.sigmoid_cross_entropy``: what the model function returns (first)."""

    what = "the loss of xdl_ec.losses.sigmoid_cross_entropy"
    use = ("the job computes the mean sigmoid cross-entropy of its logits itself, so the model function must "
           "return that loss unchanged (first, if it returns several values); extra loss terms are not supported")

    def __init__(self, logits: Any) -> None:
        self.logits = logits


class XdlBatch(dict):
    """The batch the model function reads: a dict whose missing entries say which ones there are."""

    def __missing__(self, key: Any) -> Any:
        raise KeyError(f"the batch has no entry {key!r}; the reader's batches have {sorted(self)}")


# ---- what the trace found -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EmbeddingSpec:
    """One ``xdl_ec.embedding`` call as the model function made it (initializer and optimizer resolved)."""

    table: str
    dim: int
    initializer: Any
    optimizer: Any
    feature_dim: int
    vtype: str
    combiner: Optional[str]  # "sum", "mean", "sqrtn" or None
    seed: int

    def same_table(self, other: "EmbeddingSpec") -> bool:
        return (self.dim, self.initializer, self.optimizer, self.feature_dim, self.vtype, self.seed) == \
            (other.dim, other.initializer, other.optimizer, other.feature_dim, other.vtype, other.seed)


@dataclasses.dataclass(frozen=True)
class SparseEntry:
    """A sparse batch entry, the job feature of the same name: its ids' kind and width, and its lookup."""

    key: str
    kind: str
    width: int
    lookup: EmbeddingSpec

    def embedded_shape(self) -> Tuple[int, ...]:
        """One example's embedded shape (the job's, see dense_model.embedded_shapes)."""
        if self.kind == FIXED and self.lookup.combiner is None:
            return (self.width, self.lookup.dim)
        return (self.lookup.dim,)


@dataclasses.dataclass(frozen=True)
class Layout:
    """The model function and its batches: sparse entries (in first-lookup order) and dense entries with their
    widths (in the reader's order; the job's ``dense`` is their concatenation)."""

    function: Callable[[Mapping[str, Any]], Any]
    sparse: Tuple[SparseEntry, ...]
    dense: Tuple[Tuple[str, int], ...]

    @property
    def keys(self) -> List[str]:
        return ["label", *(e.key for e in self.sparse), *(k for k, _ in self.dense)]

    def model_batch(self, dense: Any) -> XdlBatch:
        """The batch the model function reads inside the job's model (``dense`` as the job's: [B, D] or None);
        its sparse entries stand for the features whose embedded tensors the model was called with."""
        batch = XdlBatch(label=Labels())
        for entry in self.sparse:
            batch[entry.key] = SparseIds(entry.key, entry.kind, entry.width)
        start = 0
        for key, width in self.dense:
            batch[key] = dense if len(self.dense) == 1 else dense[:, start:start + width]
            start += width
        return batch

    def job_batch(self, batch: Any, where: str) -> Dict[str, Any]:
        """The job's batch of one reader batch: sparse entries as they are, dense ones concatenated."""
        if not isinstance(batch, Mapping):
            raise InputError(f"{where}: the reader must yield dict batches, got {type(batch).__name__}")
        if set(batch) != set(self.keys):
            raise InputError(f"{where}: the batch's entries {sorted(batch)} differ from the reader's first "
                             f"batch's {sorted(self.keys)} (which the model was traced on)")
        out = {"label": batch["label"]}
        for entry in self.sparse:
            out[entry.key] = batch[entry.key]
            if entry.lookup.vtype == "index":
                _check_index_range(batch[entry.key], entry, where)
        parts = []
        for key, width in self.dense:
            value = _numpy(batch[key])
            if value.ndim != 2 or value.dtype.kind != "f" or value.shape[1] != width:
                raise InputError(f"{where}: dense entry {key!r} must be float [B, {width}] like the first batch's, "
                                 f"got {value.dtype} {value.shape}")
            parts.append(value)
        if parts:
            out["dense"] = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        return out


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return np.asarray(value.numpy())
    return np.asarray(value)


def _check_index_range(value: Any, entry: SparseEntry, where: str) -> None:
    """vtype='index' (XDL's array-indexed tables): ids must lie in [0, feature_dim)."""
    if isinstance(value, tuple):
        value = value[0]
    elif isinstance(value, tf.RaggedTensor):
        value = value.flat_values
    ids = _numpy(value)
    limit = entry.lookup.feature_dim
    if ids.size and (ids.min() < 0 or ids.max() >= limit):
        raise InputError(f"{where}: feature {entry.key!r}: table {entry.lookup.table!r} has vtype='index', so its "
                         f"ids must lie in [0, feature_dim={limit}), got ids from {ids.min()} to {ids.max()}")


def classify(key: str, value: Any) -> Tuple[str, int]:
    """(kind, width) of one reader batch entry: sparse ids (integers: single [B], fixed [B, n], ragged) or
    dense floats [B, D] ("dense", D)."""
    if isinstance(value, tf.RaggedTensor) or isinstance(value, tuple):
        return RAGGED, 0
    if isinstance(value, tf.SparseTensor):
        raise XdlPortError(f"batch[{key!r}]: a tf.SparseTensor; give variable-length ids as a (values, row_splits) "
                           f"pair of numpy arrays or a tf.RaggedTensor")
    array = _numpy(value)
    if array.dtype.kind in "iu":
        if array.ndim == 1:
            return SINGLE, 1
        if array.ndim == 2:
            return FIXED, int(array.shape[1])
    elif array.dtype.kind == "f" and array.ndim == 2:
        return "dense", int(array.shape[1])
    raise XdlPortError(f"batch[{key!r}]: expected integer ids [B] / [B, n] / variable-length, or float dense values "
                       f"[B, D], got {array.dtype} {array.shape}")


# ---- one run of the model function ---------------------------------------------------------------------------
_active: contextvars.ContextVar = contextvars.ContextVar("xdl_ec_model_pass", default=None)


def current() -> Optional["ModelPass"]:
    """The model pass running now (in this thread), if any."""
    return _active.get()


def active(caller: str) -> "ModelPass":
    """The model pass running now; outside one, an XdlPortError naming ``caller``."""
    model_pass = _active.get()
    if model_pass is None:
        raise XdlPortError(f"{caller}: only inside the model function of xdl_ec.xdl_job (it stands for a part of the "
                           f"job's Keras model); in your own Keras model use tf.keras layers")
    return model_pass


class ModelPass:
    """One run of the model function: the trace (``embedded`` None: lookups are recorded and read as zeros), the
    build of an XdlModel (``create``: dense layers are made) or one of its calls (layers reused by order)."""

    def __init__(self, layout: Optional[Layout], embedded: Optional[Mapping[str, Any]], layers: List[Any],
                 create: bool) -> None:
        self.layout, self.embedded, self.layers, self.create = layout, embedded, layers, create
        self.lookups: Dict[str, EmbeddingSpec] = {}  # batch key -> lookup, in call order
        self.next_layer = 0
        self.loss: Optional[Loss] = None
        self._making_layer = False

    def run(self, function: Callable[[Mapping[str, Any]], Any], batch: XdlBatch) -> Any:
        """The logits of ``function(batch)``, whose (first) result must be this pass's Loss."""
        token = _active.set(self)
        try:
            with tf.variable_creator_scope(self._create_variable):
                out = function(batch)
        finally:
            _active.reset(token)
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        if self.loss is None or first is not self.loss:
            raise XdlPortError(f"the model function must return the loss of xdl_ec.losses.sigmoid_cross_entropy("
                               f"batch['label'], logits) (first, if it returns several values), got "
                               f"{type(first).__name__}: the job computes that loss from the logits it marks")
        if self.next_layer != len(self.layers):
            raise XdlPortError(f"the model function used {self.next_layer} dense layers, {len(self.layers)} on its "
                               f"first call: it must make the same xdl_ec.layers.dense calls on every call")
        if self.layout is not None and len(self.lookups) != len(self.layout.sparse):
            raise XdlPortError(f"the model function looked up {sorted(self.lookups)}, on its first call "
                               f"{sorted(e.key for e in self.layout.sparse)}: it must make the same lookups on every "
                               f"call")
        return self.loss.logits

    def _create_variable(self, next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        if not self._making_layer:
            raise XdlPortError(f"the model function created a variable ({kwargs.get('name')!r}) outside "
                               f"xdl_ec.layers.dense: a Keras layer or tf.Variable made inside it is made anew on "
                               f"every call and never trained; use xdl_ec.layers.dense (tf.layers.dense's rename)")
        return next_creator(**kwargs)

    def embedding(self, sparse_input: Any, spec: EmbeddingSpec) -> Any:
        where = f"xdl_ec.embedding({spec.table!r})"
        if not isinstance(sparse_input, SparseIds):
            raise XdlPortError(f"{where}: sparse_input must be a sparse entry of the batch as read (batch['name']), "
                               f"got {type(sparse_input).__name__}: the job looks a feature's ids up before the "
                               f"model runs, so transform ids in the reader instead")
        key = sparse_input.key
        if self.embedded is None:
            return self._record(key, sparse_input, spec, where)
        entry = next(e for e in self.layout.sparse if e.key == key)
        if entry.lookup != spec:
            raise XdlPortError(f"{where} of batch[{key!r}]: on the first batch the model function looked it up as "
                               f"{entry.lookup}, now as {spec}: it must make the same lookups on every call")
        self.lookups[key] = spec
        return self.embedded[key]

    def _record(self, key: str, ids: SparseIds, spec: EmbeddingSpec, where: str) -> Any:
        known = self.lookups.get(key)
        if known is not None and known.table != spec.table:
            raise XdlPortError(f"{where}: batch[{key!r}] is already looked up in table {known.table!r}; the job gives "
                               f"each batch entry one table: copy the entry under another name in the reader")
        if known is not None and known != spec:
            raise XdlPortError(f"{where}: batch[{key!r}] is looked up twice with different settings ({known} and "
                               f"{spec})")
        for other in self.lookups.values():
            if other.table == spec.table and not other.same_table(spec):
                raise XdlPortError(f"{where}: the table is used with different settings ({other} and {spec}); "
                                   f"use another name for another table")
        if ids.kind == RAGGED and spec.combiner is None:
            raise XdlPortError(f"{where}: batch[{key!r}] has variable-length ids, which need a combiner ('sum', "
                               f"'mean' or 'sqrtn'), got combiner=None")
        self.lookups[key] = spec
        entry = SparseEntry(key, ids.kind, ids.width, spec)
        return tf.zeros((1, *entry.embedded_shape()))

    def dense(self, inputs: Any, units: int, activation: Any, use_bias: bool, kernel_initializer: Any,
              bias_initializer: Any, name: Optional[str]) -> Any:
        signature = (units, keras.activations.get(activation), use_bias)
        if self.create:
            self._making_layer = True
            try:
                layer = keras.layers.Dense(units, activation=activation, use_bias=use_bias,
                                           kernel_initializer=kernel_initializer or "glorot_uniform",
                                           bias_initializer=bias_initializer or "zeros", name=name)
                out = layer(inputs)
            finally:
                self._making_layer = False
            self.layers.append(layer)
            self.next_layer += 1
            return out
        if self.next_layer >= len(self.layers):
            raise XdlPortError(f"xdl_ec.layers.dense({units}): the model function makes more dense layers than on "
                               f"its first call ({len(self.layers)}): it must make the same calls every time")
        layer = self.layers[self.next_layer]
        made = (layer.units, layer.activation, layer.use_bias)
        if made != signature:
            raise XdlPortError(f"xdl_ec.layers.dense call {self.next_layer + 1}: units/activation/use_bias "
                               f"{signature} differ from the first call's {made}: the model function must make the "
                               f"same calls every time")
        self.next_layer += 1
        return layer(inputs)

    def sigmoid_cross_entropy(self, labels: Any, logits: Any) -> Loss:
        if not isinstance(labels, Labels):
            raise XdlPortError(f"xdl_ec.losses.sigmoid_cross_entropy: labels must be batch['label'] as read, got "
                               f"{type(labels).__name__}: the job feeds the labels to the loss itself")
        if self.loss is not None:
            raise XdlPortError("xdl_ec.losses.sigmoid_cross_entropy: called twice; the job trains one loss")
        shape = tuple(logits.shape)
        if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1):
            raise XdlPortError(f"xdl_ec.losses.sigmoid_cross_entropy: logits must be [B, 1] or [B], got {shape}")
        self.loss = Loss(logits)
        return self.loss


# ---- the trace and the model -----------------------------------------------------------------------------
def trace(function: Callable[[Mapping[str, Any]], Any], first_batch: Any) -> Layout:
    """The Layout of ``function`` on the reader's first batch (run on zeros of its shapes, batch size 1)."""
    if not isinstance(first_batch, Mapping):
        raise InputError(f"the reader's first batch: must be a dict of entries, got {type(first_batch).__name__}")
    if "label" not in first_batch:
        raise InputError(f"the reader's first batch has no 'label' entry (entries: {sorted(first_batch)})")
    kinds = {key: classify(key, value) for key, value in first_batch.items() if key != "label"}
    batch = XdlBatch(label=Labels())
    for key, (kind, width) in kinds.items():
        batch[key] = tf.zeros((1, width)) if kind == "dense" else SparseIds(key, kind, width)
    probe = ModelPass(None, None, [], create=True)
    probe.run(function, batch)
    unread = [key for key, (kind, _) in kinds.items() if kind != "dense" and key not in probe.lookups]
    if unread:
        raise XdlPortError(f"batch entries {unread} hold integer ids that no xdl_ec.embedding reads: drop them from "
                           f"the reader, or give dense values as floats")
    sparse = tuple(SparseEntry(key, *kinds[key], spec) for key, spec in probe.lookups.items())
    dense = tuple((key, width) for key, (kind, width) in kinds.items() if kind == "dense")
    return Layout(function, sparse, dense)


class XdlModel(keras.Model):
    """The job's model of a ported XDL model function: ``model(embedded, dense)`` runs the function and returns
    the logits its loss was computed from. Its dense layers are made here, by running the function once on
    zeros (Keras takes no new layers once a model is built)."""

    def __init__(self, layout: Layout) -> None:
        super().__init__(name="xdl_model")
        self._layout = layout
        self.dense_layers: List[Any] = []
        embedded = {e.key: tf.zeros((1, *e.embedded_shape())) for e in layout.sparse}
        width = sum(w for _, w in layout.dense)
        self._run(embedded, tf.zeros((1, width)) if layout.dense else None, create=True)

    def _run(self, embedded: Mapping[str, Any], dense: Any, create: bool) -> Any:
        model_pass = ModelPass(self._layout, embedded, self.dense_layers, create)
        return model_pass.run(self._layout.function, self._layout.model_batch(dense))

    def call(self, embedded: Mapping[str, Any], dense: Any = None, training: bool = False) -> Any:
        return self._run(embedded, dense, create=False)


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
