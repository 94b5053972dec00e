"""XDL's own scripts in their own shape (alibaba/x-deeplearning: xdl-algorithm-solution's DIN and GwEN, the estimator
test and mnist in xdl/examples), written here small, after docs/porting-xdl.md's renames only: each model function
computes its loss from the labels in the batch (DIN's hand-written cross entropy over a two-way softmax and labels
[B, 2], GwEN's tf.compat.v1.losses.softmax_cross_entropy, the estimator test's sigmoid cross entropy with a bias that
feeds no loss and a regularizer, mnist's sparse softmax over 10 classes without a table, DIEN's auxiliary loss on TF
1's own cells through XDL's rnn.py) and returns it with its other outputs. Each trains, to one digest in one process
and on three erasure-coded servers with one killed, and its SavedModel serves, in an interpreter with TensorFlow
alone, what the trained model predicts. examples/xdl_dien.py (DIEN on xdl.rnn) gets its killed server on Ray only:
in one process its cluster run is the file's costliest, and DIEN's in-process kill is the TF 1 port's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Tuple

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

tf = pytest.importorskip("tensorflow")

# XDL's DIEN utils.py imports its cells' base as written (TF 2.21 still has it); _Linear left with tf.contrib
from tensorflow.python.ops import array_ops, init_ops, math_ops  # noqa: E402
from tensorflow.python.ops import variable_scope as vs  # noqa: E402
from tensorflow.python.ops.rnn_cell_impl import RNNCell  # noqa: E402

import xdl_ec  # noqa: E402
import xdl_ec.xdl as xdl  # noqa: E402
from support.examples import load_example  # noqa: E402
from support.ray_session import ray_session  # noqa: E402
from support.serving import PLAIN_TF  # noqa: E402
from support.xdl_dien_rnn import dynamic_rnn  # noqa: E402 - XDL's DIEN rnn.py, after the renames
from xdl_ec.xdl.rnn import Linear as _Linear  # noqa: E402 - XDL: tensorflow.contrib's core_rnn_cell._Linear

B, STEPS, N_USER, N_ITEM, N_CAT, DIM, T = 32, 8, 60, 80, 6, 4, 3
CATEGORY = np.random.default_rng(0).integers(0, N_CAT, N_ITEM)  # every item's category


def ctr_batch(rng: np.random.Generator, two_way: bool) -> Dict[str, Any]:
    """A click log: a user clicks an item of a category in their history more often."""
    item = rng.integers(0, N_ITEM, B)
    history = rng.integers(0, N_ITEM, (B, T))
    seen = (CATEGORY[history] == CATEGORY[item][:, None]).any(axis=1)
    click = (rng.random(B) < np.where(seen, 0.8, 0.2)).astype(np.float32)
    return {
        "label": np.stack([click, 1.0 - click], 1) if two_way else click[:, None],
        "user": rng.integers(0, N_USER, B),
        "item": item,
        "cat": CATEGORY[item],
        "history": history,
        "price": rng.normal(size=(B, 2)).astype(np.float32),
    }


def ctr_reader(two_way: bool) -> Callable[[int, int], Iterator[Dict[str, Any]]]:
    def reader(worker: int, workers: int) -> Iterator[Dict[str, Any]]:
        for step in range(worker, STEPS, workers):
            yield ctr_batch(np.random.default_rng([5, step]), two_way)

    return reader


def dice(x: Any, name: str) -> Any:
    """XDL's Dice: a data-dependent PReLU whose slope is a variable made by get_variable."""
    alpha = tf.compat.v1.get_variable("alpha" + name, x.shape[-1], initializer=tf.compat.v1.constant_initializer(0.0))
    mean = tf.reduce_mean(x, axis=0)
    std = tf.sqrt(tf.reduce_mean(tf.square(x - mean), axis=0) + 1e-8)
    p = tf.sigmoid((x - mean) / std)
    return alpha * (1.0 - p) * x + p * x


