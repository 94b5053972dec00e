"""XDL-shaped API, for training scripts ported from Alibaba's XDL: in this process, or as a job.

In this process: ``embedding(name, ids, initializer, emb_dim, feature_dim, combiner='sum', vtype='hash')`` creates
the table ``name`` on first use (a module-level registry by name) and reuses it afterwards, and returns the
looked-up tensor; the table is trained by its sparse optimizer inside the backward pass (see
:mod:`xdl_ec.tf.tf_ops`). The optimizers go by XDL's names and arguments (``SGD``, ``Momentum``, ``Adagrad``, ``Adam``,
``Ftrl``) and return :mod:`xdl_ec.optim` objects; the sparse optimizer of the tables created here is the
``optimizer=`` argument of ``embedding``, else the one given to ``set_sparse_optimizer`` (default
``Adagrad(0.01)``). Unlike XDL, where ``optimizer.optimize()`` comes after the model, a table's optimizer is fixed
when the table is created, so choose it first.

As a job (one process, parameter servers, Ray, any fault tolerance): ``xdl_job(train, reader, optimizer)`` turns
an XDL script's model into an :class:`xdl_ec.Job`. ``train(batch)`` is the script's model code from
``batch = reader.read()`` to the loss; it is traced once on the reader's first batch to find its tables and
features (each ``embedding`` call reads one batch entry), then runs inside the job's Keras model, where
``embedding`` returns the job's embedded tensor of that entry (see :mod:`xdl_ec.xdl.xdl_model`). How a script
ports, point by point, and what does not port (each an error saying what to do instead): docs/porting-xdl.md.

TensorFlow is imported only when ``embedding`` (or ``xdl_job``) is first called, so ``import xdl_ec`` stays light.
"""

from __future__ import annotations

import functools
import numbers
import threading
import types
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Union

from xdl_ec.sparse import init as _init
from xdl_ec.sparse import optim as _optim
from xdl_ec.xdl.matrix_initializers import Identity, MatrixInitializer, Orthogonal
from xdl_ec.xdl.scaling_initializers import ShapeScaled, UniformUnitScaling, VarianceScaling
from xdl_ec.xdl.sparse_tensor import SparseTensor, segment_lengths

if TYPE_CHECKING:
    from xdl_ec.job.job import Job

__all__ = [
    "embedding",
    "set_sparse_optimizer",
    "sparse_optimizer",
    "get_table",
    "tables",
    "clear_tables",
    "trainable_variables",
    "SGD",
    "Momentum",
    "Adagrad",
    "Adam",
    "Ftrl",
    "VTYPES",
    "VarType",
    "Zeros",
    "Ones",
    "Constant",
    "RandomUniform",
    "TruncatedNormal",
    "RandomNormal",
    "VarianceScaling",
    "UniformUnitScaling",
    "Orthogonal",
    "Identity",
    "SparseTensor",
    "layers",
    "losses",
    "tf_wrapper",
    "xdl_job",
    "dense_optimizer_config",
    "missing",
]

VTYPES = ("hash", "index")


class VarType:
    """XDL's ``VarType``: ids here are int64 keys, so both of XDL's hashed kinds are ``'hash'``."""

    Index = "index"
    Hash64 = "hash"
    Hash128 = "hash"


# ---- optimizers by XDL's names (XDL's argument names and defaults) ----------------------------------------
def SGD(learning_rate: float) -> _optim.SGD:  # noqa: N802 (XDL's name)
    """XDL's ``SGD(learning_rate)``."""
    return _optim.SGD(learning_rate=learning_rate)


def Momentum(learning_rate: float, momentum: float, use_nesterov: bool = False) -> _optim.Momentum:  # noqa: N802
    """XDL's ``Momentum(learning_rate, momentum, use_nesterov=False)``."""
    return _optim.Momentum(learning_rate=learning_rate, momentum=momentum, use_nesterov=use_nesterov)


def Adagrad(learning_rate: float, initial_accumulator_value: float = 0.1) -> _optim.Adagrad:  # noqa: N802
    """XDL's ``Adagrad(learning_rate, initial_accumulator_value=0.1)``."""
    return _optim.Adagrad(learning_rate=learning_rate, initial_accumulator_value=initial_accumulator_value)


