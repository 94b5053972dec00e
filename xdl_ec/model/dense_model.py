"""DenseModel: a job's Keras model (from its ``model_fn``) with its dense optimizer, built before the first step.

A job's model is called as ``model(embedded, dense)``: ``embedded`` maps each feature's name to its rows ([B, dim],
[B, n, dim] for fixed multi-hot ids without a combiner, [B, T, dim] and a bool mask [B, T] under ``NAME_mask`` for
a sequence) and ``dense`` is float32 [B, D] or None; a job with side inputs passes ``{"dense": dense, name: input}``
instead. It returns logits [B] (or [B, 1]), logits [B, C] of C classes (trained with softmax against labels [B, C]),
or for several heads a dict {head: logits}. A model that computes its own loss (``computes_loss``, see
:mod:`xdl_ec.model.loss_model`) returns its probabilities instead, and ``(loss, probabilities, outputs)`` when called
with ``labels=``. Keras builds a model's
weights on its first call, so :class:`DenseModel` calls it once on zeros shaped like the job's batches, with Keras'
seed set just before ``model_fn()`` runs: every process that builds the same job with the same seed gets the same
initial weights, whatever it did before.

Non-trainable weights (BatchNormalization's moving mean and variance, any ``trainable=False`` variable) are part
of the dense state: :meth:`DenseModel.weights` lists the trainable ones, then the non-trainable ones, so they are in
the digest, saves, checkpoints and exports. A step's dense update (what a worker answers, what the driver applies
and logs) is the trainable weights' gradients followed by the non-trainable weights' values after the step; with
several sync workers the driver averages both in worker order, so the statistics kept are the mean of the
workers': a moving average's update is linear, so that is the moving average of the mean of the workers' batch
means (the global batch's mean, exactly, for equal batches; for the variance, the mean of the workers' variances).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from xdl_ec.settings import checks

DENSE_OPTIMIZERS = ("adam", "adagrad", "sgd", "rmsprop")


class ModelError(ValueError):
    """A job's model_fn or model broke the job API's contract (the message says which part)."""


def embedded_shapes(
    signature: Tuple[Any, ...], dims: Mapping[str, int], combiners: Mapping[str, Optional[str]]
) -> Dict[str, Tuple[Optional[int], ...]]:
    """Per feature, the shape of one example's embedded input (without the batch dimension; None for a sequence's
    length)."""
    features = signature[1]
    shapes: Dict[str, Tuple[Optional[int], ...]] = {}
    for name, kind, width in features:
        widths = width if isinstance(width, tuple) else (width,)
        if kind == "sequence":
            shapes[name] = (None, dims[name])
        elif kind == "fixed" and combiners[name] is None:
            shapes[name] = (*widths, dims[name])
        elif kind == "fixed":
            shapes[name] = (*widths[:-1], dims[name])
        else:
            shapes[name] = (dims[name],)
    return shapes


def signature_extras(signature: Tuple[Any, ...]) -> Tuple[Optional[Tuple[str, ...]], Tuple[Any, ...]]:
    """(heads or None, side inputs ((name, dtype, shape), ...)) of a batch signature (FeatureBatch.signature)."""
    return signature[2] if len(signature) > 2 else (None, ())


def model_arguments(embedded: Dict[str, Any], dense: Any, inputs: Mapping[str, Any], has_inputs: bool) -> Any:
    """The model's second argument: ``dense`` alone, or ``{"dense": dense, input: tensor}`` for a job with side
    inputs."""
    if not has_inputs:
        return dense
    return {"dense": dense, **inputs}


class DenseModel:
    """The model of ``model_fn`` and its optimizer (a Keras optimizer name from DENSE_OPTIMIZERS, or a Keras
    optimizer config dict), built for batches of ``signature`` (see FeatureBatch.signature)."""

    def __init__(
        self,
        model_fn: Callable[[], Any],
        optimizer: Union[str, Dict[str, Any]],
        learning_rate: float,
        signature: Tuple[Any, ...],
        dims: Mapping[str, int],
        combiners: Mapping[str, Optional[str]],
        seed: int,
    ) -> None:
        import tensorflow as tf

        tf.keras.utils.set_random_seed(seed)
        try:
            model = model_fn()
        except Exception as err:  # noqa: BLE001 - any failure of user code, reported with its cause
            raise ModelError(f"model_fn() raised {type(err).__name__}: {err}") from err
        if not isinstance(model, tf.keras.Model):
            raise ModelError(f"model_fn() must return a Keras model (tf.keras.Model), got {type(model).__name__}")
        self.model = model
        dense_width = signature[0]
        heads, side = signature_extras(signature)
        embedded = {
            name: tf.zeros((1, *(1 if d is None else d for d in shape)))
            for name, shape in embedded_shapes(signature, dims, combiners).items()
        }
        for name, kind, _ in signature[1]:
            if kind == "sequence":
                embedded[name + "_mask"] = tf.zeros((1, 1), tf.bool)
        dense = None if dense_width is None else tf.zeros((1, dense_width))
        inputs = {name: tf.zeros((1, *shape), dtype) for name, dtype, shape in side}
        try:
            out = model(embedded, model_arguments(embedded, dense, inputs, bool(side)))
        except Exception as err:  # noqa: BLE001
            raise ModelError(
                f"the model of model_fn() failed on its first call model(embedded, "
                f"{'inputs' if side else 'dense'}) ({type(err).__name__}: {err}); embedded shapes per "
                f"example: { {k: tuple(v.shape[1:]) for k, v in embedded.items()} }, dense width "
                f"{dense_width}" + (f", side inputs {[s[0] for s in side]}" if side else "")
            ) from err
        self.computes_loss = bool(getattr(model, "computes_loss", False))
        check_logits(out, heads, 1)
        # C > 1 classes: labels [B, C]; a model computing its own loss says what labels it reads
        width = int(out.shape[1]) if heads is None and len(out.shape) == 2 else 1
        self.classes: Optional[int] = getattr(model, "label_classes", None) if self.computes_loss else None
        if not self.computes_loss and width > 1:
            self.classes = width
        self._trainable = list(model.trainable_variables)
        self._statistics = list(model.non_trainable_weights)  # BatchNormalization's moving mean and variance, ...
        if isinstance(optimizer, str):
            checks.one_of("dense_optimizer", optimizer, DENSE_OPTIMIZERS)
            optimizer = {"class_name": optimizer, "config": {"learning_rate": float(learning_rate)}}
        self.optimizer = tf.keras.optimizers.get(optimizer)
        self.optimizer.build(self._trainable)
        variables = self._trainable
        self._apply = tf.function(lambda grads: self.optimizer.apply(grads, variables))

    @property
    def variables(self) -> List[Any]:
        """The dense state's variables: ``model.trainable_variables``, then ``model.non_trainable_weights``."""
        return self._trainable + self._statistics

    @property
    def statistics(self) -> List[Any]:
        """The non-trainable weights (e.g. BatchNormalization's moving statistics), updated by training steps."""
        return list(self._statistics)

    def weights(self) -> List[np.ndarray]:
        """The current weights: trainable ones in ``model.trainable_variables`` order, then the non-trainable."""
        return [v.numpy() for v in self.variables]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        variables = self.variables
        if len(weights) != len(variables):
            raise ValueError(f"weights: expected {len(variables)} arrays, got {len(weights)}")
        for v, w in zip(variables, weights):
            v.assign(np.reshape(w, tuple(v.shape)))  # a checkpoint stores a scalar as [1]

    def apply(self, update: Sequence[np.ndarray]) -> None:
        """One step's dense update: an optimizer step with the gradients of the trainable weights (the first
        ``len(model.trainable_variables)`` arrays), then the non-trainable weights set to the values that follow."""
        import tensorflow as tf

        n = len(self._trainable)
        if len(update) not in (n, n + len(self._statistics)):
            raise ValueError(
                f"dense update: expected {n} gradients and {len(self._statistics)} statistics, got {len(update)} arrays"
            )
        self._apply([tf.convert_to_tensor(g) for g in update[:n]])
        for v, value in zip(self._statistics, update[n:]):
            v.assign(value)

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