# ---- DIN (xdl-algorithm-solution/DIN/script/model.py's shape) ---------------------------------------------------
def din_net(batch: Any) -> Tuple[Any, Any, Any]:
    uid = xdl.embedding("uid_embedding", batch["user"], xdl.TruncatedNormal(stddev=0.1), DIM, N_USER)
    mid = xdl.embedding("mid_embedding", batch["item"], xdl.TruncatedNormal(stddev=0.1), DIM, N_ITEM)
    cat = xdl.embedding("cat_embedding", batch["cat"], xdl.TruncatedNormal(stddev=0.1), DIM, N_CAT)
    his = xdl.embedding("mid_embedding", batch["history"], xdl.TruncatedNormal(stddev=0.1), DIM, N_ITEM, None)
    with tf.compat.v1.variable_scope("tf_model", reuse=tf.compat.v1.AUTO_REUSE):
        query = tf.tile(mid[:, None, :], [1, T, 1])
        scores = xdl.layers.dense(tf.concat([query, his, query - his, query * his], -1), 1, name="att")
        attended = tf.reduce_sum(tf.nn.softmax(scores, axis=1) * his, 1)
        inp = tf.concat([uid, mid, cat, tf.reduce_sum(his, 1), attended, batch["price"]], -1)
        bn1 = xdl.layers.batch_normalization(inputs=inp, name="bn1", training=True)
        dnn1 = dice(xdl.layers.dense(bn1, 16, name="f1"), "dice_1")
        y_hat = tf.nn.softmax(xdl.layers.dense(dnn1, 2, name="f3")) + 0.00000001
        target = batch["label"]
        loss = -tf.reduce_mean(tf.math.log(y_hat) * target)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.round(y_hat), target), tf.float32))
    return y_hat, loss, accuracy


@xdl.tf_wrapper(is_training=True)
def din_train(batch: Any) -> Any:
    _, loss, accuracy = din_net(batch)
    return loss, [accuracy, tf.constant(0.0)]  # XDL's (loss, [accuracy, aux_loss])


@xdl.tf_wrapper(is_training=False)
def din_test(batch: Any) -> Any:
    y_hat, loss, accuracy = din_net(batch)
    return y_hat, [loss, accuracy, tf.constant(0.0), batch["label"]]


def din_job() -> xdl_ec.Job:
    return xdl.xdl_job(
        din_train, ctr_reader(True), xdl.Adam(0.01), eval_reader=lambda: ctr_reader(True)(0, 4), test=din_test
    )


# ---- GwEN: group-wise embeddings, one pooled row per group, an MLP over them ---------------------------------------
@xdl.tf_wrapper(is_training=True)
def gwen_train(batch: Any) -> Any:
    init = xdl.VarianceScaling(scale=1.0, mode="fan_avg", distribution="uniform")
    groups = [
        xdl.embedding("user_group", batch["user"], init, DIM, N_USER),
        xdl.embedding("item_group", batch["item"], init, DIM, N_ITEM),
        xdl.embedding("cat_group", batch["cat"], init, DIM, N_CAT),
        xdl.embedding("item_group_history", batch["history"], init, DIM, N_ITEM, "mean"),
    ]
    with tf.compat.v1.variable_scope("gwen"):
        hidden = xdl.layers.dense(tf.concat(groups, 1), 16, activation=tf.nn.relu, name="fc1")
        logits = xdl.layers.dense(hidden, 2, name="fc2")
    loss = tf.compat.v1.losses.softmax_cross_entropy(onehot_labels=batch["label"], logits=logits)
    prop = tf.nn.softmax(logits)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(prop, 1), tf.argmax(batch["label"], 1)), tf.float32))
    return loss, accuracy, prop


def gwen_job() -> xdl_ec.Job:
    return xdl.xdl_job(gwen_train, ctr_reader(True), xdl.Adagrad(0.1), eval_reader=lambda: ctr_reader(True)(1, 4))


