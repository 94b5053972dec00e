"""XDL-shaped functional API, for training scripts ported from Alibaba's XDL.

``embedding(name, ids, initializer, emb_dim, feature_dim, combiner='sum', vtype='hash')`` creates the
table ``name`` on first use (a module-level registry by name) and reuses it afterwards, and returns the
looked-up tensor; the table is trained by its sparse optimizer inside the backward pass (see
:mod:`xdl_ec.tf_ops`). The optimizers go by XDL's names and arguments (``SGD``, ``Momentum``,
``Adagrad``, ``Adam``, ``Ftrl``) and return :mod:`xdl_ec.optim` objects; the sparse optimizer of the
tables created here is the ``optimizer=`` argument of ``embedding``, else the one given to
``set_sparse_optimizer`` (default ``Adagrad(0.01)``). Unlike XDL, where ``optimizer.optimize()`` comes
after the model, a table's optimizer is fixed when the table is created, so choose it first.

TensorFlow is imported only when ``embedding`` is first called, so ``import xdl_ec`` stays light.
"""

from __future__ import annotations

import numbers
import threading
from typing import Any, Optional, Union

from . import init as _init
from . import optim as _optim

__all__ = ["embedding", "set_sparse_optimizer", "sparse_optimizer", "get_table", "tables", "clear_tables",
           "trainable_variables", "SGD", "Momentum", "Adagrad", "Adam", "Ftrl", "VTYPES"]

VTYPES = ("hash", "index")


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


def Adam(learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,  # noqa: N802
         epsilon: float = 1e-8) -> _optim.Adam:
    """XDL's ``Adam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8)`` (lazy: only looked-up rows move)."""
    return _optim.Adam(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon)


def Ftrl(learning_rate: float, learning_rate_power: float = -0.5, initial_accumulator_value: float = 0.1,  # noqa: N802
         l1_regularization_strength: float = 0.0, l2_regularization_strength: float = 0.0) -> _optim.Ftrl:
    """XDL's ``Ftrl(learning_rate, learning_rate_power, initial_accumulator_value, l1/l2_regularization_strength)``."""
    return _optim.Ftrl(learning_rate=learning_rate, learning_rate_power=learning_rate_power,
                       initial_accumulator_value=initial_accumulator_value, l1=l1_regularization_strength,
                       l2=l2_regularization_strength)


# ---- the registry of tables created by embedding() --------------------------------------------------------
class _Entry:
    """A table made by :func:`embedding`, what it was made with, and its backward-trigger variable."""

    def __init__(self, table: Any, initializer: _init.Initializer, optimizer: _optim.Optimizer,
                 feature_dim: int, vtype: str, trigger: Any) -> None:
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
            raise KeyError(f"no table named {name!r} was created by xdl_ec.embedding; known: {sorted(_entries)}")
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


def _entry_for(name: str, initializer: Any, emb_dim: int, feature_dim: int, vtype: str,
               optimizer: Optional[Union[str, _optim.Optimizer]], seed: int) -> _Entry:
    import tensorflow as tf

    from .table import EmbeddingTable

    with _lock:
        entry = _entries.get(name)
        if entry is not None:
            table = entry.table
            if table.dim != emb_dim:
                raise ValueError(f"embedding {name!r}: emb_dim {emb_dim} differs from the existing table's dim "
                                 f"{table.dim}; use another name for another table")
            if entry.vtype != vtype or entry.feature_dim != feature_dim:
                raise ValueError(f"embedding {name!r}: vtype/feature_dim ({vtype!r}, {feature_dim}) differ from the "
                                 f"existing table's ({entry.vtype!r}, {entry.feature_dim})")
            if optimizer is not None and _optim.get(optimizer) != entry.optimizer:
                raise ValueError(f"embedding {name!r}: the table already trains with {entry.optimizer}; a table's "
                                 f"optimizer is fixed when it is created")
            return entry
        chosen_init = _init.get(initializer)
        chosen_opt = _default_optimizer if optimizer is None else _optim.get(optimizer)
        table = EmbeddingTable(name, emb_dim, optimizer=chosen_opt, initializer=chosen_init, seed=seed)
        with tf.init_scope():  # an eager variable even when first called inside tf.function
            trigger = tf.Variable(0.0, trainable=True, name=f"{name}_backward_trigger")
        entry = _Entry(table, chosen_init, chosen_opt, feature_dim, vtype, trigger)
        _entries[name] = entry
        return entry


def embedding(name: str, sparse_input: Any, initializer: Any, emb_dim: int, feature_dim: int,
              combiner: Optional[str] = "sum", vtype: str = "hash",
              optimizer: Optional[Union[str, _optim.Optimizer]] = None, seed: int = 0, step: Any = 0) -> Any:
    """Look ``sparse_input`` up in the table ``name``, creating it on first use, as XDL's ``xdl.embedding``.

    ``sparse_input``: int64 ids, dense ``[batch, n]`` or ``tf.RaggedTensor``/``tf.SparseTensor`` ``[batch, (n)]``.
    ``initializer``: an :mod:`xdl_ec.init` object or name (e.g. ``xdl_ec.init.TruncatedNormal(stddev=0.001)``).
    ``emb_dim``: row width. ``feature_dim``: number of distinct features: with ``vtype='hash'`` (any int64
    key) only a hint; with ``vtype='index'`` ids must lie in ``[0, feature_dim)``, checked at run time.
    ``combiner``: ``'sum'`` (XDL's default), ``'mean'``, ``'sqrtn'`` -> ``[batch, emb_dim]``, or None /
    ``'none'`` -> ``[batch, n, emb_dim]`` (dense ids only). ``optimizer`` / ``seed``: used when the table is
    created (see the module docstring). ``step``: the optimizer step of the update (0: automatic counter).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    emb_dim = _positive_int("emb_dim", emb_dim)
    feature_dim = _positive_int("feature_dim", feature_dim)
    if vtype not in VTYPES:
        raise ValueError(f"vtype must be one of {VTYPES}, got {vtype!r}")
    import tensorflow as tf

    from . import tf_ops

    combiner = tf_ops.normalize_combiner(combiner)
    entry = _entry_for(name, initializer, emb_dim, feature_dim, vtype, optimizer, seed)
    if vtype == "index":
        values = sparse_input.values if isinstance(sparse_input, (tf.SparseTensor, tf.RaggedTensor)) else sparse_input
        values = tf.cast(tf.convert_to_tensor(values), tf.int64)
        checks = [tf.debugging.assert_greater_equal(values, tf.constant(0, tf.int64),
                                                    message=f"embedding {name!r}: vtype='index' ids must be >= 0"),
                  tf.debugging.assert_less(values, tf.constant(feature_dim, tf.int64),
                                           message=f"embedding {name!r}: vtype='index' ids must be < feature_dim "
                                                   f"({feature_dim})")]
        with tf.control_dependencies(checks):
            return tf_ops.lookup(entry.table, sparse_input, combiner=combiner, trigger=entry.trigger, step=step)
    return tf_ops.lookup(entry.table, sparse_input, combiner=combiner, trigger=entry.trigger, step=step)
