"""The job contract's production parts (issue #33) on one batch: several labels and heads with a loss per head,
behaviour sequences (ids and lengths, or ragged), ids of rank 3, side inputs, non-trainable dense state; and every
contract break an InputError or ModelError naming the entry, the worker and the step, before anything is applied."""

from __future__ import annotations

import os
from typing import Any, Dict, List

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import xdl_ec  # noqa: E402
from xdl_ec.model.dense_model import DenseModel, ModelError  # noqa: E402
from xdl_ec.model.feature_batch import SEQUENCE, FeatureBatch, InputError  # noqa: E402
from xdl_ec.model.input_stream import InputStream  # noqa: E402
from xdl_ec.model.job_spec import JobSpec  # noqa: E402
from xdl_ec.model.model_step import ModelStep  # noqa: E402

ITEMS = xdl_ec.Table("items", dim=4)
ITEM = xdl_ec.Feature("item", ITEMS, shared_ids=True)
HIST = xdl_ec.Feature("hist", ITEMS, shared_ids=True, sequence=True, max_length=4)
NEGATIVES = xdl_ec.Feature("negatives", ITEMS, shared_ids=True)  # [B, T, n] with no combiner
HOUR = xdl_ec.Input("hour", "int64", ())


def batch(**over: Any) -> Dict[str, Any]:
    out = {
        "labels": {"click": np.array([1, 0, 1], np.float32), "buy": np.array([1, 0, 0], np.float32)},
        "item": np.array([7, 8, 9], np.int64),
        "hist": (np.array([[1, 2, 0, 0], [3, 0, 0, 0], [7, 8, 9, 1]], np.int64), np.array([2, 1, 4])),
        "negatives": np.arange(3 * 2 * 2, dtype=np.int64).reshape(3, 2, 2) + 100,
        "hour": np.array([1, 2, 3], np.int64),
    }
    out.update(over)
    return out


def prepare(b: Dict[str, Any], heads: Any = ("buy", "click")) -> FeatureBatch:
    return FeatureBatch.prepare(b, [ITEM, HIST, NEGATIVES], "worker 1, step 7", [HOUR], heads)


def test_a_sequence_looks_up_only_the_ids_within_each_length() -> None:
    prepared = prepare(batch())
    keys = prepared.keys["items"]
    assert set(keys.tolist()) == {7, 8, 9, 1, 2, 3} | set(range(100, 112))  # padding 0 never looked up
    ids = prepared.ids["hist"]
    assert ids.kind == SEQUENCE and ids.inverse.shape == (3, 4)
    np.testing.assert_array_equal(ids.inverse < 0, [[0, 0, 1, 1], [0, 1, 1, 1], [0, 0, 0, 0]])
    assert keys[ids.inverse[2, 3]] == 1 and keys[ids.inverse[0, 1]] == 2
    assert prepared.ids["negatives"].width == (2, 2)
    assert prepared.heads == ("buy", "click") and prepared.labels["buy"].tolist() == [1, 0, 0]
    ragged = prepare(batch(hist=tf.ragged.constant([[1, 2], [3], [7, 8, 9, 1]], dtype=tf.int64)))
    np.testing.assert_array_equal(ragged.ids["hist"].inverse, ids.inverse)


@pytest.mark.parametrize(
    "over,message",
    [
        ({"labels": {"click": np.ones(3, np.float32)}}, r"'labels' lack head\(s\) \['buy'\]"),
        ({"label": np.ones(3, np.float32)}, "both 'label' and 'labels'"),
        ({"hist": (np.zeros((3, 4), np.int64), np.array([2, 5, 1]))}, r"lengths must lie in \[0, T = 4\], got 5"),
        ({"hist": (np.zeros((3, 6), np.int64), np.array([2, 5, 1]))}, "longer than the declared max_length 4"),
        ({"hist": (np.zeros((3, 4), np.int64), np.ones((3, 4), bool))}, r"a mask\?\); pass mask.sum\(axis=1\)"),
        ({"hist": np.zeros((3, 4), np.int64)}, r"takes \(ids int \[B, T\], lengths int \[B\]\)"),
        ({"hour": np.array([0.5, 1.0, 2.0])}, "input 'hour' must be int64, got float64"),
        ({"hour": np.zeros((3, 2), np.int64)}, r"input 'hour' must be shaped \[B\] with B = 3"),
        ({"negatives": np.zeros((3, 2, 0), np.int64)}, r"ids must be \[B\], \[B, n\] or \[B, T, n\]"),
    ],
)
def test_contract_breaks_name_the_entry_worker_and_step(over: Dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=r"worker 1, step 7: .*" + message):
        prepare(batch(**over))


def test_a_missing_side_input_or_label_is_named() -> None:
    b = batch()
    del b["hour"]
    with pytest.raises(InputError, match=r"lacks declared side input\(s\) \['hour'\]"):
        prepare(b)
    b = batch()
    del b["labels"]
    with pytest.raises(InputError, match=r"loss names heads \['buy', 'click'\]"):
        prepare(b)


def test_heads_that_change_between_batches_are_an_input_error_naming_worker_and_step() -> None:
    def input_fn(worker: int, count: int) -> Any:
        yield batch()
        yield batch(
            labels={"click": np.ones(3, np.float32), "buy": np.ones(3, np.float32), "cart": np.ones(3, np.float32)}
        )

    stream = InputStream(input_fn, 0, 1, [ITEM, HIST, NEGATIVES], inputs=[HOUR])
    assert stream.next() is not None
    with pytest.raises(InputError, match=r"worker 0, step 2: the batch's heads \('buy', 'cart', 'click'\)"):
        stream.next()
    stream.close()


