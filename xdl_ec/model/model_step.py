"""ModelStep: the TensorFlow side of one training step (and of prediction) of a job, over rows fed by the caller.

The caller (a worker, or the one-process runner) pulls the rows of each table's unique keys of a
:class:`~xdl_ec.model.feature_batch.FeatureBatch`; the step gathers every feature's rows from them with
``xdl_ec.tf.tf_ops.gather`` (pooled by the feature's combiner), runs ``model(embedded, dense)``, and returns the loss,
the dense gradients and, per table, the gradient of its rows [U, dim]: summed per unique key by the same C++ code
as the single-process lookup's gradient, so pushing it applies one optimizer step per key.

Traced once per batch signature (dense width, each feature's kind and width); batch size and unique-key counts
vary freely.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple, Union

import numpy as np

from .dense_model import ModelError, check_logits_shape
from .feature import Feature
from .feature_batch import FIXED, RAGGED, SINGLE, FeatureBatch

LOSSES = ("binary_crossentropy",)


class ModelStep:
    """Train and predict functions of ``model`` for ``features`` (tables in ``tables`` order)."""

    def __init__(self, model: Any, features: Sequence[Feature], table_names: Sequence[str],
                 loss: Union[str, Callable[[Any, Any], Any]], signature: Tuple[Any, ...],
                 optimizer: Any = None, return_dense: bool = False) -> None:
        """``optimizer``: the model's dense optimizer, to apply the dense gradients inside the step itself (one
        TF call per step); None returns them (a worker sends them to the driver). ``return_dense``: with an
        optimizer, return the gradients it applied as well (a cluster's only worker: the driver logs them)."""
        import tensorflow as tf

        self.model, self.features, self.table_names = model, list(features), list(table_names)
        self.signature = signature
        dims = {f.table.name: f.table.dim for f in features}
        kinds = {name: (kind, width) for name, kind, width in signature[1]}
        dense_width = signature[0]
        if isinstance(loss, str):
            if loss not in LOSSES:
                raise ValueError(f"loss: must be one of {LOSSES} or a callable loss(labels, logits), got {loss!r}")
            loss_fn = lambda labels, logits: tf.reduce_mean(  # noqa: E731
                tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        elif callable(loss):
            loss_fn = loss
        else:
            raise TypeError(f"loss: must be 'binary_crossentropy' or a callable, got {type(loss).__name__}")

        specs: List[Any] = [tf.TensorSpec([None, dims[t]], tf.float32) for t in self.table_names]
        for f in self.features:
            kind, width = kinds[f.name]
            specs.append(tf.TensorSpec([None] if kind == RAGGED else [None, width], tf.int32))
            if kind == RAGGED:
                specs.append(tf.TensorSpec([None], tf.int64))
        if dense_width is not None:
            specs.append(tf.TensorSpec([None, dense_width], tf.float32))
        label_spec = tf.TensorSpec([None], tf.float32)
        n_tables = len(self.table_names)

        def forward(args: Sequence[Any], training: bool) -> Any:
            from xdl_ec.tf import tf_ops

            rows = dict(zip(self.table_names, args[:n_tables]))
            rest = list(args[n_tables:])
            embedded = {}
            for f in self.features:
                kind, _ = kinds[f.name]
                inverse = rest.pop(0)
                splits = rest.pop(0) if kind == RAGGED else None
                table_rows = rows[f.table.name]
                if kind == SINGLE:
                    embedded[f.name] = tf_ops.gather(table_rows, inverse)[:, 0, :]
                elif kind == FIXED:
                    embedded[f.name] = tf_ops.gather(table_rows, inverse, f.combiner)
                else:
                    embedded[f.name] = tf_ops.gather(table_rows, inverse, f.combiner, row_splits=splits)
            dense = rest.pop(0) if dense_width is not None else None
            logits = model(embedded, dense, training=training)
            check_logits_shape(tuple(logits.shape), None)
            if logits.shape.rank == 2:
                logits = logits[:, 0]
            return logits

        def train(*args):  # noqa: ANN002, ANN202 - traced by tf.function
            *inputs, labels = args
            table_rows = inputs[:n_tables]
            with tf.GradientTape() as tape:
                tape.watch(table_rows)
                logits = forward(inputs, True)
                value = loss_fn(labels, logits)
            variables = model.trainable_variables
            grads = tape.gradient(value, [*variables, *table_rows],
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            if optimizer is not None:
                optimizer.apply(grads[:len(variables)], variables)
                return value, grads[:len(variables)] if return_dense else [], grads[len(variables):]
            return value, grads[:len(variables)], grads[len(variables):]

        def predict(*args):  # noqa: ANN002, ANN202
            return tf.sigmoid(forward(args, False))

        # concrete functions: called with tensors, they skip tf.function's per-call signature binding (~1 ms a
        # step on this 2-core machine, a third of a small step)
        self._train = tf.function(train, input_signature=[*specs, label_spec]).get_concrete_function()
        self._predict = tf.function(predict, input_signature=specs).get_concrete_function()
        self._tensor = tf.convert_to_tensor

    def _inputs(self, batch: FeatureBatch, rows: Dict[str, np.ndarray]) -> List[Any]:
        if batch.signature() != self.signature:
            raise ModelError(f"batch: its features' shapes {batch.signature()} differ from the first batch's "
                             f"{self.signature}; every batch must give each feature the same kind and width")
        args: List[Any] = [rows[t] for t in self.table_names]
        for f in self.features:
            ids = batch.ids[f.name]
            args.append(ids.inverse)
            if ids.kind == RAGGED:
                args.append(ids.row_splits)
        if batch.dense is not None:
            args.append(batch.dense)
        return args

    def train(self, batch: FeatureBatch, rows: Dict[str, np.ndarray]) -> Tuple[float, List[np.ndarray],
                                                                                Dict[str, np.ndarray]]:
        """(loss, dense gradients, {table: row gradients [U, dim]}) of one step on ``rows`` {table: [U, dim]}."""
        tensor = self._tensor
        value, dense_grads, row_grads = self._train(*[tensor(a) for a in self._inputs(batch, rows)],
                                                    tensor(batch.label))
        return (float(value), [g.numpy() for g in dense_grads],
                {t: g.numpy() for t, g in zip(self.table_names, row_grads)})

    def predict(self, batch: FeatureBatch, rows: Dict[str, np.ndarray]) -> np.ndarray:
        """Probabilities [B]."""
        return np.asarray(self._predict(*[self._tensor(a) for a in self._inputs(batch, rows)]))