def Adam(
    learning_rate: float = 0.001,
    beta1: float = 0.9,
    beta2: float = 0.999,  # noqa: N802
    epsilon: float = 1e-8,
) -> _optim.Adam:
    """XDL's ``Adam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8)`` (lazy: only looked-up rows move)."""
    return _optim.Adam(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon)


def Ftrl(
    learning_rate: float,
    learning_rate_power: float = -0.5,
    initial_accumulator_value: float = 0.1,  # noqa: N802
    l1_regularization_strength: float = 0.0,
    l2_regularization_strength: float = 0.0,
) -> _optim.Ftrl:
    """XDL's ``Ftrl(learning_rate, learning_rate_power, initial_accumulator_value, l1/l2_regularization_strength)``."""
    return _optim.Ftrl(
        learning_rate=learning_rate,
        learning_rate_power=learning_rate_power,
        initial_accumulator_value=initial_accumulator_value,
        l1=l1_regularization_strength,
        l2=l2_regularization_strength,
    )


# ---- row initializers by XDL's names (XDL's argument names and defaults) ---------------------------------
def _no_seed(owner: str, seed: Any) -> None:
    if seed is not None:
        raise ValueError(
            f"{owner}: seed={seed!r}: a row's initial value is drawn from (table seed, id), so seed "
            f"the table instead: xdl_ec.xdl.embedding(..., seed=N)"
        )


def Zeros() -> _init.Zeros:  # noqa: N802 (XDL's name)
    """XDL's ``Zeros()``."""
    return _init.Zeros()


def Ones() -> _init.Constant:  # noqa: N802
    """XDL's ``Ones()``."""
    return _init.Constant(1.0)


def Constant(value: float) -> _init.Constant:  # noqa: N802
    """XDL's ``Constant(value)`` (a scalar)."""
    return _init.Constant(value)


def RandomUniform(
    minval: float = 0.0,
    maxval: Optional[float] = None,  # noqa: N802
    seed: Optional[int] = None,
) -> _init.RandomUniform:
    """XDL's ``RandomUniform(minval=0.0, maxval=None)`` (``maxval`` None: 1.0, as in TensorFlow)."""
    _no_seed("RandomUniform", seed)
    return _init.RandomUniform(minval, 1.0 if maxval is None else maxval)


def RandomNormal(
    mean: float = 0.0,
    stddev: float = 1.0,  # noqa: N802
    seed: Optional[int] = None,
) -> _init.RandomNormal:
    """XDL's ``RandomNormal(mean=0.0, stddev=1.0)``."""
    _no_seed("RandomNormal", seed)
    return _init.RandomNormal(mean, stddev)


def TruncatedNormal(
    mean: float = 0.0,
    stddev: float = 1.0,  # noqa: N802
    seed: Optional[int] = None,
) -> _init.TruncatedNormal:
    """XDL's ``TruncatedNormal(mean=0.0, stddev=1.0)``."""
    _no_seed("TruncatedNormal", seed)
    return _init.TruncatedNormal(mean, stddev)


# ---- the registry of tables created by embedding() --------------------------------------------------------
class _Entry:
    """A table made by :func:`embedding`, what it was made with, and its backward-trigger variable."""

    def __init__(
        self,
        table: Any,
        initializer: _init.Initializer,
        optimizer: _optim.Optimizer,
        feature_dim: int,
        vtype: str,
        trigger: Any,
    ) -> None:
        self.table, self.initializer, self.optimizer = table, initializer, optimizer
        self.feature_dim, self.vtype, self.trigger = feature_dim, vtype, trigger


_lock = threading.Lock()
_entries: dict[str, _Entry] = {}
_default_optimizer: _optim.Optimizer = _optim.Adagrad(learning_rate=0.01)


def set_sparse_optimizer(optimizer: Union[str, _optim.Optimizer]) -> None:
    """Set the sparse optimizer of the tables that :func:`embedding` creates from now on."""
    global _default_optimizer
    _default_optimizer = _optim.get(optimizer)


def sparse_optimizer() -> _optim.Optimizer:
    """The optimizer :func:`embedding` gives new tables when its ``optimizer`` argument is None."""
    return _default_optimizer


def get_table(name: str) -> Any:
    """The EmbeddingTable :func:`embedding` created under ``name`` (KeyError naming it if none)."""
    with _lock:
        if name not in _entries:
            raise KeyError(f"no table named {name!r} was created by xdl_ec.xdl.embedding; known: {sorted(_entries)}")
        return _entries[name].table


