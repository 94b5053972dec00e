"""The XDL port's adapter (xdl_ec.xdl.xdl_job, xdl_ec.xdl.xdl_model): what the trace finds in a model function, the
Keras model that runs it again (layers reused by call order), the batches it maps, and every unsupported use refused
with a message that says what to do."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import xdl_ec  # noqa: E402
import xdl_ec.xdl as xdl  # noqa: E402 - the spelling of a ported script
from xdl_ec.model.feature_batch import InputError  # noqa: E402
from xdl_ec.sparse import init, optim  # noqa: E402
from xdl_ec.xdl.api import dense_optimizer_config  # noqa: E402
from xdl_ec.xdl.xdl_model import XdlModel, XdlPortError  # noqa: E402

B = 4


def batch(index: int = 0) -> dict:
    rng = np.random.default_rng(index)
    return {
        "label": rng.integers(0, 2, (B, 1)).astype(np.float32),
        "ad": rng.integers(0, 50, B).astype(np.int64),
        "clicked": rng.integers(0, 50, (B, 3)).astype(np.int64),
        "deep0": rng.normal(size=(B, 3)).astype(np.float32),
        "deep1": rng.normal(size=(B, 2)).astype(np.float32),
    }


def reader(worker: int, num_workers: int):  # noqa: ANN201
    return (batch(i) for i in range(worker, 4, num_workers))


def two_tower(b):  # noqa: ANN001, ANN201 - a model function as a ported script writes it
    ad = xdl.embedding("ads", b["ad"], xdl.TruncatedNormal(stddev=0.01), 4, 50)
    clicked = xdl.embedding(
        "ads", b["clicked"], xdl.TruncatedNormal(stddev=0.01), 4, 50, combiner="mean", optimizer=xdl.SGD(0.1)
    )
    h = xdl.layers.dense(tf.concat([b["deep0"], ad, clicked, b["deep1"]], 1), 6, activation=tf.nn.relu)
    y = xdl.layers.dense(h, 1)
    return xdl.losses.sigmoid_cross_entropy(b["label"], y), tf.sigmoid(y)


def per_table(b):  # noqa: ANN001, ANN201
    ad = xdl.embedding("ads", b["ad"], xdl.Zeros(), 4, 50, vtype="index")
    clicked = xdl.embedding("clicks", b["clicked"], "zeros", 2, 50, combiner=None)
    flat = tf.reshape(clicked, (-1, 6))
    y = xdl.layers.dense(tf.concat([b["deep0"], ad, flat, b["deep1"]], 1), 1)
    return xdl.losses.sigmoid_cross_entropy(b["label"], y)


def test_the_trace_finds_tables_features_and_optimizers() -> None:
    job = xdl.xdl_job(per_table, reader, xdl.Adagrad(0.05))
    assert [(t.name, t.dim, t.optimizer, t.initializer) for t in job.tables] == [
        ("ads", 4, optim.Adagrad(0.05), init.Zeros()),
        ("clicks", 2, optim.Adagrad(0.05), init.Zeros()),
    ]
    assert [(f.name, f.table.name, f.combiner, f.shared_ids) for f in job.features] == [
        ("ad", "ads", "sum", True),
        ("clicked", "clicks", None, True),
    ]
    # XDL's one optimizer trains the dense layers too, as the Keras optimizer of the same name and settings
    assert job.spec.dense_optimizer == {
        "class_name": "Adagrad",
        "config": {"learning_rate": 0.05, "epsilon": 1e-7, "initial_accumulator_value": 0.1},
    }


def test_two_entries_looked_up_in_one_table_share_its_rows() -> None:
    with pytest.raises(XdlPortError, match="the table is used with different settings"):
        xdl.xdl_job(two_tower, reader, xdl.Adam(0.01))  # one table, two optimizers

    def shared(b):  # noqa: ANN001, ANN202
        ad = xdl.embedding("ads", b["ad"], xdl.TruncatedNormal(stddev=0.01), 4, 50)
        clicked = xdl.embedding("ads", b["clicked"], xdl.TruncatedNormal(stddev=0.01), 4, 50, combiner="mean")
        y = xdl.layers.dense(tf.concat([b["deep0"], ad, clicked, b["deep1"]], 1), 1)
        return xdl.losses.sigmoid_cross_entropy(b["label"], y)

    job = xdl.xdl_job(shared, reader, xdl.Adam(0.01))
    assert [t.name for t in job.tables] == ["ads"]
    assert [(f.name, f.table is job.tables[0], f.shared_ids) for f in job.features] == [
        ("ad", True, True),
        ("clicked", True, True),
    ]
    report = job.fit(deterministic=True)
    assert report["steps"] == 4
    rows = job.model.tables.tables["ads"]
    ids = np.unique(np.concatenate([np.concatenate([b["ad"], b["clicked"].ravel()]) for b in reader(0, 1)]))
    assert len(rows) == len(ids)  # the ids are the keys, unsalted: one row per distinct id of both entries


def test_the_model_makes_its_layers_once_and_reuses_them_by_call_order() -> None:
    job = xdl.xdl_job(per_table, reader, xdl.SGD(0.1))
    model = job.spec.model_fn()
    assert isinstance(model, XdlModel) and len(model.trainable_variables) == 2
    kernel, bias = (v.numpy() for v in model.trainable_variables)
    assert kernel.shape == (3 + 4 + 6 + 2, 1)
    rng = np.random.default_rng(1)
    embedded = {
        "ad": rng.normal(size=(B, 4)).astype(np.float32),
        "clicked": rng.normal(size=(B, 3, 2)).astype(np.float32),
    }
    dense = rng.normal(size=(B, 5)).astype(np.float32)  # deep0 then deep1, in the reader's order
    logits = model(embedded, tf.constant(dense)).numpy()
    again = tf.function(lambda e, d: model(e, d))(embedded, tf.constant(dense)).numpy()
    expected = (
        np.concatenate([dense[:, :3], embedded["ad"], embedded["clicked"].reshape(B, 6), dense[:, 3:]], axis=1) @ kernel
        + bias
    )
    np.testing.assert_allclose(logits, expected, rtol=1e-5)
    np.testing.assert_allclose(again, expected, rtol=1e-5)
    assert len(model.trainable_variables) == 2


def test_reader_batches_become_the_jobs_batches() -> None:
    job = xdl.xdl_job(per_table, reader, xdl.SGD(0.1))
    first = next(iter(job.spec.input_fn(0, 1)))
    raw = batch(0)
    assert sorted(first) == ["ad", "clicked", "dense", "label"]
    np.testing.assert_array_equal(first["dense"], np.concatenate([raw["deep0"], raw["deep1"]], axis=1))
    np.testing.assert_array_equal(first["clicked"], raw["clicked"])
    assert [len(b["label"]) for b in job.spec.input_fn(1, 2)] == [B, B]  # worker 1 of 2: batches 1 and 3


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda b: b.pop("deep1"), r"reader\(0, 1\) batch 2: the batch's entries .* differ from the reader's first"),
        (lambda b: b.update(deep0=np.zeros((B, 4), np.float32)), r"dense entry 'deep0' must be float \[B, 3\]"),
        (
            lambda b: b.update(ad=np.full(B, 50, np.int64)),
            r"feature 'ad': table 'ads' has vtype='index', so its ids must lie in \[0, feature_dim=50\), got ids "
            r"from 50",
        ),
    ],
)
def test_a_bad_reader_batch_names_the_batch(change, message: str) -> None:  # noqa: ANN001
    def bad_reader(worker: int, num_workers: int):  # noqa: ANN202
        for i, b in enumerate(reader(worker, num_workers)):
            if i == 1:
                change(b)
            yield b

    job = xdl.xdl_job(per_table, bad_reader, xdl.SGD(0.1))
    with pytest.raises(InputError, match=message):
        list(job.spec.input_fn(0, 1))


def test_dense_optimizer_configs_make_the_keras_optimizer_of_the_same_name() -> None:
    import keras

    for optimizer, name in [
        (xdl.SGD(0.5), "SGD"),
        (xdl.Momentum(0.1, 0.8, use_nesterov=True), "SGD"),
        (xdl.Adagrad(0.1), "Adagrad"),
        (xdl.Adam(0.01), "Adam"),
        (xdl.Ftrl(0.1, l1_regularization_strength=0.01), "Ftrl"),
    ]:
        config = dense_optimizer_config(optimizer)
        made = keras.optimizers.get(config)
        assert type(made).__name__ == name
        assert made.get_config()["learning_rate"] == pytest.approx(optimizer.learning_rate)
        for key, value in config["config"].items():
            assert made.get_config()[key] == pytest.approx(value)


def _job_of(body) -> xdl_ec.Job:  # noqa: ANN001
    return xdl.xdl_job(body, reader, xdl.SGD(0.1))


def _model(b, hidden=None):  # noqa: ANN001, ANN202
    ad = xdl.embedding("ads", b["ad"], "zeros", 4, 50)
    clicked = xdl.embedding("clicks", b["clicked"], "zeros", 4, 50)
    x = tf.concat([b["deep0"], ad, clicked, b["deep1"]], 1)
    return x if hidden is None else hidden(x)


@pytest.mark.parametrize(
    "body,message",
    [
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(b["label"], tf.keras.layers.Dense(1)(_model(b))),
            r"created a variable \('kernel'\) outside xdl_ec.xdl.layers.dense",
        ),
        (
            lambda b: tf.reduce_mean(xdl.layers.dense(_model(b), 1)),
            r"test_xdl_adapter.py:\d+: the model function returns no predictions .* and marks no logits",
        ),
        (
            lambda b: xdl.layers.dense(_model(b), 1),
            r"must return the loss it computed from the batch first \(a float scalar tensor.*\[1, 1\] first",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(_model(b), 1), weights=2.0),
            r"only the defaults \(the mean over the batch\)",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(_model(b), 3)),
            r"test_xdl_adapter.py:\d+: .*labels \[1, 1\] and logits \[1, 3\] differ in shape",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"], xdl.layers.dense(_model(b), 1, kernel_regularizer=tf.keras.regularizers.L2(0.1))
            ),
            r"xdl_ec.xdl.layers.dense: kernel_regularizer not supported",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"], xdl.layers.dense(xdl.embedding("ads", tf.cast(b["ad"], tf.int64), "zeros", 4, 50), 1)
            ),
            r"batch\['ad'\] \(a sparse feature's ids\) cannot be used as a tensor",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"],
                xdl.layers.dense(
                    xdl.embedding("ads", b["ad"], "zeros", 4, 50) + xdl.embedding("clicks", b["ad"], "zeros", 4, 50), 1
                ),
            ),
            r"batch\['ad'\] is already looked up in table 'ads'; the job gives each batch entry one table",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"], xdl.layers.dense(xdl.embedding("ads", b["ad"], "zeros", 4, 50), 1)
            ),
            r"batch entries \['clicked'\] hold integer ids that no xdl_ec.xdl.embedding reads",
        ),
        (
            lambda b: xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(_model(b)[:, :1] + b["nope"], 1)),
            r"the batch has no entry 'nope'; the reader's batches have \['ad', 'clicked', 'deep0', 'deep1', 'label'\]",
        ),
    ],
)
def test_unsupported_uses_in_the_model_function_are_refused_at_the_trace(body, message: str) -> None:  # noqa: ANN001
    with pytest.raises((XdlPortError, KeyError), match=message):
        _job_of(body)


@pytest.mark.parametrize(
    "change,message",
    [
        ("more", r"the model function makes more layer calls than the model function's first call made \(2\)"),
        ("fewer", r"the model function made 1 layer calls, the model function's first call 2"),
        (
            "wider",
            r"layer call 1: xdl_ec.xdl.layers.dense\(3, .*\) differs from the first call's "
            r"xdl_ec.xdl.layers.dense\(2, ",
        ),
        ("lookups", r"looked up \['ad'\], on its first call \['ad', 'clicked'\]: it must make the same lookups"),
    ],
)
def test_a_model_function_that_changes_between_calls_is_refused(change: str, message: str) -> None:
    calls = []

    def changing(b):  # noqa: ANN001, ANN202 - a Python counter: another model from the third call on
        calls.append(1)
        later = len(calls) > 2
        if later and change == "lookups":
            ad = xdl.embedding("ads", b["ad"], "zeros", 4, 50)
            x = tf.concat([b["deep0"], ad, tf.zeros_like(ad), b["deep1"]], 1)
        else:
            x = _model(b)
        h = xdl.layers.dense(x, 3 if later and change == "wider" else 2)
        y = h[:, :1] if later and change == "fewer" else xdl.layers.dense(h, 1)
        if later and change == "more":
            y = xdl.layers.dense(y, 1)
        return xdl.losses.sigmoid_cross_entropy(b["label"], y)

    model = _job_of(changing).spec.model_fn()  # the trace and the model's build: calls 1 and 2
    with pytest.raises(XdlPortError, match=message):
        model({"ad": tf.zeros((1, 4)), "clicked": tf.zeros((1, 4))}, tf.zeros((1, 5)))


@pytest.mark.parametrize(
    "call,error,message",
    [
        (
            lambda: xdl.layers.dense(tf.zeros((1, 2)), 1),
            XdlPortError,
            r"xdl_ec.xdl.layers.dense: only inside the model function of xdl_ec.xdl.xdl_job",
        ),
        (lambda: xdl.tf_wrapper(init_grad=1.0), ValueError, r"is_training=True, init_grad=1.0 not supported"),
        (lambda: xdl.TruncatedNormal(stddev=0.1, seed=7), ValueError, r"seed the table instead: xdl_ec.xdl.embedding"),
        (
            lambda: xdl.embedding("t", tf.constant([[1]], tf.int64), "zeros", 4, 10, cbf=3),
            ValueError,
            r"XDL's cbf=3 is not supported \(counting-bloom-filter feature admission",
        ),
        (
            lambda: xdl.embedding("t", tf.constant([[1]], tf.int64), "zeros", 4, 10, shards=3),
            TypeError,
            r"unexpected keyword argument\(s\) \['shards'\]",
        ),
        (
            lambda: xdl_ec.Saver(),
            AttributeError,
            r"xdl_ec.Saver: XDL's Saver is not ported; fault tolerance is the "
            r"cluster's",
        ),
        (lambda: xdl_ec.no_such_name, AttributeError, r"module 'xdl_ec' has no attribute 'no_such_name'"),
        (lambda: xdl.xdl_job(per_table, lambda w, n: iter(()), xdl.SGD(0.1)), InputError, r"yielded no batch"),
    ],
)
def test_xdl_names_and_arguments_without_a_counterpart_say_so(call, error: type, message: str) -> None:  # noqa: ANN001
    with pytest.raises(error, match=message):
        call()


def test_xdl_names_keep_xdls_defaults() -> None:
    assert xdl.TruncatedNormal() == init.TruncatedNormal(0.0, 1.0)
    assert xdl.RandomUniform() == init.RandomUniform(0.0, 1.0) and xdl.Ones() == init.Constant(1.0)
    assert xdl.VarType.Index == "index" and xdl.VarType.Hash128 == "hash"
    # ignored XDL tuning arguments leave the in-process embedding as it was
    out = xdl.embedding(
        "hinted", tf.constant([[1, 2]], tf.int64), xdl.Zeros(), 2, 10, batch_read=100, device="CPU", save=True
    )
    assert out.shape == (1, 2)
    xdl_ec.xdl.clear_tables()
