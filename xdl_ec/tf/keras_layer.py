"""Keras 3 layer over an xdl-ec embedding table."""

from __future__ import annotations

import weakref
from typing import Any, Optional, Union, cast

import keras
import tensorflow as tf

from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.tf import tf_ops
from xdl_ec.tf.table_trackable import ENTRIES, TableTrackable

__all__ = ["SparseEmbedding"]


class SparseEmbedding(keras.layers.Layer):
    """Embedding lookup into an :class:`xdl_ec.EmbeddingTable`, trained by the table's own sparse optimizer.

    Called on int64 ids ``[batch, n]`` it returns ``[batch, n, dim]`` (``combiner=None``) or, with a
    combiner (``"sum"``, ``"mean"``, ``"sqrtn"``), ``[batch, dim]``; ``tf.RaggedTensor`` and
    ``tf.SparseTensor`` ids ``[batch, (n)]`` need a combiner. Works in ``model.fit`` and in custom loops
    with ``tf.GradientTape``, eagerly or in ``tf.function``.

    The embedding rows are NOT Keras variables: they live in the table, and the gradient of the lookup
    pushes the per-key summed row gradients into the table's optimizer (e.g. ``xdl_ec.optim.Adagrad``)
    during the backward pass. The dense (Keras) optimizer never sees them. The layer's only weight is
    ``backward_trigger``, a trainable float scalar fixed at 0: reading it inside the tape is what makes
    the tape record the lookup (ids are integers and cannot be watched). Its gradient is always 0, so no
    optimizer moves it; a custom loop must compute gradients with a tape under which the layer ran, and
    each ``tape.gradient`` call reaching the lookup applies one table update.

    ``step`` (call argument): the optimizer step for this update (>= 1), or ``None``/0 for the table
    handle's automatic counter (see :mod:`xdl_ec.tf.tf_ops`). With ``training=False`` (Keras passes it in
    ``predict``/``evaluate``; a subclassed model must forward its ``training`` argument) ids the table has
    never seen read as zero rows and are not inserted, so evaluating on held-out data does not grow the
    table; otherwise (``True`` or ``None``) missing ids are inserted with their initial rows, which is what
    training needs (the forward pass then sees the rows the update applies to). Not XLA-compilable (Keras falls back
    to ``jit_compile=False``); ``mixed_float16`` is refused because its loss scaling would reach the table.

    Saving: the table is part of the model's state. ``tf.train.Checkpoint(model=...)`` (and
    ``tf.train.CheckpointManager``) saves it through the layer's tracked
    :class:`~xdl_ec.tf.table_trackable.TableTrackable` (once, however many layers share the table), and
    ``model.save_weights`` / ``load_weights`` write it into the
    layer's entries of the ``.weights.h5`` file (once per layer holding it): keys, values, optimizer state and both
    step counters. Restoring makes the table hold exactly the saved rows, so training continues bit-identically;
    a table of another dim or optimizer is refused, naming the table, before anything changes.
    """

    # Entry names of the table in a Keras weight store, beside "0" (backward_trigger) as Keras numbers variables.
    _TABLE_ENTRIES = {f"table_{name}": name for name in ENTRIES}

    def __init__(self, table: Any, combiner: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._combiner = tf_ops.normalize_combiner(combiner)
        if self.dtype_policy.name == "mixed_float16":
            # Keras scales the loss under mixed_float16 and unscales only the gradients it applies itself; the
            # table would be updated with gradients scaled by the loss scale.
            raise ValueError(
                "SparseEmbedding does not support the 'mixed_float16' policy (loss scaling would reach "
                "the table's optimizer unscaled); use 'mixed_bfloat16' or 'float32'"
            )
        if not isinstance(table, EmbeddingTable):
            raise TypeError(f"table must be an xdl_ec.EmbeddingTable, got {type(table).__name__}")
        self._table = table
        # A tracked attribute: tf.train.Checkpoint(model=...) finds the table through it.
        self._table_checkpoint = TableTrackable.of(table)
        # The store and error of the last refused load_own_variables (see there).
        self._refused_store: Optional[weakref.ref] = None
        self._refusal: Optional[ValueError] = None
        # A custom CPU op: XLA cannot compile it, so Keras must not pick jit_compile for models holding it.
        self.supports_jit = False
        self.backward_trigger = self.add_weight(
            name="backward_trigger", shape=(), dtype="float32", initializer="zeros", trainable=True, autocast=False
        )

    @property
    def table(self) -> EmbeddingTable:
        return self._table

    @property
    def combiner(self) -> str:
        return self._combiner

    def call(
        self,
        ids: Union[tf.Tensor, tf.RaggedTensor, tf.SparseTensor],
        step: Optional[Any] = None,
        training: Optional[bool] = None,
    ) -> tf.Tensor:
        out = tf_ops.lookup(
            self._table,
            ids,
            combiner=self._combiner,
            trigger=self.backward_trigger.value,
            step=0 if step is None else step,
            insert_missing=training is not False,
        )
        # Rows are float32 in the table; under a mixed-precision policy the layer outputs its compute dtype.
        return out if self.compute_dtype == "float32" else tf.cast(out, self.compute_dtype)

    def compute_output_shape(self, ids_shape: tuple) -> tuple:
        if self._combiner == "none":
            return tuple(ids_shape) + (self._table.dim,)
        return (ids_shape[0], self._table.dim)

    def _trackable_children(self, save_type: str = "checkpoint", **kwargs: Any) -> dict:
        children = super()._trackable_children(save_type, **kwargs)
        if save_type == "savedmodel":
            # A SavedModel would trace the table's save into a graph, but its rows live in this process outside TF
            # (as the handle the lookup uses): SavedModels leave the table out, checkpoints carry it.
            children.pop("_table_checkpoint", None)
        return children

    # ---- Keras weight files (model.save_weights / load_weights) ---------------------------------------------
    def save_own_variables(self, store: Any) -> None:
        """Writes ``backward_trigger`` as entry "0" (as Keras does) and the table's snapshot as ``table_*`` entries."""
        super().save_own_variables(store)
        snapshot = self._table_checkpoint.snapshot()
        for entry, name in self._TABLE_ENTRIES.items():
            store[entry] = snapshot[name]

    def load_own_variables(self, store: Any) -> None:
        """Accepts exactly what :meth:`save_own_variables` wrote; the table is checked before anything changes."""
        expected = {"0", *self._TABLE_ENTRIES}
        found = set(store.keys())
        if not found and self._refused_store is not None and self._refused_store() is store:
            # Keras retries a layer whose load failed at the other paths it reaches it by (a model's `_layers`, ...),
            # where the file holds nothing, and reports only the last error: repeat the real one.
            raise cast(ValueError, self._refusal)  # set with _refused_store
        try:
            if found != expected:
                raise ValueError(
                    f"SparseEmbedding {self.name!r} (table {self._table.name!r}): the weight file's entries for this "
                    f"layer are {sorted(found)}, expected {sorted(expected)}; missing {sorted(expected - found)}, "
                    f"unexpected {sorted(found - expected)}. Load a file written by save_weights of a model with the "
                    f"same layers."
                )
            self._table_checkpoint.restore({name: store[entry] for entry, name in self._TABLE_ENTRIES.items()})
        except ValueError as err:
            try:
                self._refused_store, self._refusal = weakref.ref(store), err
            except TypeError:  # a store without weak references: no retry to recognise
                self._refused_store, self._refusal = None, None
            raise
        self._refused_store, self._refusal = None, None
        self.backward_trigger.assign(store["0"])

    def get_config(self) -> dict:
        config = super().get_config()
        # The table is not part of a Keras config (it is built by the caller and may be shared); its rows are
        # part of the weights (save_weights, tf.train.Checkpoint).
        config.update({"combiner": self._combiner, "table_name": self._table.name, "dim": self._table.dim})
        return config

    @classmethod
    def from_config(cls, config: dict) -> "SparseEmbedding":
        raise ValueError(
            f"SparseEmbedding {config.get('name')!r} cannot be rebuilt from a Keras config: it needs its "
            f"EmbeddingTable {config.get('table_name')!r} (dim {config.get('dim')}), which the caller builds. Build "
            f"the table and SparseEmbedding(table, combiner={config.get('combiner')!r}) again, then restore the rows "
            f"with model.load_weights or tf.train.Checkpoint(model=...).read."
        )