def tables() -> dict:
    """A snapshot ``{name: EmbeddingTable}`` of the tables :func:`embedding` created."""
    with _lock:
        return {name: entry.table for name, entry in _entries.items()}


def trainable_variables() -> list:
    """The zero trigger variables of the tables (one per table): they only put lookups on the gradient tape
    and never change; listing them among a tape's sources is harmless and not required."""
    with _lock:
        return [entry.trigger for entry in _entries.values()]


def clear_tables() -> None:
    """Forget every table :func:`embedding` created (each table lives on while something else holds it)."""
    with _lock:
        _entries.clear()


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def _entry_for(
    name: str,
    initializer: Any,
    emb_dim: int,
    feature_dim: int,
    vtype: str,
    optimizer: Optional[Union[str, _optim.Optimizer]],
    seed: int,
) -> _Entry:
    import tensorflow as tf

    from xdl_ec.sparse.table import EmbeddingTable

    with _lock:
        entry = _entries.get(name)
        if entry is not None:
            table = entry.table
            if table.dim != emb_dim:
                raise ValueError(
                    f"embedding {name!r}: emb_dim {emb_dim} differs from the existing table's dim "
                    f"{table.dim}; use another name for another table"
                )
            if entry.vtype != vtype or entry.feature_dim != feature_dim:
                raise ValueError(
                    f"embedding {name!r}: vtype/feature_dim ({vtype!r}, {feature_dim}) differ from the "
                    f"existing table's ({entry.vtype!r}, {entry.feature_dim})"
                )
            if optimizer is not None and _optim.get(optimizer) != entry.optimizer:
                raise ValueError(
                    f"embedding {name!r}: the table already trains with {entry.optimizer}; a table's "
                    f"optimizer is fixed when it is created"
                )
            return entry
        chosen_init = _init.get(initializer)
        chosen_opt = _default_optimizer if optimizer is None else _optim.get(optimizer)
        table = EmbeddingTable(name, emb_dim, optimizer=chosen_opt, initializer=chosen_init, seed=seed)
        with tf.init_scope():  # an eager variable even when first called inside tf.function
            trigger = tf.Variable(0.0, trainable=True, name=f"{name}_backward_trigger")
        entry = _Entry(table, chosen_init, chosen_opt, feature_dim, vtype, trigger)
        _entries[name] = entry
        return entry


# XDL's embedding arguments that xdl_ec has no counterpart for: accepted at XDL's defaults only (why not, after)
_XDL_OPTIONS = {
    "length": (50, "it is the length of combiner='tile', which is not supported"),
    "reverse": (False, "it reverses combiner='tile', which is not supported"),
    "feature_add_probability": (1.0, "feature admission is not supported: every id gets a row"),
    "cbf": (0, "counting-bloom-filter feature admission is not supported: every id gets a row"),
    "statis_list": (None, "feature statistics are not supported"),
    "statis_decay": (0.07, "feature statistics are not supported"),
    "statis_decay_period": (100, "feature statistics are not supported"),
    "labels": (None, "it feeds feature statistics, which are not supported"),
    "save": (True, "every table is part of the model (its saves and digest)"),
}
_XDL_HINTS = ("batch_read", "device")  # XDL's parameter-server tuning: nothing to tune here, ignored


def _check_xdl_options(name: str, combiner: Any, options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - set(_XDL_OPTIONS) - set(_XDL_HINTS))
    if unknown:
        raise TypeError(f"embedding {name!r}: unexpected keyword argument(s) {unknown}")
    for option, value in options.items():
        default = _XDL_OPTIONS[option][0] if option in _XDL_OPTIONS else value
        if (value is not None) if default is None else (value != default):
            raise ValueError(
                f"embedding {name!r}: XDL's {option}={value!r} is not supported "
                f"({_XDL_OPTIONS[option][1]}); drop the argument"
            )
    if combiner == "tile":
        raise ValueError(
            f"embedding {name!r}: XDL's combiner='tile' (the first `length` rows side by side) is not "
            f"supported; use 'sum', 'mean', 'sqrtn', or None for one row per id"
        )