# ---- the estimator test (xdl/examples/estimator/estimator_tf_test.py's model_fn) ----------------------------------
def fc(inputs: Any, w_shape: Any, b_shape: Any) -> Any:
    w = tf.compat.v1.get_variable(
        "weights",
        w_shape,
        initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.36),
        regularizer=tf.nn.l2_loss,
    )
    tf.compat.v1.get_variable(  # the bias XDL's test makes and never uses: it feeds no loss
        "bias", b_shape, initializer=tf.compat.v1.uniform_unit_scaling_initializer(factor=0.1, seed=10)
    )
    return tf.matmul(inputs, w)


@xdl.tf_wrapper(is_training=True)
def estimator_model(batch: Any) -> Any:
    emb = xdl.embedding("sparse", batch["user"], xdl.Ones(), 1, 16)
    with tf.compat.v1.variable_scope(name_or_scope="", reuse=tf.compat.v1.AUTO_REUSE):
        logits = fc(batch["price"], [2, 1], [1]) + emb
        cross_entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=batch["label"], logits=logits, name="xentropy")
    return tf.reduce_mean(cross_entropy, name="xentropy_mean"), logits


def estimator_job() -> xdl_ec.Job:
    def reader(worker: int, workers: int) -> Iterator[Dict[str, Any]]:
        for b in ctr_reader(False)(worker, workers):
            yield {"label": b["label"], "user": b["user"], "price": b["price"]}

    return xdl.xdl_job(estimator_model, reader, xdl.SGD(0.5), eval_reader=lambda: reader(2, 4))


# ---- DIEN on TF 1's own cells: XDL's utils.py VecAttGRUCell (on TF's RNNCell), tf.compat.v1's GRUCell, its rnn.py --
class VecAttGRUCell(RNNCell):
    """XDL's DIEN utils.py VecAttGRUCell as written (its ``_Linear``: ``from xdl_ec.xdl.rnn import Linear``): a GRU
    whose update gate is scaled by the step's attention score."""

    def __init__(self, num_units, activation=None, reuse=None, kernel_initializer=None, bias_initializer=None):  # noqa: ANN001
        super(VecAttGRUCell, self).__init__(_reuse=reuse)  # noqa: UP008 - as XDL wrote it
        self._num_units = num_units
        self._activation = activation or math_ops.tanh
        self._kernel_initializer = kernel_initializer
        self._bias_initializer = bias_initializer
        self._gate_linear = None
        self._candidate_linear = None

    @property
    def state_size(self):  # noqa: ANN201
        return self._num_units

    @property
    def output_size(self):  # noqa: ANN201
        return self._num_units

    def __call__(self, inputs, state, att_score):  # noqa: ANN001, ANN204
        return self.call(inputs, state, att_score)

    def call(self, inputs, state, att_score=None):  # noqa: ANN001, ANN201
        """Gated recurrent unit (GRU) with nunits cells."""
        if self._gate_linear is None:
            bias_ones = self._bias_initializer
            if self._bias_initializer is None:
                bias_ones = init_ops.constant_initializer(1.0, dtype=inputs.dtype)
            with vs.variable_scope("gates"):  # Reset gate and update gate.
                self._gate_linear = _Linear(
                    [inputs, state],
                    2 * self._num_units,
                    True,
                    bias_initializer=bias_ones,
                    kernel_initializer=self._kernel_initializer,
                )

        value = math_ops.sigmoid(self._gate_linear([inputs, state]))
        r, u = array_ops.split(value=value, num_or_size_splits=2, axis=1)

        r_state = r * state
        if self._candidate_linear is None:
            with vs.variable_scope("candidate"):
                self._candidate_linear = _Linear(
                    [inputs, r_state],
                    self._num_units,
                    True,
                    bias_initializer=self._bias_initializer,
                    kernel_initializer=self._kernel_initializer,
                )
        c = self._activation(self._candidate_linear([inputs, r_state]))
        u = (1.0 - att_score) * u
        new_h = u * state + (1 - u) * c
        return new_h, new_h