class Probe(tf.keras.Model):
    """Two heads over a sequence's masked mean, rank-3 ids and a side input; records what it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.click, self.buy = tf.keras.layers.Dense(1), tf.keras.layers.Dense(1)
        self.norm = tf.keras.layers.BatchNormalization(momentum=0.5)
        self.seen: List[Any] = []

    def call(self, embedded, inputs, training=False):  # noqa: ANN001, ANN201
        self.seen.append((embedded, inputs))
        mask = tf.cast(embedded["hist_mask"], tf.float32)[:, :, None]
        # the contract: rows past each length are zeros (checked on every call, in the traced step too)
        tf.debugging.assert_equal(tf.reduce_sum(tf.abs(embedded["hist"] * (1.0 - mask))), 0.0)
        hist = tf.reduce_sum(embedded["hist"], 1)
        negatives = tf.reduce_sum(embedded["negatives"], [1, 2])
        x = self.norm(
            tf.concat([hist, negatives, embedded["item"], tf.cast(inputs["hour"], tf.float32)[:, None]], 1),
            training=training,
        )
        return {"click": self.click(x), "buy": self.buy(x)[:, 0]}


def spec(loss: Any = None, **kw: Any) -> JobSpec:
    return JobSpec(
        (ITEMS,),
        (ITEM, HIST, NEGATIVES),
        Probe,
        lambda w, n: iter(()),
        loss or {"click": "binary_crossentropy", "buy": "binary_crossentropy"},
        inputs=(HOUR,),
        **kw,
    )


def rows_of(prepared: FeatureBatch) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"items": rng.normal(size=(prepared.keys["items"].size, 4)).astype(np.float32)}


def test_the_step_gives_the_model_sequences_rank3_rows_side_inputs_and_weighs_its_heads() -> None:
    job = spec(loss_weights={"buy": 0.25})
    prepared = prepare(batch(), job.heads)
    dense = DenseModel(job.model_fn, "sgd", 0.1, prepared.signature(), job.dims(), job.combiners(), 0)
    step = ModelStep.of(job, dense, prepared.signature())
    rows = rows_of(prepared)
    before = [np.asarray(v) for v in dense.statistics]
    loss, update, row_grads = step.train(prepared, rows)
    embedded, inputs = dense.model.seen[-1]
    assert embedded["hist"].shape[-1] == 4 and tuple(embedded["negatives"].shape[1:]) == (2, 2, 4)
    assert embedded["hist_mask"].dtype == tf.bool
    assert set(inputs) == {"dense", "hour"} and inputs["dense"] is None
    # the loss: click's cross-entropy plus a quarter of buy's (the same training forward under other weights)
    click_only = ModelStep.of(spec(loss_weights={"buy": 0.0}), dense, prepared.signature()).train(prepared, rows)[0]
    both = ModelStep.of(spec(), dense, prepared.signature()).train(prepared, rows)[0]
    assert loss == pytest.approx(click_only + 0.25 * (both - click_only), rel=1e-5) and both > click_only
    # the dense update: the gradients, then the BatchNorm statistics as the training step left them
    assert len(update) == len(dense.model.trainable_variables) + 2
    assert not np.allclose(update[-2], before[0])
    assert row_grads["items"].shape == rows["items"].shape
    dense.apply(update)
    np.testing.assert_array_equal(np.asarray(dense.statistics[0]), update[-2])
    assert len(dense.weights()) == len(dense.model.trainable_variables) + 2  # statistics are in the state


def test_heads_the_model_and_the_batches_disagree_on_are_a_model_error() -> None:
    job = spec(loss=lambda labels, logits: 0.0)
    single = {k: v for k, v in batch(label=np.ones(3, np.float32)).items() if k != "labels"}
    one = FeatureBatch.prepare(single, [ITEM, HIST, NEGATIVES], "worker 0, step 1", [HOUR])
    with pytest.raises(ModelError, match="returned a dict of heads"):
        DenseModel(job.model_fn, "sgd", 0.1, one.signature(), job.dims(), job.combiners(), 0)


def test_a_multi_class_head_wants_labels_of_its_classes_and_features_want_tables() -> None:
    class Softmax(tf.keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.out = tf.keras.layers.Dense(3)

        def call(self, embedded, dense, training=False):  # noqa: ANN001, ANN201
            return self.out(embedded["item"])

    prepared = FeatureBatch.prepare({"label": np.ones(2, np.float32), "item": np.array([1, 2])}, [ITEM], "w")
    dense = DenseModel(Softmax, "sgd", 0.1, prepared.signature(), {"item": 4}, {"item": None}, 0)
    assert dense.classes == 3  # logits [B, 3]: trained with softmax against labels [B, 3]
    job = JobSpec((ITEMS,), (ITEM,), Softmax, lambda w, n: iter(()))
    step = ModelStep.of(job, dense, prepared.signature())
    with pytest.raises(ModelError, match=r"its labels are \[B\], the model's labels \[B, 3\] \(3 classes\)"):
        step.train(prepared, {"items": np.zeros((2, 4), np.float32)})
    with pytest.raises(ValueError, match="the features look ids up in tables; give the job their tables"):
        JobSpec((), (ITEM,), Softmax, lambda w, n: iter(()))
    with pytest.raises(ValueError, match="loss_weights: weights the heads of a loss given as a dict"):
        JobSpec((ITEMS,), (ITEM,), Softmax, lambda w, n: iter(()), loss_weights={"click": 1.0})
    with pytest.raises(ValueError, match="a sequence keeps one row per position"):
        xdl_ec.Feature("hist", ITEMS, sequence=True, combiner="mean")
    with pytest.raises(ValueError, match="its mask reaches the model as 'hist_mask'"):
        JobSpec((ITEMS,), (HIST, xdl_ec.Feature("hist_mask", ITEMS)), Softmax, lambda w, n: iter(()))