def embedding(
    name: str,
    sparse_input: Any,
    initializer: Any,
    emb_dim: int,
    feature_dim: int,
    combiner: Optional[str] = "sum",
    vtype: str = "hash",
    optimizer: Optional[Union[str, _optim.Optimizer]] = None,
    seed: int = 0,
    step: Any = 0,
    **xdl_options: Any,
) -> Any:
    """Look ``sparse_input`` up in the table ``name``, creating it on first use, as XDL's ``xdl.embedding``.

    ``sparse_input``: int64 ids, dense ``[batch, n]`` or ``tf.RaggedTensor``/``tf.SparseTensor`` ``[batch, (n)]``,
    or XDL's :class:`SparseTensor` ``(ids, values, segments)`` (one combined row per segment).
    ``initializer``: an :mod:`xdl_ec.init` object or name (e.g. ``xdl_ec.init.TruncatedNormal(stddev=0.001)``).
    ``emb_dim``: row width. ``feature_dim``: number of distinct features: with ``vtype='hash'`` (any int64
    key) only a hint; with ``vtype='index'`` ids must lie in ``[0, feature_dim)``, checked at run time.
    ``combiner``: ``'sum'`` (XDL's default), ``'mean'``, ``'sqrtn'`` -> ``[batch, emb_dim]``, or None /
    ``'none'`` -> ``[batch, n, emb_dim]`` (dense ids only). ``optimizer`` / ``seed``: used when the table is
    created (see the module docstring). ``step``: the optimizer step of the update (0: automatic counter).
    ``xdl_options``: XDL's other arguments, accepted at XDL's defaults (``batch_read`` and ``device`` at any value).

    Inside the model function of :func:`xdl_job` it returns the job's embedded tensor of the batch entry
    ``sparse_input`` and creates no table here (the job's tables are where the job trains).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    emb_dim = _positive_int("emb_dim", emb_dim)
    feature_dim = _positive_int("feature_dim", feature_dim)
    if vtype not in VTYPES:
        raise ValueError(f"vtype must be one of {VTYPES}, got {vtype!r}")
    _check_xdl_options(name, combiner, xdl_options)
    if isinstance(initializer, MatrixInitializer):
        from xdl_ec.xdl.xdl_model import XdlPortError  # its message starts with the script's line

        raise XdlPortError(f"embedding {name!r}: {initializer.for_a_table}")
    if isinstance(initializer, ShapeScaled):  # scaled by the table's shape, known now
        initializer = initializer.rows(feature_dim, emb_dim)
    import tensorflow as tf

    from xdl_ec.tf import tf_ops
    from xdl_ec.xdl import xdl_model

    combiner = tf_ops.normalize_combiner(combiner)
    model_pass = xdl_model.current()
    if model_pass is not None:
        if not (isinstance(step, numbers.Integral) and step == 0):
            raise xdl_model.XdlPortError(f"embedding {name!r}: step={step!r}: in a job the job counts the steps")
        spec = xdl_model.EmbeddingSpec(
            name,
            emb_dim,
            _init.get(initializer),
            None if optimizer is None else _optim.get(optimizer),
            feature_dim,
            vtype,
            None if combiner == "none" else combiner,
            seed,
        )
        return model_pass.embedding(sparse_input, spec)
    entry = _entry_for(name, initializer, emb_dim, feature_dim, vtype, optimizer, seed)
    if isinstance(sparse_input, SparseTensor):  # XDL's segments: one combined row per segment
        ids, lengths = segment_lengths(sparse_input, f"embedding {name!r}")
        sparse_input = tf.RaggedTensor.from_row_lengths(tf.constant(ids, tf.int64), tf.constant(lengths, tf.int64))
    if vtype == "index":
        values = sparse_input.values if isinstance(sparse_input, (tf.SparseTensor, tf.RaggedTensor)) else sparse_input
        values = tf.cast(tf.convert_to_tensor(values), tf.int64)
        checks = [
            tf.debugging.assert_greater_equal(
                values, tf.constant(0, tf.int64), message=f"embedding {name!r}: vtype='index' ids must be >= 0"
            ),
            tf.debugging.assert_less(
                values,
                tf.constant(feature_dim, tf.int64),
                message=f"embedding {name!r}: vtype='index' ids must be < feature_dim ({feature_dim})",
            ),
        ]
        with tf.control_dependencies(checks):
            return tf_ops.lookup(entry.table, sparse_input, combiner=combiner, trigger=entry.trigger, step=step)
    return tf_ops.lookup(entry.table, sparse_input, combiner=combiner, trigger=entry.trigger, step=step)


# ---- the job path: tf.layers / tf.losses by their XDL-port names, tf_wrapper, xdl_job ----------------------
def _dense(
    inputs: Any,
    units: int,
    activation: Any = None,
    use_bias: bool = True,
    kernel_initializer: Any = None,
    bias_initializer: Any = None,
    kernel_regularizer: Any = None,
    bias_regularizer: Any = None,
    activity_regularizer: Any = None,
    kernel_constraint: Any = None,
    bias_constraint: Any = None,
    trainable: bool = True,
    name: Optional[str] = None,
    reuse: Any = None,
) -> Any:
    """TF 1's ``tf.layers.dense`` in the model function of :func:`xdl_job`: a Keras Dense layer made on the
    model's first call and reused, by call order, on every later call; with ``reuse`` True or AUTO_REUSE (or its
    variable scope's), a layer of the same ``name`` in the same scope is that layer. ``kernel_initializer`` None:
    Glorot uniform and ``bias_initializer`` None: zeros, TF 1's defaults."""
    from xdl_ec.xdl import xdl_model

    model_pass = xdl_model.active("xdl_ec.xdl.layers.dense")
    unsupported = {
        "kernel_regularizer": kernel_regularizer,
        "bias_regularizer": bias_regularizer,
        "activity_regularizer": activity_regularizer,
        "kernel_constraint": kernel_constraint,
        "bias_constraint": bias_constraint,
    }
    given = sorted(k for k, v in unsupported.items() if v is not None)
    if given or trainable is not True:
        raise xdl_model.XdlPortError(
            f"xdl_ec.xdl.layers.dense: {', '.join(given + ([] if trainable is True else ['trainable=False']))} not "
            f"supported: the model function adds regularization terms to its loss itself, and every dense weight is "
            f"trained"
        )
    if isinstance(units, bool) or not isinstance(units, numbers.Integral) or units < 1:
        raise ValueError(f"xdl_ec.xdl.layers.dense: units must be a positive int, got {units!r}")
    return model_pass.dense(inputs, int(units), activation, use_bias, kernel_initializer, bias_initializer, name, reuse)