def auxiliary_net(in_: Any) -> Any:
    with tf.compat.v1.variable_scope("aux", reuse=tf.compat.v1.AUTO_REUSE):
        dnn1 = tf.nn.sigmoid(xdl.layers.dense(in_, 4, name="f1gru", reuse=tf.compat.v1.AUTO_REUSE))
        return tf.nn.softmax(xdl.layers.dense(dnn1, 2, name="f2gru", reuse=tf.compat.v1.AUTO_REUSE)) + 0.00000001


@xdl.tf_wrapper(is_training=True)
def dien_tf1_model(batch: Any) -> Any:
    init = xdl.TruncatedNormal(stddev=0.1)
    mid = xdl.embedding("mid_embedding", batch["item"], init, DIM, N_ITEM)
    his = xdl.embedding("mid_embedding", batch["history"], init, DIM, N_ITEM, None)
    noclk = xdl.embedding("mid_embedding", batch["noclk"], init, DIM, N_ITEM, None)
    mask, target = batch["mask"], batch["label"]
    seq_len = tf.reduce_sum(mask, 1)
    kernel_init = tf.compat.v1.truncated_normal_initializer(stddev=0.36)
    with tf.compat.v1.variable_scope("tf_model", reuse=tf.compat.v1.AUTO_REUSE):
        rnn_outputs, _ = dynamic_rnn(
            tf.compat.v1.nn.rnn_cell.GRUCell(DIM, kernel_initializer=kernel_init),
            inputs=his,
            sequence_length=seq_len,
            dtype=tf.float32,
            scope="gru1",
        )
        click = auxiliary_net(tf.concat([rnn_outputs[:, :-1, :], his[:, 1:, :]], -1))[:, :, 0]
        noclick = auxiliary_net(tf.concat([rnn_outputs[:, :-1, :], noclk[:, 1:, :]], -1))[:, :, 0]
        aux_loss = tf.reduce_mean((-tf.math.log(click) - tf.math.log(1.0 - noclick)) * mask[:, 1:])
        query = tf.tile(mid[:, None, :], [1, T, 1])
        scores = tf.squeeze(
            xdl.layers.dense(tf.concat([query, rnn_outputs, query * rnn_outputs], -1), 1, name="att"), -1
        )
        alphas = tf.nn.softmax(tf.where(mask > 0, scores, tf.ones_like(scores) * (-(2.0**32) + 1)))
        _, final_state2 = dynamic_rnn(
            VecAttGRUCell(DIM, kernel_initializer=kernel_init),
            inputs=rnn_outputs,
            att_scores=tf.expand_dims(alphas, -1),
            sequence_length=seq_len,
            dtype=tf.float32,
            scope="gru2",
        )
        inp = tf.concat([mid, final_state2, tf.reduce_sum(his * mask[:, :, None], 1)], 1)
        y_hat = tf.nn.softmax(xdl.layers.dense(xdl.layers.dense(inp, 8, tf.nn.sigmoid, name="f1"), 2, name="f2")) + 1e-8
        loss = -tf.reduce_mean(tf.math.log(y_hat) * target) + aux_loss
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.round(y_hat), target), tf.float32))
    return loss, accuracy, aux_loss, y_hat


def dien_tf1_job() -> xdl_ec.Job:
    def reader(worker: int, workers: int) -> Iterator[Dict[str, Any]]:
        for step in range(worker, STEPS, workers):
            rng = np.random.default_rng([7, step])
            b = ctr_batch(rng, True)
            lengths = rng.integers(2, T + 1, B)  # histories of 2..T clicks, padded
            mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
            noclk = rng.integers(0, N_ITEM, (B, T))
            yield {"label": b["label"], "item": b["item"], "history": b["history"], "noclk": noclk, "mask": mask}

    return xdl.xdl_job(dien_tf1_model, reader, xdl.Adam(0.01), eval_reader=lambda: reader(3, 4))


# ---- DIEN with its auxiliary loss and mnist without tables: the examples, small -----------------------------------
dien = load_example("xdl_dien")
mnist = load_example("xdl_mnist")


