"""Models of several classes and models that compute their own loss (issue #50), on the job API: labels [B, C] against
logits [B, C] train the softmax cross-entropy; a LossModel's step trains the loss it returns, reports its scalar
outputs and scores its probabilities; a variable that feeds no loss gets a zero gradient; the class metrics."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import xdl_ec  # noqa: E402
from xdl_ec.model.dense_model import DenseModel  # noqa: E402
from xdl_ec.model.feature_batch import FeatureBatch  # noqa: E402
from xdl_ec.model.job_spec import JobSpec  # noqa: E402
from xdl_ec.model.loss_model import LossModel  # noqa: E402
from xdl_ec.model.metrics import class_metrics, holdout_metrics, one_hot  # noqa: E402
from xdl_ec.model.model_step import ModelStep  # noqa: E402

ITEMS = xdl_ec.Table("items", dim=4)
ITEM = xdl_ec.Feature("item", ITEMS)
LABELS = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 1, 0]], np.float32)


class Softmax(tf.keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.out = tf.keras.layers.Dense(3)
        self.unused = self.add_weight(shape=(2,), initializer="ones", name="unused")  # feeds no loss

    def call(self, embedded: Any, dense: Any, training: bool = False) -> Any:
        return self.out(embedded["item"])


class OwnLoss(LossModel):
    """A hand-written two-way softmax cross entropy plus a penalty, as XDL's scripts compute it."""

    label_classes = 3

    def __init__(self) -> None:
        super().__init__()
        self.out = tf.keras.layers.Dense(3)

    def call(self, embedded: Any, dense: Any, training: bool = False, labels: Any = None) -> Any:
        probabilities = tf.nn.softmax(self.out(embedded["item"]))
        if labels is None:
            return probabilities
        penalty = 0.01 * tf.reduce_sum(tf.square(self.out.kernel))
        loss = -tf.reduce_mean(tf.reduce_sum(tf.math.log(probabilities) * labels, 1)) + penalty
        return loss, probabilities, {"penalty": penalty}


def step_of(model_fn: Any) -> tuple:
    prepared = FeatureBatch.prepare({"label": LABELS, "item": np.arange(4)}, [ITEM], "w")
    dense = DenseModel(model_fn, "sgd", 0.1, prepared.signature(), {"item": 4}, {"item": "sum"}, 0)
    step = ModelStep.of(JobSpec((ITEMS,), (ITEM,), model_fn, lambda w, n: iter(())), dense, prepared.signature())
    rows = {"items": np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32)}
    return dense, step, prepared, rows


def test_logits_of_classes_train_the_softmax_cross_entropy_and_an_unused_weight_gets_zeros() -> None:
    dense, step, prepared, rows = step_of(Softmax)
    loss, grads, _, probs = step.train_scored(prepared, rows)
    embedded = rows["items"][np.asarray(prepared.ids["item"].inverse).reshape(-1)]  # each example's row
    logits = dense.model({"item": tf.constant(embedded)}, None).numpy()
    expected = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=LABELS, logits=logits)).numpy()
    assert loss == pytest.approx(float(expected), rel=1e-5)
    np.testing.assert_allclose(probs[0], tf.nn.softmax(logits).numpy(), rtol=1e-5)
    [unused] = [g for g, v in zip(grads, dense.model.trainable_variables) if "unused" in v.path]
    np.testing.assert_array_equal(unused, np.zeros(2, np.float32))
    assert step.predict(prepared, rows).shape == (4, 3)


def test_a_loss_model_trains_its_own_loss_and_reports_its_outputs() -> None:
    dense, step, prepared, rows = step_of(OwnLoss)
    assert dense.computes_loss and dense.classes == 3
    loss, _, _, probs = step.train_scored(prepared, rows)
    p = probs[0]
    kernel = dense.model.out.kernel.numpy()
    own = -np.mean(np.sum(np.log(p) * LABELS, 1)) + 0.01 * np.sum(kernel**2)
    assert loss == pytest.approx(float(own), rel=1e-4)
    assert step.outputs == {"penalty": pytest.approx(0.01 * float(np.sum(kernel**2)), rel=1e-5)}
    np.testing.assert_allclose(step.predict(prepared, rows), p, rtol=1e-5)


def test_class_metrics_are_accuracy_categorical_log_loss_and_one_vs_rest_auc() -> None:
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.5, 0.1, 0.4], [0.2, 0.3, 0.5]])
    m = class_metrics(LABELS, p)
    assert m["accuracy"] == pytest.approx(0.5)
    assert m["logloss"] == pytest.approx(-np.mean(np.log([0.7, 0.8, 0.4, 0.3])))
    # class 0: one positive scored 0.7 above all three negatives; class 1: 0.8 and 0.3 against 0.2 and 0.1 -> 1.0;
    # class 2: 0.4 against 0.1, 0.1, 0.5 -> 2/3
    assert m["auc"] == pytest.approx((1.0 + 1.0 + 2.0 / 3.0) / 3.0)
    ids = np.array([0, 1, 2, 1], np.float32)
    assert holdout_metrics([ids], [p]) == {"eval_samples": 4, **m}
    with pytest.raises(ValueError, match=r"class ids in \[0, 3\)"):
        one_hot(np.array([0.5, 3.0]), 3)
    assert math.isclose(class_metrics(np.array([[1, 0], [1, 0]]), np.array([[0.9, 0.1], [0.6, 0.4]]))["accuracy"], 1.0)
    assert class_metrics(np.array([[1, 0], [1, 0]]), np.array([[0.9, 0.1], [0.6, 0.4]]))["auc"] is None