def check_logits_shape(shape: Tuple[Any, ...], batch: Optional[int], head: Optional[str] = None) -> None:
    """Raises ModelError unless ``shape`` is logits [B] or [B, 1], or (one head) [B, C] of C classes."""
    ok = (
        len(shape) in (1, 2)
        and (len(shape) == 1 or shape[1] == 1 or (head is None and shape[1] is not None))
        and (batch is None or shape[0] is None or shape[0] == batch)
    )
    if not ok:
        which = "the model must return logits" if head is None else f"the model's head {head!r} must be logits"
        multi = len(shape) == 2 and shape[1] not in (None, 1) and head is not None
        raise ModelError(
            f"{which} [B] or [B, 1] (B = {batch})"
            + (", or [B, C] of C classes" if head is None else "")
            + f", got shape {shape}"
            + (
                "; a head of several is one binary logit: a [B, C] head of C classes is the job's one 'label' "
                "[B, C] (a model of one head)"
                if multi
                else ""
            )
        )


def check_logits(out: Any, heads: Optional[Tuple[str, ...]], batch: Optional[int]) -> None:
    """Raises ModelError unless ``out`` is logits [B] / [B, 1] (one head), or a dict of them with every head of the
    batches' labels (``heads``)."""
    if heads is None:
        if isinstance(out, dict):
            raise ModelError(
                f"the model returned a dict of heads {sorted(out)} but the batches carry one 'label': "
                f"give them 'labels': {{head: float [B]}} with the same heads"
            )
        check_logits_shape(tuple(out.shape), batch)
        return
    if not isinstance(out, dict):
        raise ModelError(
            f"the batches carry labels of heads {list(heads)}: the model must return a dict of logits "
            f"with the same keys, got {type(out).__name__}"
        )
    if set(out) != set(heads):
        raise ModelError(
            f"the model's heads {sorted(out)} differ from the batches' labels {sorted(heads)}; return "
            f"one logits [B] per labelled head"
        )
    for head in heads:
        check_logits_shape(tuple(out[head].shape), batch, head)