def dien_job() -> xdl_ec.Job:
    return dien.make_job(dien.SyntheticLog(batch_size=B, batches=STEPS, eval_batches=2))


def mnist_job() -> xdl_ec.Job:
    return mnist.make_job(mnist.SyntheticDigits(batch_size=B, batches=STEPS, eval_batches=2))


JOBS = {
    "din": din_job,
    "gwen": gwen_job,
    "estimator": estimator_job,
    "dien": dien_job,
    "dien_tf1": dien_tf1_job,
    "mnist": mnist_job,
}
_RUNS: Dict[Tuple[str, bool], Tuple[Dict[str, Any], xdl_ec.Job]] = {}


def run(name: str, killed: bool = False) -> Tuple[Dict[str, Any], xdl_ec.Job]:
    if (name, killed) not in _RUNS:
        job = JOBS[name]()
        cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), fail_at=["4:1"]) if killed else None
        _RUNS[name, killed] = (job.fit(cluster=cluster, deterministic=True, seed=3), job)
    return _RUNS[name, killed]


@pytest.mark.parametrize("name", sorted(set(JOBS) - {"dien"}))
def test_the_script_trains_to_one_digest_in_one_process_and_with_a_server_killed(name: str) -> None:
    here, _ = run(name)
    killed, _ = run(name, killed=True)
    assert [(f["role"], f["index"]) for f in killed["failures"]] == [("server", 1)]
    assert killed["model_digest"] == here["model_digest"] and killed["logloss"] == here["logloss"]
    # the model's extra outputs come back from the servers' workers too, the same as in one process
    assert killed.get("outputs") == pytest.approx(here.get("outputs"), rel=1e-6)
    assert here["steps"] == STEPS and np.isfinite(here["final_loss"])


def test_the_two_way_softmax_is_reported_with_accuracy_log_loss_and_auc() -> None:
    din, job = run("din")
    # the hold-out: labels [B, 2] against the test graph's y_hat [B, 2]
    assert din["eval_samples"] == 2 * B and 0.0 <= din["accuracy"] <= 1.0 and din["auc"] > 0.5
    # the training graph's extra outputs: XDL's accuracy and aux_loss, by position
    assert set(din["outputs"]) == {"output1", "output2"} and din["outputs"]["output2"] == 0.0
    assert 0.0 <= din["outputs"]["output1"] <= 1.0
    gwen, _ = run("gwen")  # its training graph returns its probabilities: progressive validation scores them
    assert gwen["progressive"]["samples"] == STEPS * B and gwen["progressive"]["accuracy"] is not None
    batch = next(iter(job.spec.input_fn(0, 1)))
    probabilities = job.model.predict(batch)
    assert probabilities.shape == (B, 2)
    np.testing.assert_allclose(probabilities.sum(1), 1.0, atol=1e-5)


def test_a_variable_that_feeds_no_loss_keeps_its_initial_value() -> None:
    _, job = run("estimator")
    one = estimator_job()
    one.fit(steps=1, deterministic=True, seed=3)

    def variable(j: xdl_ec.Job, name: str) -> np.ndarray:
        [found] = [v for v in j.model.dense.model.trainable_variables if name in v.path]
        return found.numpy()

    # the bias XDL's test never uses has a zero gradient (SGD leaves it), the weights have moved
    np.testing.assert_array_equal(variable(job, "bias"), variable(one, "bias"))
    assert not np.array_equal(variable(job, "weights"), variable(one, "weights"))


def test_mnist_without_tables_learns_its_ten_classes() -> None:
    report, job = run("mnist")
    # class ids [B] beside the eval graph's probabilities [B, 10]: accuracy, log loss, one-vs-rest AUC
    assert job.spec.tables == () and report["accuracy"] > 0.5 and report["auc"] > 0.8
    assert job.model.predict(next(iter(job.spec.input_fn(0, 1)))).shape == (B, 10)


