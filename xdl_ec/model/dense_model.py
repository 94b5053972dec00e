"""DenseModel: a job's Keras model (from its ``model_fn``) with its dense optimizer, built before the first step.

A job's model is called as ``model(embedded, dense)``: ``embedded`` maps each feature's name to its rows ([B, dim],
or [B, n, dim] for fixed multi-hot ids without a combiner) and ``dense`` is float32 [B, D] or None. Keras builds a
model's weights on its first call, so :meth:`DenseModel.build` calls it once on zeros shaped like the job's
batches, with Keras' seed set just before ``model_fn()`` runs: every process that builds the same job with the
same seed gets the same initial weights, whatever it did before.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from xdl_ec.settings import checks

DENSE_OPTIMIZERS = ("adam", "adagrad", "sgd", "rmsprop")


class ModelError(ValueError):
    """A job's model_fn or model broke the job API's contract (the message says which part)."""


def embedded_shapes(signature: Tuple[Any, ...], dims: Mapping[str, int],
                    combiners: Mapping[str, Optional[str]]) -> Dict[str, Tuple[int, ...]]:
    """Per feature, the shape of one example's embedded input (without the batch dimension)."""
    _, features = signature
    shapes = {}
    for name, kind, width in features:
        if kind == "fixed" and combiners[name] is None:
            shapes[name] = (width, dims[name])
        else:
            shapes[name] = (dims[name],)
    return shapes


class DenseModel:
    """The model of ``model_fn`` and its optimizer (a Keras optimizer name from DENSE_OPTIMIZERS, or a Keras
    optimizer config dict), built for batches of ``signature`` (see FeatureBatch.signature)."""

    def __init__(self, model_fn: Callable[[], Any], optimizer: Union[str, Dict[str, Any]], learning_rate: float,
                 signature: Tuple[Any, ...], dims: Mapping[str, int], combiners: Mapping[str, Optional[str]],
                 seed: int) -> None:
        import tensorflow as tf

        tf.keras.utils.set_random_seed(seed)
        try:
            model = model_fn()
        except Exception as err:  # noqa: BLE001 - any failure of user code, reported with its cause
            raise ModelError(f"model_fn() raised {type(err).__name__}: {err}") from err
        if not isinstance(model, tf.keras.Model):
            raise ModelError(f"model_fn() must return a Keras model (tf.keras.Model), got {type(model).__name__}")
        self.model = model
        dense_width, _ = signature
        embedded = {name: tf.zeros((1, *shape)) for name, shape in embedded_shapes(signature, dims, combiners).items()}
        dense = None if dense_width is None else tf.zeros((1, dense_width))
        try:
            out = model(embedded, dense)
        except Exception as err:  # noqa: BLE001
            raise ModelError(f"the model of model_fn() failed on its first call model(embedded, dense) "
                             f"({type(err).__name__}: {err}); embedded shapes per example: "
                             f"{ {k: tuple(v.shape[1:]) for k, v in embedded.items()} }, dense width "
                             f"{dense_width}") from err
        check_logits_shape(tuple(out.shape), 1)
        if len(model.trainable_variables) != len(model.weights):
            raise ModelError("model: non-trainable dense weights (e.g. BatchNormalization statistics) are not "
                             "synchronised between workers; use layers whose weights are all trainable")
        if isinstance(optimizer, str):
            checks.one_of("dense_optimizer", optimizer, DENSE_OPTIMIZERS)
            optimizer = {"class_name": optimizer, "config": {"learning_rate": float(learning_rate)}}
        self.optimizer = tf.keras.optimizers.get(optimizer)
        self.optimizer.build(model.trainable_variables)
        variables = model.trainable_variables
        self._apply = tf.function(lambda grads: self.optimizer.apply(grads, variables))

    def weights(self) -> List[np.ndarray]:
        """The current weights, in ``model.trainable_variables`` order."""
        return [v.numpy() for v in self.model.trainable_variables]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        variables = self.model.trainable_variables
        if len(weights) != len(variables):
            raise ValueError(f"weights: expected {len(variables)} arrays, got {len(weights)}")
        for v, w in zip(variables, weights):
            v.assign(w)

    def apply(self, grads: Sequence[np.ndarray]) -> None:
        """One optimizer step with ``grads`` (``model.trainable_variables`` order)."""
        import tensorflow as tf

        self._apply([tf.convert_to_tensor(g) for g in grads])

    def state(self) -> Tuple[List[np.ndarray], List[np.ndarray]]:
        """(weights, optimizer variables) as arrays: what a checkpoint keeps."""
        return self.weights(), [np.asarray(v.numpy()) for v in self.optimizer.variables]

    def load_state(self, weights: Sequence[np.ndarray], optimizer_variables: Sequence[np.ndarray]) -> None:
        self.set_weights(weights)
        variables = self.optimizer.variables
        if len(optimizer_variables) != len(variables):
            raise ValueError(f"optimizer state: expected {len(variables)} arrays, got {len(optimizer_variables)}")
        for v, value in zip(variables, optimizer_variables):
            v.assign(np.reshape(value, tuple(v.shape)))  # a checkpoint stores a scalar as [1]


def check_logits_shape(shape: Tuple[Any, ...], batch: Optional[int]) -> None:
    """Raises ModelError unless ``shape`` is logits [B] or [B, 1]."""
    ok = len(shape) in (1, 2) and (len(shape) == 1 or shape[1] == 1) and \
        (batch is None or shape[0] is None or shape[0] == batch)
    if not ok:
        raise ModelError(f"the model must return logits [B] or [B, 1] (B = {batch}), got shape {shape}")
