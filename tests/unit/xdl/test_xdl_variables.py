"""The XDL port's dense state beyond tf.layers.dense: tf.compat.v1.get_variable inside the model function (XDL's
Dice and PReLU slopes), xdl_ec.xdl.layers.batch_normalization with its moving statistics, and the test graph
(tf_wrapper(is_training=False), xdl_job's test=) over the same variables. Each is a small ported script that
trains as a job; bad uses are refused with a message that says what to do."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import xdl_ec.xdl as xdl  # noqa: E402 - the spelling of a ported script
from xdl_ec.xdl.xdl_model import XdlModel, XdlPortError  # noqa: E402

B, DIM, DEEP = 8, 4, 3


def batch(index: int = 0) -> dict:
    rng = np.random.default_rng(index)
    deep = rng.normal(size=(B, DEEP)).astype(np.float32)
    return {"label": (deep[:, :1] > 0).astype(np.float32), "ad": rng.integers(0, 40, B).astype(np.int64), "deep": deep}


def reader(worker: int, num_workers: int):  # noqa: ANN201
    return (batch(i) for i in range(worker, 6, num_workers))


def holdout():  # noqa: ANN201
    return (batch(100 + i) for i in range(2))


def prelu(x, scope=None):  # noqa: ANN001, ANN201 - XDL's PReLU: a slope per unit, by get_variable
    with tf.compat.v1.variable_scope(scope, default_name="prelu"):
        alpha = tf.compat.v1.get_variable(
            "alpha", shape=[x.get_shape()[-1]], dtype=x.dtype, initializer=tf.compat.v1.constant_initializer(0.25)
        )
    return tf.maximum(0.0, x) + alpha * tf.minimum(0.0, x)


def inputs(b):  # noqa: ANN001, ANN201
    return tf.concat([xdl.embedding("ads", b["ad"], xdl.TruncatedNormal(stddev=0.1), DIM, 40), b["deep"]], 1)


def with_prelu(b):  # noqa: ANN001, ANN201 - two default_name scopes: prelu and prelu_1, on every call
    h = prelu(xdl.layers.dense(inputs(b), 5, name="f1"))
    h = prelu(xdl.layers.dense(h, 5, name="f2"))
    return xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(h, 1, name="f3"))


def with_batch_norm(b, training=True):  # noqa: ANN001, ANN201
    x = xdl.layers.batch_normalization(inputs(b), training=training, name="bn1", momentum=0.9)
    return xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(x, 1, name="f1"))


def embedded_and_dense(seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    return (
        {"ad": tf.constant(rng.normal(size=(B, DIM)).astype(np.float32))},
        tf.constant(rng.normal(size=(B, DEEP)).astype(np.float32)),
    )


def by_path(model: XdlModel) -> dict:
    return {v.path: v for v in model.weights}


def test_get_variable_makes_trainable_variables_once_and_reuses_them_by_name() -> None:
    model = xdl.xdl_job(with_prelu, reader, xdl.SGD(0.1)).spec.model_fn()
    variables = by_path(model)
    slopes = sorted(p for p in variables if "alpha" in p)
    assert slopes == sorted(["xdl_model/prelu__alpha", "xdl_model/prelu_1__alpha"])  # prelu/alpha, prelu_1/alpha
    assert all(variables[p].trainable for p in slopes) and len(model.trainable_variables) == 8 == len(model.weights)
    for path in slopes:
        np.testing.assert_array_equal(variables[path].numpy(), np.full(5, 0.25, np.float32))  # the initializer given
    embedded, dense = embedded_and_dense()
    eager = model(embedded, dense).numpy()
    traced = tf.function(lambda e, d: model(e, d, training=True))(embedded, dense).numpy()
    assert by_path(model) == variables  # the same variables: none made by the later calls

    def expected(alphas: list) -> np.ndarray:
        x = np.concatenate([embedded["ad"].numpy(), dense.numpy()], 1)
        for layer, alpha in zip(model.made_layers[:2], alphas):
            z = x @ layer.kernel.numpy() + layer.bias.numpy()
            x = np.maximum(z, 0) + alpha * np.minimum(z, 0)
        return x @ model.made_layers[2].kernel.numpy() + model.made_layers[2].bias.numpy()

    np.testing.assert_allclose(eager, expected([0.25, 0.25]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(traced, eager, rtol=1e-6)
    variables["xdl_model/prelu_1__alpha"].assign(np.full(5, -2.0, np.float32))  # the call reads the variable
    np.testing.assert_allclose(model(embedded, dense).numpy(), expected([0.25, -2.0]), rtol=1e-5, atol=1e-6)


def test_a_ported_script_with_get_variable_trains_its_slopes_as_a_job() -> None:
    job = xdl.xdl_job(with_prelu, reader, xdl.SGD(0.5), eval_reader=holdout)
    report = job.fit(deterministic=True, seed=1)
    assert report["steps"] == 6
    slopes = [v.numpy() for v in job.model.dense.model.trainable_variables if "alpha" in v.path]
    assert len(slopes) == 2 and not np.allclose(slopes[0], 0.25) and not np.allclose(slopes[1], 0.25)
    again = xdl.xdl_job(with_prelu, reader, xdl.SGD(0.5), eval_reader=holdout).fit(deterministic=True, seed=1)
    assert again["model_digest"] == report["model_digest"]


def test_batch_normalization_moves_its_statistics_in_training_calls_only() -> None:
    model = xdl.xdl_job(with_batch_norm, reader, xdl.SGD(0.1)).spec.model_fn()
    bn, dense_layer = model.made_layers
    assert [v.path for v in model.non_trainable_weights] == ["bn1/moving_mean", "bn1/moving_variance"]
    assert len(model.trainable_variables) == 4  # gamma, beta, kernel, bias
    np.testing.assert_array_equal(bn.moving_mean.numpy(), np.zeros(DIM + DEEP))  # the build moved nothing
    np.testing.assert_array_equal(bn.moving_variance.numpy(), np.ones(DIM + DEEP))
    embedded, dense = embedded_and_dense()
    x = np.concatenate([embedded["ad"].numpy(), dense.numpy()], 1)
    kernel, bias = dense_layer.kernel.numpy(), dense_layer.bias.numpy()
    inference = model(embedded, dense, training=False).numpy()
    np.testing.assert_allclose(inference, x / np.sqrt(1 + 1e-3) @ kernel + bias, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(bn.moving_mean.numpy(), np.zeros(DIM + DEEP))
    training = tf.function(lambda e, d: model(e, d, training=True))(embedded, dense).numpy()
    mean, var = x.mean(0), x.var(0)
    np.testing.assert_allclose(training, (x - mean) / np.sqrt(var + 1e-3) @ kernel + bias, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.moving_mean.numpy(), 0.1 * mean, rtol=1e-5, atol=1e-7)  # momentum 0.9
    np.testing.assert_allclose(bn.moving_variance.numpy(), 0.9 + 0.1 * var, rtol=1e-5)
    assert not np.allclose(training, inference, atol=1e-3)


def test_batch_normalization_with_training_false_never_moves() -> None:
    model = xdl.xdl_job(lambda b: with_batch_norm(b, training=False), reader, xdl.SGD(0.1)).spec.model_fn()
    embedded, dense = embedded_and_dense()
    assert np.allclose(model(embedded, dense, training=True).numpy(), model(embedded, dense).numpy())
    np.testing.assert_array_equal(model.made_layers[0].moving_mean.numpy(), np.zeros(DIM + DEEP))


def test_a_ported_script_with_batch_normalization_trains_as_a_job_and_predicts_on_the_moving_statistics() -> None:
    job = xdl.xdl_job(with_batch_norm, reader, xdl.Adam(0.01), eval_reader=holdout)
    report = job.fit(deterministic=True, seed=1)
    model = job.model.dense.model
    bn = model.made_layers[0]
    assert not np.allclose(bn.moving_mean.numpy(), 0.0) and not np.allclose(bn.moving_variance.numpy(), 1.0)
    embedded, dense = embedded_and_dense(5)
    moving = model(embedded, dense, training=False).numpy()
    assert not np.allclose(model(embedded, dense, training=True).numpy(), moving, atol=1e-3)
    # the job's prediction is the inference mode's: one example's probability does not depend on its batch
    first = next(iter(job.spec.input_fn(0, 1)))
    alone = {key: value[:1] for key, value in first.items()}
    np.testing.assert_allclose(job.model.predict(alone), job.model.predict(first)[:1], rtol=1e-5)
    again = xdl.xdl_job(with_batch_norm, reader, xdl.Adam(0.01), eval_reader=holdout).fit(deterministic=True, seed=1)
    assert again["model_digest"] == report["model_digest"] and again["auc"] == report["auc"]


RAN: list = []


@xdl.tf_wrapper(is_training=True)
def tf_train_model(x, label):  # noqa: ANN001, ANN201
    RAN.append("train")
    with tf.compat.v1.variable_scope("tf_model", reuse=tf.compat.v1.AUTO_REUSE):
        h = prelu(xdl.layers.batch_normalization(xdl.layers.dense(x, 5, name="f1"), training=True, name="bn1"))
        y = xdl.layers.dense(h, 1, name="f2")
    return xdl.losses.sigmoid_cross_entropy(label, y), tf.sigmoid(y)


@xdl.tf_wrapper(is_training=False)
def tf_test_model(x, label):  # noqa: ANN001, ANN201 - XDL's test graph: the same code, its predictions first
    RAN.append("test")
    with tf.compat.v1.variable_scope("tf_model", reuse=tf.compat.v1.AUTO_REUSE):
        h = prelu(xdl.layers.batch_normalization(xdl.layers.dense(x, 5, name="f1"), training=True, name="bn1"))
        y = xdl.layers.dense(h, 1, name="f2")
    loss = xdl.losses.sigmoid_cross_entropy(label, y)
    return tf.sigmoid(y), loss


def test_the_test_graph_runs_where_the_job_evaluates_over_the_same_variables() -> None:
    job = xdl.xdl_job(
        lambda b: tf_train_model(inputs(b), b["label"]),
        reader,
        xdl.Adam(0.01),
        eval_reader=holdout,
        test=lambda b: tf_test_model(inputs(b), b["label"]),
    )
    model = job.spec.model_fn()
    slopes = [v.path for v in model.trainable_variables if "alpha" in v.path]
    assert slopes == ["xdl_model/tf_model__prelu__alpha"]  # one default_name scope, the same name in both graphs
    count = len(model.weights)
    RAN.clear()
    embedded, dense = embedded_and_dense()
    model(embedded, dense, training=True)
    model(embedded, dense)
    assert RAN == ["train", "test"] and len(model.weights) == count
    RAN.clear()
    report = job.fit(deterministic=True, seed=1)
    # 6 training steps on the training graph; the hold-out's 2 batches on the test graph
    assert report["steps"] == 6 and report["eval_samples"] == 2 * B
    assert {"train", "test"} <= set(RAN)


def test_xdl_names_stay_importable_as_xdl_spells_them() -> None:
    assert xdl.layers.batch_normalization.__name__ == "_batch_normalization"
    assert tf_test_model.__name__ == "tf_test_model" and tf_test_model.__module__ == __name__  # pickles by its name


def _model(b):  # noqa: ANN001, ANN202
    return inputs(b)


@pytest.mark.parametrize(
    "train,test,message",
    [
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"],
                xdl.layers.dense(
                    tf.concat(
                        [
                            prelu(_model(b), "p"),
                            tf.compat.v1.get_variable("p/alpha", [3], initializer=tf.compat.v1.zeros_initializer())[
                                None, :
                            ]
                            * tf.ones((1, 1)),
                        ],
                        1,
                    ),
                    1,
                ),
            ),
            None,
            r"tf.compat.v1.get_variable\('p/alpha'\): shape \[3\] \(float32\) differs from the variable of that name, "
            r"\[7\] \(float32\): a name is one variable",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"],
                xdl.layers.dense(
                    _model(b) * tf.compat.v1.get_variable("w", [7], constraint=tf.keras.constraints.NonNeg()), 1
                ),
            ),
            None,
            r"get_variable\('w'\): constraint not supported",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"], xdl.layers.dense(_model(b) * tf.compat.v1.get_variable("w", [7], trainable=False), 1)
            ),
            None,
            r"trainable=False not supported",
        ),
        (
            with_prelu,
            lambda b: xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(prelu(_model(b), "new"), 1)),
            r"get_variable\('new/alpha'\): the test function \(is_training=False\) asks for a variable the model "
            r"function "
            r"did not make",
        ),
        (
            with_prelu,
            lambda b: xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(_model(b), 2)),
            r"layer call 1: xdl_ec.xdl.layers.dense\(2, .*\) differs from the first call's "
            r"xdl_ec.xdl.layers.dense\(5, ",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(_model(b), 1)),
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"],
                xdl.layers.dense(tf.concat([xdl.embedding("ads", b["ad"], "zeros", DIM, 40), b["deep"]], 1), 1),
            ),
            r"the test function looks up .* the model function .* both graphs read the same entries",
        ),
        (
            lambda b: tf_test_model(_model(b), b["label"]),
            None,
            r"tf_test_model: a tf_wrapper\(is_training=False\) function \(XDL's eval graph, which computes no "
            r"gradients\) ran "
            r"in the model function the job trains; give the function that builds the eval graph as "
            r"xdl_ec.xdl.xdl_job\(..., test=...\)",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"], xdl.layers.dense(xdl.layers.batch_normalization(_model(b), training=tf.constant(True)), 1)
            ),
            None,
            r"batch_normalization: training must be a Python bool",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"], xdl.layers.dense(xdl.layers.batch_normalization(_model(b), reuse=True), 1)
            ),
            None,
            r"test_xdl_variables.py:\d+: xdl_ec.xdl.layers.batch_normalization: reuse=True needs the layer's name",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"], tf.keras.layers.BatchNormalization()(_model(b))[:, :1]
            ),
            None,
            r"created a variable \('gamma'\) outside xdl_ec.xdl.layers.dense, xdl_ec.xdl.layers.batch_normalization "
            r"and "
            r"tf.compat.v1.get_variable",
        ),
    ],
)
def test_bad_uses_are_refused_when_the_job_is_made(train, test, message: str) -> None:  # noqa: ANN001
    with pytest.raises(XdlPortError, match=message):
        xdl.xdl_job(train, reader, xdl.SGD(0.1), test=test)


def test_a_variable_first_asked_for_after_the_build_is_refused() -> None:
    calls = []

    def growing(b):  # noqa: ANN001, ANN202 - a new slope from the third call on
        calls.append(1)
        x = _model(b)
        if len(calls) > 2:
            x = prelu(x, "late")
        return xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(x, 1))

    model = xdl.xdl_job(growing, reader, xdl.SGD(0.1)).spec.model_fn()  # calls 1 (the trace) and 2 (the build)
    with pytest.raises(
        XdlPortError,
        match=r"get_variable\('late/alpha'\): the model function asks for a variable "
        r"the model function did not make on its first call",
    ):
        model(*embedded_and_dense())
    with pytest.raises(XdlPortError, match="training must be a Python bool"):
        model(*embedded_and_dense(), training=tf.constant(True))
