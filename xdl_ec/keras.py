"""Keras 3 layer over an xdl-ec embedding table."""

from __future__ import annotations

from typing import Any, Optional, Union

import keras
import tensorflow as tf

from . import tf_ops

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
    handle's automatic counter (see :mod:`xdl_ec.tf_ops`). With ``training=False`` (Keras passes it in
    ``predict``/``evaluate``; a subclassed model must forward its ``training`` argument) ids the table has
    never seen read as zero rows and are not inserted, so evaluating on held-out data does not grow the
    table; otherwise (``True`` or ``None``) missing ids are inserted with their initial rows, which is what
    training needs (the forward pass then sees the rows the update applies to). Not XLA-compilable (Keras falls back to ``jit_compile=False``); ``mixed_float16`` is
    refused because its loss scaling would reach the table.
    """

    def __init__(self, table: Any, combiner: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._combiner = tf_ops.normalize_combiner(combiner)
        if self.dtype_policy.name == "mixed_float16":
            # Keras scales the loss under mixed_float16 and unscales only the gradients it applies itself; the
            # table would be updated with gradients scaled by the loss scale.
            raise ValueError("SparseEmbedding does not support the 'mixed_float16' policy (loss scaling would reach "
                             "the table's optimizer unscaled); use 'mixed_bfloat16' or 'float32'")
        if not hasattr(table, "handle") or not hasattr(table, "dim"):
            raise TypeError(f"table must be an xdl_ec.EmbeddingTable, got {type(table).__name__}")
        self._table = table
        # A custom CPU op: XLA cannot compile it, so Keras must not pick jit_compile for models holding it.
        self.supports_jit = False
        self.backward_trigger = self.add_weight(
            name="backward_trigger", shape=(), dtype="float32", initializer="zeros", trainable=True, autocast=False)

    @property
    def table(self) -> Any:
        return self._table

    @property
    def combiner(self) -> str:
        return self._combiner

    def call(self, ids: Union[tf.Tensor, tf.RaggedTensor, tf.SparseTensor], step: Optional[Any] = None,
             training: Optional[bool] = None) -> tf.Tensor:
        out = tf_ops.lookup(self._table, ids, combiner=self._combiner, trigger=self.backward_trigger.value,
                            step=0 if step is None else step, insert_missing=training is not False)
        # Rows are float32 in the table; under a mixed-precision policy the layer outputs its compute dtype.
        return out if self.compute_dtype == "float32" else tf.cast(out, self.compute_dtype)

    def compute_output_shape(self, ids_shape: tuple) -> tuple:
        if self._combiner == "none":
            return tuple(ids_shape) + (self._table.dim,)
        return (ids_shape[0], self._table.dim)

    def get_config(self) -> dict:
        config = super().get_config()
        # The table itself is not serialisable into a Keras config: it is saved with table.export().
        config.update({"combiner": self._combiner, "table_name": getattr(self._table, "name", None),
                       "dim": self._table.dim})
        return config

    @classmethod
    def from_config(cls, config: dict) -> "SparseEmbedding":
        raise ValueError(
            f"SparseEmbedding {config.get('name')!r} cannot be rebuilt from a Keras config: its rows live in the "
            f"EmbeddingTable {config.get('table_name')!r}, not in the model. Restore the table (EmbeddingTable.load "
            f"of its export()) and construct SparseEmbedding(table, combiner={config.get('combiner')!r}) again.")