def _batch_normalization(
    inputs: Any,
    axis: int = -1,
    momentum: float = 0.99,
    epsilon: float = 1e-3,
    center: bool = True,
    scale: bool = True,
    beta_initializer: Any = None,
    gamma_initializer: Any = None,
    moving_mean_initializer: Any = None,
    moving_variance_initializer: Any = None,
    beta_regularizer: Any = None,
    gamma_regularizer: Any = None,
    beta_constraint: Any = None,
    gamma_constraint: Any = None,
    training: Any = False,
    trainable: bool = True,
    name: Optional[str] = None,
    reuse: Any = None,
    renorm: bool = False,
    renorm_clipping: Any = None,
    renorm_momentum: float = 0.99,
    fused: Any = None,
    virtual_batch_size: Any = None,
    adjustment: Any = None,
) -> Any:
    """TF 1's ``tf.layers.batch_normalization`` in the model function of :func:`xdl_job`: a Keras
    BatchNormalization made on the model's first call and reused, by call order, on every later call. With
    ``training=True`` the job's training step normalizes with the batch's statistics and moves the moving mean and
    variance (the model's non-trainable variables); evaluation, prediction and the exported model always use the
    moving ones. ``training=False`` (TF 1's default): the moving ones everywhere, which then never move."""
    from xdl_ec.xdl import xdl_model

    model_pass = xdl_model.active("xdl_ec.xdl.layers.batch_normalization")
    unsupported = {
        "beta_regularizer": beta_regularizer,
        "gamma_regularizer": gamma_regularizer,
        "beta_constraint": beta_constraint,
        "gamma_constraint": gamma_constraint,
        "renorm_clipping": renorm_clipping,
        "virtual_batch_size": virtual_batch_size,
        "adjustment": adjustment,
    }
    given = (
        sorted(k for k, v in unsupported.items() if v is not None)
        + (["renorm=True"] if renorm else [])
        + ([] if trainable is True else ["trainable=False"])
    )
    if given:
        raise xdl_model.XdlPortError(
            f"xdl_ec.xdl.layers.batch_normalization: {', '.join(given)} not supported: the model function adds "
            f"regularization terms to its loss itself, and gamma and beta are trained"
        )
    if not isinstance(training, bool):
        raise xdl_model.XdlPortError(
            f"xdl_ec.xdl.layers.batch_normalization: training must be a Python bool, got {type(training).__name__}: "
            f"the job's training step is the training mode, its evaluation and serving the inference mode"
        )
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise ValueError(f"xdl_ec.xdl.layers.batch_normalization: axis must be an int, got {axis!r}")
    settings = {
        "axis": int(axis),
        "momentum": float(momentum),
        "epsilon": float(epsilon),
        "center": bool(center),
        "scale": bool(scale),
    }
    initializers = {
        "beta_initializer": beta_initializer,
        "gamma_initializer": gamma_initializer,
        "moving_mean_initializer": moving_mean_initializer,
        "moving_variance_initializer": moving_variance_initializer,
    }
    return model_pass.batch_normalization(inputs, training, settings, initializers, name, reuse)