def test_dien_trains_its_auxiliary_loss_through_layers_shared_by_name() -> None:
    report, job = run("dien")
    paths = [v.path for v in job.model.dense.model.weights]
    # the auxiliary net, called on clicked and on non-clicked items, is one set of layers; the GRU's and AUGRU's
    # variables are TF 1's names in their scopes
    assert sum(p.startswith("f1gru/") for p in paths) == 2 and sum(p.startswith("bn1gru/") for p in paths) == 4
    assert "xdl_model/tf_model__gru2__gru_cell__gates__kernel" in paths
    # XDL's outputs after the loss: its accuracy and its auxiliary loss, which is part of the loss trained
    assert 0.0 <= report["outputs"]["output1"] <= 1.0 and 0.0 < report["outputs"]["output2"] < report["final_loss"]


def test_dien_on_tf1s_own_cells_trains_its_gru_and_augru_through_xdls_rnn_py() -> None:
    report, job = run("dien_tf1")
    weights = {v.path: v.numpy() for v in job.model.dense.model.weights}
    # TF's GRUCell makes its variables in its own scope (gru_cell), XDL's AUGRU in the rnn's (its _Linear's); each
    # bias left its initial value (gates 1.0, candidate 0.0): the gradient reached both cells through the while loops
    for cell in ("tf_model__gru1__gru_cell__", "tf_model__gru2__"):
        assert {f"xdl_model/{cell}{part}" for part in ("gates__kernel", "candidate__kernel")} <= set(weights)
        assert np.all(weights[f"xdl_model/{cell}gates__bias"] != 1.0), cell
        assert np.all(weights[f"xdl_model/{cell}candidate__bias"] != 0.0), cell
    # XDL's outputs after the loss: its accuracy and its auxiliary loss, part of the loss trained
    assert 0.0 <= report["outputs"]["output1"] <= 1.0 and 0.0 < report["outputs"]["output2"] < report["final_loss"]


# Run by a fresh interpreter: TensorFlow only; for each (model dir, inputs, output) the served probabilities
SERVE = PLAIN_TF + textwrap.dedent("""
    for model_dir, inputs_file, out_file in zip(*[iter(sys.argv[1:])] * 3):
        serve = tf.saved_model.load(model_dir).signatures["serving_default"]
        with np.load(inputs_file) as inputs:
            np.save(out_file, serve(**{k: tf.constant(inputs[k]) for k in inputs.files})["probability"].numpy())
    assert "xdl_ec" not in sys.modules, "xdl_ec was imported"
""")


def test_each_saved_model_serves_the_predictions_from_plain_tensorflow(tmp_path: Path) -> None:
    args, expected = [], {}
    for name in sorted(JOBS):
        _, job = run(name)
        batch = next(iter(job.spec.input_fn(0, 1)))
        np.savez(tmp_path / f"{name}.npz", **{k: np.asarray(v) for k, v in batch.items() if k != "label"})
        args += [job.model.export(str(tmp_path / name)), str(tmp_path / f"{name}.npz"), str(tmp_path / f"{name}.npy")]
        expected[name] = job.model.predict(batch)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    (tmp_path / "serve.py").write_text(SERVE)
    done = subprocess.run(
        [sys.executable, "-P", str(tmp_path / "serve.py"), *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name, want in expected.items():
        served = np.load(tmp_path / f"{name}.npy")
        assert served.shape == want.shape, name
        np.testing.assert_allclose(served, want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.ray
@pytest.mark.parametrize("name", ["mnist", "dien"])
def test_on_ray_with_ec_and_a_killed_server_the_script_ends_at_the_one_process_model(name: str) -> None:
    """On Ray actors: a model without tables, and DIEN's (its example module travels with the job)."""
    pytest.importorskip("ray")
    with ray_session():
        report = JOBS[name]().fit(
            cluster=xdl_ec.Cluster(servers=3, backend="ray", ft="ec", code=(2, 1), fail_at=["4:1"]),
            deterministic=True,
            seed=3,
        )
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 1)]
    assert report["model_digest"] == run(name)[0]["model_digest"]
