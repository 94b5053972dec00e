"""ModelStep: the TensorFlow side of one training step (and of prediction) of a job, over rows fed by the caller.

The caller (a worker, or the one-process runner) pulls the rows of each table's unique keys of a
:class:`~xdl_ec.model.feature_batch.FeatureBatch` (of each table group's, :mod:`~xdl_ec.model.table_groups`); the
step gathers every feature's rows from them with ``xdl_ec.tf.tf_ops.gather`` (pooled by the feature's combiner; the
features of a group with ONE ``group_gather`` op), runs ``model(embedded, dense)``, and returns the loss, the dense
gradients and, per table or group, the gradient of its rows [U, dim]: summed per unique key by the same C++ code
as the single-process lookup's gradient, so pushing it applies one optimizer step per key.

Traced once per batch signature (dense width, each feature's kind and width); batch size and unique-key counts
vary freely.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from xdl_ec.model.dense_model import ModelError, check_logits, model_arguments, signature_extras
from xdl_ec.model.feature import Feature
from xdl_ec.model.feature_batch import FIXED, RAGGED, SEQUENCE, SINGLE, FeatureBatch
from xdl_ec.model.table_groups import plan_groups
from xdl_ec.tf.flat_call import FlatCall, as_array

LOSSES = ("binary_crossentropy", "categorical_crossentropy")
Loss = Union[str, Dict[str, str], Callable[[Any, Any], Any]]


def loss_function(
    loss: Loss, heads: Optional[Sequence[str]], weights: Optional[Dict[str, float]], classes: Optional[int] = None
) -> Callable:
    """``loss(labels, logits)`` as a TF function of the step's labels and logits (tensors [B], or dicts of them for
    a model of several heads): the mean binary cross-entropy, its weighted sum over heads, or the user's own. A model
    of ``classes`` C (logits and labels [B, C]) trains the mean softmax cross-entropy under either name: one
    binary logit per class would be a different model."""
    import tensorflow as tf

    def binary(labels: Any, logits: Any) -> Any:
        return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))

    def categorical(labels: Any, logits: Any) -> Any:
        return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))

    if callable(loss) and not isinstance(loss, (str, dict)):
        return loss
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise ValueError(f"loss: must be one of {LOSSES} or a callable loss(labels, logits), got {loss!r}")
        if classes is not None:
            return categorical
        if loss == "categorical_crossentropy":
            raise ValueError(
                "loss: 'categorical_crossentropy' is the loss of a model of C classes (logits [B, C], labels "
                "[B, C]); this model returns one logit per example: use 'binary_crossentropy'"
            )
        if heads is None:
            return binary
        # one loss named for a model of several heads: each head's, summed
        loss = {head: loss for head in heads}
    if not isinstance(loss, dict):
        raise TypeError(
            f"loss: must be 'binary_crossentropy', a dict {{head: loss}} or a callable, got {type(loss).__name__}"
        )
    terms = sorted(loss)
    scale = {head: float((weights or {}).get(head, 1.0)) for head in terms}

    def weighted(labels: Any, logits: Any) -> Any:
        return tf.add_n([scale[h] * binary(labels[h], logits[h]) for h in terms])

    return weighted


class ModelStep:
    """Train and predict functions of ``model`` for ``features`` (tables in ``tables`` order)."""

    def __init__(
        self,
        model: Any,
        features: Sequence[Feature],
        table_names: Sequence[str],
        loss: Loss,
        signature: Tuple[Any, ...],
        optimizer: Any = None,
        return_dense: bool = False,
        loss_weights: Optional[Dict[str, float]] = None,
        statistics: Sequence[Any] = (),
        grouped: bool = False,
        classes: Optional[int] = None,
    ) -> None:
        """``optimizer``: the model's dense optimizer, to apply the dense gradients inside the step itself (one
        TF call per step); None returns them (a worker sends them to the driver). ``return_dense``: with an
        optimizer, return the gradients it applied as well (a cluster's only worker: the driver logs them).
        ``grouped``: the step takes batches in table groups (FeatureBatch.prepare(grouped=True)), the groups
        planned from the signature's kinds as the batches plan them. ``classes``: C of a model of C classes
        (labels [B, C]), None for labels [B]. A model that computes its own loss (``computes_loss``, see
        :mod:`xdl_ec.model.loss_model`) is called with the labels and its loss is the step's; ``loss`` is unused."""
        import tensorflow as tf

        kinds = {name: (kind, width) for name, kind, width in signature[1]}
        eligible = {n: (k, w if k in (SINGLE, FIXED) and isinstance(w, int) else None) for n, (k, w) in kinds.items()}
        groups = plan_groups(features, eligible, table_names) if grouped else ()
        in_groups = {t for g in groups for t in g.tables}
        self.model, self.signature, self.groups = model, signature, groups
        # the rows the step takes: each ungrouped table's, then each group's (a group's name stands for its tables)
        self.table_names = [t for t in table_names if t not in in_groups] + [g.name for g in groups]
        self.features = list(features)
        self._single_features = [f for f in features if f.table.name not in in_groups]  # each its own gather
        dims = {f.table.name: f.table.dim for f in features}
        dims.update((g.name, g.dim) for g in groups)
        dense_width = signature[0]
        heads, side = signature_extras(signature)
        self.heads, self.classes = heads, classes
        computes_loss = bool(getattr(model, "computes_loss", False))
        loss_fn = loss_function(loss, heads, loss_weights, classes)
        self.output_names: List[str] = []  # a LossModel's extra outputs, named when the step is traced
        self.outputs: Dict[str, float] = {}  # their values at the last training step
        statistics = list(statistics)

        specs: List[Any] = [tf.TensorSpec([None, dims[t]], tf.float32) for t in self.table_names]
        specs += [tf.TensorSpec([None], tf.int32) for _ in groups]  # each group's inverse, features one after another
        for f in self._single_features:
            kind, width = kinds[f.name]
            if kind == RAGGED:
                specs += [tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int64)]
            elif kind == SEQUENCE:
                specs.append(tf.TensorSpec([None, None], tf.int32))
            else:
                specs.append(tf.TensorSpec([None, *(width if isinstance(width, tuple) else (width,))], tf.int32))
        if dense_width is not None:
            specs.append(tf.TensorSpec([None, dense_width], tf.float32))
        for _, dtype, shape in side:
            specs.append(tf.TensorSpec([None, *shape], dtype))
        label_shape = [None] if classes is None else [None, classes]
        label_specs = [tf.TensorSpec(label_shape, tf.float32) for _ in (heads or (None,))]
        n_tables, n_labels = len(self.table_names), len(label_specs)

        def forward(args: Sequence[Any], training: bool, labels: Any = None) -> Any:
            from xdl_ec.tf import tf_ops

            rows = dict(zip(self.table_names, args[:n_tables]))
            rest = list(args[n_tables:])
            gathered: Dict[str, Any] = {}
            for g in groups:
                gathered.update(zip(g.features, tf_ops.group_gather(rows[g.name], rest.pop(0), g.widths, g.modes)))
            embedded = {}
            for f in self.features:  # in declared order, as a model iterating `embedded` expects
                if f.name in gathered:
                    embedded[f.name] = gathered[f.name]
                    continue
                kind, width = kinds[f.name]
                inverse = rest.pop(0)
                splits = rest.pop(0) if kind == RAGGED else None
                table_rows = rows[f.table.name]
                if kind == SINGLE:
                    embedded[f.name] = tf_ops.gather(table_rows, inverse)[:, 0, :]
                elif kind == SEQUENCE:
                    # padding reads an extra zero row past the batch's rows: zero embeddings, zero gradient
                    padded = tf.concat([table_rows, tf.zeros([1, dims[f.table.name]])], 0)
                    inside = inverse >= 0
                    embedded[f.name] = tf_ops.gather(padded, tf.where(inside, inverse, tf.shape(table_rows)[0]))
                    embedded[f.mask_name] = inside
                elif kind == FIXED and isinstance(width, tuple):  # [B, T, ..., n]: gathered as [B * T..., n]
                    flat = tf_ops.gather(table_rows, tf.reshape(inverse, [-1, width[-1]]), f.combiner)
                    outer = [tf.shape(inverse)[0], *width[:-1]]
                    tail = [dims[f.table.name]] if f.combiner else [width[-1], dims[f.table.name]]
                    embedded[f.name] = tf.reshape(flat, outer + tail)
                elif kind == FIXED:
                    embedded[f.name] = tf_ops.gather(table_rows, inverse, f.combiner)
                else:
                    embedded[f.name] = tf_ops.gather(table_rows, inverse, f.combiner, row_splits=splits)
            dense = rest.pop(0) if dense_width is not None else None
            inputs = {name: rest.pop(0) for name, _, _ in side}
            arguments = model_arguments(embedded, dense, inputs, bool(side))
            if labels is not None:  # a LossModel's training call: (loss, probabilities, outputs)
                return model(embedded, arguments, training=training, labels=labels)
            logits = model(embedded, arguments, training=training)
            check_logits(logits, heads, None)
            if heads is None:
                return logits[:, 0] if logits.shape.rank == 2 and classes is None and not computes_loss else logits
            return {h: logits[h][:, 0] if logits[h].shape.rank == 2 else logits[h] for h in heads}

        def train(*args):  # noqa: ANN002, ANN202 - traced by tf.function
            inputs, labels = args[: len(args) - n_labels], args[len(args) - n_labels :]
            labels = labels[0] if heads is None else dict(zip(heads, labels))
            table_rows = inputs[:n_tables]
            extras: List[Any] = []
            with tf.GradientTape() as tape:
                tape.watch(table_rows)
                if computes_loss:
                    value, found, outputs = forward(inputs, True, labels)
                    probs = [] if found is None else [probabilities_of(found, computes_loss, classes)]
                    self.output_names[:] = sorted(outputs)
                    extras = [tf.cast(tf.reshape(outputs[k], []), tf.float32) for k in self.output_names]
                else:
                    logits = forward(inputs, True)
                    value = loss_fn(labels, logits)
                    # the probabilities this forward pass gave before the update: progressive validation's scores
                    probs = (
                        [probabilities_of(logits, False, classes)]
                        if heads is None
                        else [tf.sigmoid(logits[h]) for h in heads]
                    )
            variables = model.trainable_variables
            # a variable that feeds no loss gets a zero gradient (as in XDL's TF backend); made here, as TF's
            # unconnected_gradients=ZERO fails on a Keras variable (its dtype is a string)
            found_grads = tape.gradient(value, [*variables, *table_rows])
            zeros = [tf.zeros(v.shape, tf.as_dtype(v.dtype)) for v in variables] + [
                tf.zeros_like(t) for t in table_rows
            ]
            grads = [zero if g is None else g for g, zero in zip(found_grads, zeros)]
            dense_grads, row_grads = grads[: len(variables)], grads[len(variables) :]
            if optimizer is not None:
                optimizer.apply(dense_grads, variables)
                if not return_dense:
                    return value, [], row_grads, probs, extras
            # the dense update: gradients, then the statistics as the step left them
            dense_update = [*dense_grads, *[tf.identity(tf.convert_to_tensor(v)) for v in statistics]]
            return value, dense_update, row_grads, probs, extras

        def predict(*args):  # noqa: ANN002, ANN202
            logits = forward(args, False)
            if heads is None:
                return probabilities_of(logits, computes_loss, classes)
            return {h: tf.sigmoid(logits[h]) for h in heads}

        # concrete functions called in their flat form (xdl_ec.tf.flat_call): tf.function's per-call signature
        # binding was ~1 ms a step on this 2-core machine, a third of a small step; the concrete function's ~0.2 ms
        self._train = FlatCall(tf.function(train, input_signature=[*specs, *label_specs]).get_concrete_function())
        self._predict = FlatCall(tf.function(predict, input_signature=specs).get_concrete_function())

    @classmethod
    def of(
        cls,
        job: Any,
        dense: Any,
        signature: Tuple[Any, ...],
        apply: bool = False,
        return_dense: bool = False,
        grouped: bool = False,
    ) -> "ModelStep":
        """The step of ``job`` (a JobSpec) over ``dense`` (its DenseModel); ``apply``: apply the dense gradients
        with the model's optimizer inside the step; ``grouped``: over batches in table groups."""
        return cls(
            dense.model,
            job.features,
            job.table_names,
            job.loss,
            signature,
            dense.optimizer if apply else None,
            return_dense=return_dense,
            loss_weights=job.loss_weights,
            statistics=dense.statistics,
            grouped=grouped,
            classes=dense.classes,
        )

    def _inputs(self, batch: FeatureBatch, rows: Dict[str, np.ndarray]) -> List[Any]:
        if batch.signature() != self.signature:
            raise ModelError(
                f"batch: its features' shapes {batch.signature()} differ from the first batch's "
                f"{self.signature}; every batch must give each feature the same kind and width"
            )
        if tuple(batch.groups) != self.groups:
            raise ModelError(
                f"batch: its table groups {[g.tables for g in batch.groups]} differ from the step's "
                f"{[g.tables for g in self.groups]}; prepare it as the step's batches are (FeatureBatch.prepare, "
                f"grouped)"
            )
        args: List[Any] = [rows[t] for t in self.table_names]
        args += [batch.group_inverse[g.name] for g in self.groups]
        for f in self._single_features:
            ids = batch.ids[f.name]
            args.append(ids.inverse)
            if ids.kind == RAGGED:
                args.append(ids.row_splits)
        if batch.dense is not None:
            args.append(batch.dense)
        args += [batch.inputs[name] for name, _, _ in signature_extras(self.signature)[1]]
        return args

    def _labels(self, batch: FeatureBatch) -> List[np.ndarray]:
        labels = [batch.labels_of(h) for h in (self.heads or (None,))]
        width = None if labels[0].ndim == 1 else int(labels[0].shape[1])
        if width != self.classes:
            model = "labels [B]" if self.classes is None else f"labels [B, {self.classes}] ({self.classes} classes)"
            raise ModelError(
                f"batch: its labels are {'[B]' if width is None else f'[B, {width}]'}, the model's {model}: give "
                f"every batch the labels the model was built for"
            )
        return labels

    def train(
        self, batch: FeatureBatch, rows: Dict[str, np.ndarray]
    ) -> Tuple[float, List[np.ndarray], Dict[str, np.ndarray]]:
        """(loss, dense gradients, {table or group: row gradients [U, dim]}) of one step on ``rows`` {table or
        group: [U, dim]}."""
        return self.train_scored(batch, rows)[:3]

    def train_scored(
        self, batch: FeatureBatch, rows: Dict[str, np.ndarray]
    ) -> Tuple[float, List[np.ndarray], Dict[str, np.ndarray], Optional[List[np.ndarray]]]:
        """:meth:`train`'s figures plus the probabilities [B] ([B, C] of C classes) its forward pass gave before
        the update, one array per head (:attr:`heads` order; one for a single-head model): progressive
        validation's scores; None from a LossModel whose training graph computes none. A LossModel's extra
        outputs are :attr:`outputs` after the call."""
        value, dense_grads, row_grads, probs, extras = self._train([*self._inputs(batch, rows), *self._labels(batch)])
        self.outputs = {name: float(as_array(v)) for name, v in zip(self.output_names, extras)}
        return (
            float(value),
            [as_array(g) for g in dense_grads],
            {t: as_array(g) for t, g in zip(self.table_names, row_grads)},
            [as_array(p) for p in probs] if len(probs) else None,
        )

    def predict(self, batch: FeatureBatch, rows: Dict[str, np.ndarray]) -> Union[np.ndarray, Dict[str, np.ndarray]]:
        """Probabilities [B] ([B, C] of C classes), or {head: probabilities [B]} for a model of several heads."""
        out = self._predict(self._inputs(batch, rows))
        if self.heads is None:
            return np.asarray(out)
        return {h: np.asarray(out[h]) for h in self.heads}


def probabilities_of(out: Any, computes_loss: bool, classes: Optional[int]) -> Any:
    """The probabilities of one head's model output: a LossModel's own ([B, 1] as [B]; clipped to [0, 1]: XDL's
    scripts add an epsilon to a softmax), softmax of logits [B, C] of C classes, else sigmoid of logits [B]."""
    import tensorflow as tf

    if computes_loss:
        if out.shape.rank == 2 and out.shape[1] == 1:
            out = out[:, 0]
        return tf.clip_by_value(tf.cast(out, tf.float32), 0.0, 1.0)
    if classes is not None:
        return tf.nn.softmax(out)
    return tf.sigmoid(tf.reshape(out, [-1]))