def _sigmoid_cross_entropy(
    multi_class_labels: Any,
    logits: Any,
    weights: Any = 1.0,
    label_smoothing: Any = 0,
    scope: Any = None,
    loss_collection: Any = None,
    reduction: Any = None,
) -> Any:
    """TF 1's ``tf.losses.sigmoid_cross_entropy(labels, logits)`` in the model function of :func:`xdl_job`,
    at its defaults: the mean sigmoid cross entropy, a tensor to add other terms to. Returned unchanged as the
    function's loss (first, if it returns several values), with ``batch['label']`` as the labels, the job computes
    the same loss from the logits itself and predicts their sigmoid."""
    from xdl_ec.xdl import xdl_model

    model_pass = xdl_model.active("xdl_ec.xdl.losses.sigmoid_cross_entropy")
    if (
        not (isinstance(weights, numbers.Real) and weights == 1.0)
        or label_smoothing != 0
        or reduction not in (None, "weighted_sum_by_nonzero_weights", "weighted_mean")
    ):
        raise xdl_model.XdlPortError(
            f"xdl_ec.xdl.losses.sigmoid_cross_entropy: weights={weights!r}, label_smoothing={label_smoothing!r}, "
            f"reduction={reduction!r}: only the defaults (the mean over the batch) are supported"
        )
    return model_pass.sigmoid_cross_entropy(multi_class_labels, logits)


#: ``tf.layers.dense`` -> ``xdl_ec.xdl.layers.dense``, ``tf.layers.batch_normalization`` ->
#: ``xdl_ec.xdl.layers.batch_normalization`` (TF 2 has no ``tf.layers``; Keras 3 no TF-1 layers)
layers = types.SimpleNamespace(dense=_dense, batch_normalization=_batch_normalization)


def _get_regularization_loss() -> Any:
    """TF 1's ``tf.losses.get_regularization_loss()`` in the model function of :func:`xdl_job`: the sum of its
    ``tf.compat.v1.get_variable`` regularizers' terms (TF 2 keeps no graph collections to read them from)."""
    from xdl_ec.xdl import xdl_model

    return xdl_model.regularization_loss()


#: ``tf.losses.sigmoid_cross_entropy`` -> ``xdl_ec.xdl.losses.sigmoid_cross_entropy``,
#: ``tf.losses.get_regularization_loss`` -> ``xdl_ec.xdl.losses.get_regularization_loss``
losses = types.SimpleNamespace(
    sigmoid_cross_entropy=_sigmoid_cross_entropy, get_regularization_loss=_get_regularization_loss
)


def tf_wrapper(
    is_training: bool = True, init_grad: Any = None, gpu_memory_fraction: float = 0.5, device_type: str = "cpu"
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """XDL's ``@xdl.tf_wrapper()``: the model code is TensorFlow 2 code here, so the function is kept as is
    (``gpu_memory_fraction`` and ``device_type`` are ignored: TensorFlow places the ops). ``is_training=False``
    marks XDL's eval graph: it may run only in the ``test`` function of :func:`xdl_job` (which the job evaluates,
    predicts and exports with, over the training graph's layers and variables), never in the one it trains."""
    if not isinstance(is_training, bool) or init_grad is not None:
        raise ValueError(
            f"tf_wrapper: is_training={is_training!r}, init_grad={init_grad!r} not supported: the job "
            f"trains the model function's loss from the labels' gradient (is_training=True), and "
            f"evaluates with xdl_job's test function (is_training=False)"
        )

    def keep(function: Callable[..., Any]) -> Callable[..., Any]:
        if is_training:
            return function  # the same function, so it still pickles by its name

        @functools.wraps(function)  # its name and module: it pickles by name as the module's attribute
        def eval_graph(*args: Any, **kwargs: Any) -> Any:
            from xdl_ec.xdl import xdl_model

            model_pass = xdl_model.current()
            if model_pass is not None:
                model_pass.enter_test_graph(getattr(function, "__qualname__", repr(function)))
            return function(*args, **kwargs)

        return eval_graph

    return keep


def dense_optimizer_config(optimizer: _optim.Optimizer) -> dict:
    """The Keras optimizer (a config dict) of the same name and settings as the XDL ``optimizer``."""
    o = optimizer
    if isinstance(o, _optim.SGD):
        return {"class_name": "SGD", "config": {"learning_rate": o.learning_rate}}
    if isinstance(o, _optim.Momentum):
        return {
            "class_name": "SGD",
            "config": {"learning_rate": o.learning_rate, "momentum": o.momentum, "nesterov": o.use_nesterov},
        }
    if isinstance(o, _optim.Adagrad):
        return {
            "class_name": "Adagrad",
            "config": {
                "learning_rate": o.learning_rate,
                "epsilon": o.epsilon,
                "initial_accumulator_value": o.initial_accumulator_value,
            },
        }
    if isinstance(o, _optim.Adam):
        return {
            "class_name": "Adam",
            "config": {"learning_rate": o.learning_rate, "beta_1": o.beta1, "beta_2": o.beta2, "epsilon": o.epsilon},
        }
    if isinstance(o, _optim.Ftrl):
        return {
            "class_name": "Ftrl",
            "config": {
                "learning_rate": o.learning_rate,
                "learning_rate_power": o.learning_rate_power,
                "initial_accumulator_value": o.initial_accumulator_value,
                "l1_regularization_strength": o.l1,
                "l2_regularization_strength": o.l2,
                "l2_shrinkage_regularization_strength": o.l2_shrinkage,
            },
        }
    raise TypeError(f"optimizer: no Keras counterpart for {type(o).__name__}")


def xdl_job(
    train: Callable[[Mapping[str, Any]], Any],
    reader: Callable[[int, int], Iterable[Mapping[str, Any]]],
    optimizer: Union[str, _optim.Optimizer],
    eval_reader: Optional[Callable[[], Iterable[Mapping[str, Any]]]] = None,
    test: Optional[Callable[[Mapping[str, Any]], Any]] = None,
) -> "Job":
    """The :class:`xdl_ec.Job` of a ported XDL script (see the module docstring).

    ``train(batch)``: the script's model code from ``batch = reader.read()`` to the loss it computes from the batch,
    returned first (then any other outputs; see :mod:`xdl_ec.xdl.xdl_model`). ``reader(worker,
    num_workers)``: the script's batches (a seeded, re-callable input: the first batch of ``reader(0, 1)`` is
    read here to trace ``train``). ``optimizer``: XDL's optimizer for every variable: the tables whose
    ``embedding`` call names no optimizer, and the dense layers (as :func:`dense_optimizer_config`).
    ``eval_reader()``: hold-out batches like the reader's; the run's report then has their AUC. ``test(batch)``:
    the script's eval graph (XDL's ``tf_wrapper(is_training=False)`` model, which returns its predictions first,
    or marks its logits with ``losses.sigmoid_cross_entropy`` as ``train`` does): the same lookups, layer calls in
    the same order and ``get_variable`` names the training graph made, which the job evaluates, predicts and
    exports with; None: ``train`` itself, every batch normalization on its moving statistics.

    The tables are the model function's ``embedding`` names, in first-lookup order, with their ``emb_dim``,
    initializer and ``seed``; each sparse batch entry is a :class:`xdl_ec.Feature` of the same name whose ids are
    the table's keys (``shared_ids=True``: as in XDL, two entries looked up in one table share its rows).
    """
    from xdl_ec.job.job import Job
    from xdl_ec.model.feature import Feature
    from xdl_ec.sparse.table_config import Table
    from xdl_ec.xdl import xdl_model

    for arg, value in (("train", train), ("reader", reader)):
        if not callable(value):
            raise TypeError(f"xdl_job: {arg} must be a function, got {type(value).__name__}")
    for arg, optional in (("eval_reader", eval_reader), ("test", test)):
        if optional is not None and not callable(optional):
            raise TypeError(f"xdl_job: {arg} must be a function or None, got {type(optional).__name__}")
    chosen = _optim.get(optimizer)
    layout = xdl_model.trace(train, xdl_model.first_batch(reader), test)
    tables: dict = {}
    features = []
    for entry in layout.sparse:
        spec = entry.lookup
        if spec.table not in tables:
            tables[spec.table] = Table(
                spec.table, spec.dim, optimizer=spec.optimizer or chosen, initializer=spec.initializer, seed=spec.seed
            )
        features.append(Feature(entry.key, tables[spec.table], combiner=entry.job_combiner, shared_ids=True))
    return Job(
        list(tables.values()),
        features,
        xdl_model.ModelFactory(layout),
        xdl_model.ReaderInput(reader, layout),
        dense_optimizer=dense_optimizer_config(chosen),
        eval_fn=None if eval_reader is None else xdl_model.HoldoutInput(eval_reader, layout),
    )


# ---- XDL names not ported ----------------------------------------------------------------------------------
_READER = (
    "write reader(worker, num_workers) yielding dict batches with the same entry names and pass it to "
    "xdl_ec.xdl.xdl_job"
)
_LOOP = (
    "the job runs the training loop: return xdl_ec.xdl.xdl_job(train, reader, optimizer) from the script's job() "
    "and run `xdl-ec train --script FILE.py` (or job().fit(steps=...)); its report has the loss and samples/s"
)
_NOT_PORTED = {
    **dict.fromkeys(("DataReader", "DataIO", "DataSharding", "SwiftSharding", "features", "parsers", "fs"), _READER),
    **dict.fromkeys(
        (
            "TrainSession",
            "Session",
            "LoggerHook",
            "MetricsHook",
            "MetricsPrinterHook",
            "QpsMetricsHook",
            "SyncRunHook",
            "SemiSyncRunHook",
            "BarrierHook",
            "WorkerFinishHook",
            "TraceHook",
            "TFSummaryHook",
            "Hook",
            "execute",
            "execute_loop",
        ),
        _LOOP,
    ),
    **dict.fromkeys(
        ("Saver", "CheckpointHook", "RestoreFromHook"),
        "fault tolerance is the cluster's: xdl_ec.Cluster(ft='ckpt' | 'cpr' | 'ec', ...) or xdl-ec train "
        "--ft; a finished run is saved with job.fit(save_dir=...)",
    ),
    **dict.fromkeys(
        ("auc", "batch_auc", "gauc", "batch_gauc"),
        "pass eval_reader= to xdl_ec.xdl.xdl_job: the run's report then has the hold-out AUC and log loss",
    ),
    **dict.fromkeys(
        ("current_env", "get_task_index", "get_task_num"),
        "the workers are the Cluster's: reader(worker, num_workers) is told which share to read",
    ),
    "Normal": "the row initializers are Zeros, Ones, Constant, RandomUniform, TruncatedNormal, RandomNormal, "
    "VarianceScaling (its 'normal' being TF 1's truncated one) and UniformUnitScaling",
    "RMSProp": "the optimizers are SGD, Momentum, Adagrad, Adam and Ftrl",
    **dict.fromkeys(
        (
            "merged_embedding",
            "mxnet_wrapper",
            "Estimator",
            "model_scope",
            "GlobalStepMarkHook",
            "GlobalStepFilterHook",
            "hash_filter",
            "hash_slot_filter",
            "py_func",
            "Variable",
        ),
        "xdl_ec.xdl's docstring lists what a port can use",
    ),
}


def missing(name: str, module: str = "xdl_ec.xdl") -> AttributeError:
    """The error for ``<module>.<name>`` that does not exist: for XDL's names not ported, what to do instead."""
    if name in _NOT_PORTED:
        return AttributeError(f"{module}.{name}: XDL's {name} is not ported; {_NOT_PORTED[name]}")
    return AttributeError(f"module {module!r} has no attribute {name!r}")
