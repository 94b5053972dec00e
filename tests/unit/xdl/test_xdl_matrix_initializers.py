"""XDL's whole-matrix initializers: ``xdl.Orthogonal`` and ``xdl.Identity`` make dense variables as XDL's TF backend
does (tf.compat.v1.get_variable's and xdl.layers.dense's), and a table refuses them, saying why and what to use."""

from __future__ import annotations

import re

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import xdl_ec.xdl as xdl  # noqa: E402 - the spelling of a ported script
from xdl_ec.xdl.xdl_model import XdlPortError  # noqa: E402

B, DIM, DEEP = 8, 4, 3
START = np.arange(DIM + DEEP, dtype=np.float32) / 10.0  # the slopes' whole initial value


def batch(index: int = 0) -> dict:
    rng = np.random.default_rng(index)
    deep = rng.normal(size=(B, DEEP)).astype(np.float32)
    return {"label": (deep[:, :1] > 0).astype(np.float32), "ad": rng.integers(0, 40, B).astype(np.int64), "deep": deep}


def reader(worker: int, num_workers: int):  # noqa: ANN201
    return (batch(i) for i in range(worker, 4, num_workers))


def whole_matrices(b):  # noqa: ANN001, ANN201 - a rotation by get_variable, slopes of a given value, a dense kernel
    x = tf.concat([xdl.embedding("ads", b["ad"], xdl.TruncatedNormal(stddev=0.1), DIM, 40), b["deep"]], 1)
    rotation = tf.compat.v1.get_variable("rotation", [7, 7], initializer=xdl.Orthogonal([7, 7]))
    slopes = tf.compat.v1.get_variable("slopes", [7], initializer=xdl.Identity(START))
    hidden = xdl.layers.dense(
        tf.matmul(x, rotation) * slopes, 5, kernel_initializer=xdl.Orthogonal([7, 5], gain=2.0), name="hidden"
    )
    return xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(hidden, 1, name="out"))


def test_orthogonal_and_identity_make_dense_variables_as_in_xdl() -> None:
    job = xdl.xdl_job(whole_matrices, reader, xdl.SGD(0.1))
    weights = {v.path: v.numpy() for v in job.spec.model_fn().weights}
    rotation, kernel = weights["xdl_model/rotation"], weights["hidden/kernel"]
    np.testing.assert_allclose(rotation.T @ rotation, np.eye(7), atol=1e-5)  # orthogonal, gain 1
    np.testing.assert_allclose(kernel.T @ kernel, 4.0 * np.eye(5), atol=1e-4)  # orthonormal columns, gain 2
    np.testing.assert_array_equal(weights["xdl_model/slopes"], START)
    report = job.fit(deterministic=True, seed=3)  # and the job trains them
    assert report["steps"] == 4 and np.isfinite(report["final_loss"])


@pytest.mark.parametrize(
    "initializer,named",
    [
        (xdl.Orthogonal([40, DIM]), "xdl.Orthogonal makes an orthogonal matrix"),
        (xdl.Identity(np.zeros((40, DIM))), "xdl.Identity makes the whole initial value"),
    ],
)
def test_a_table_refuses_a_whole_matrix_initializer_saying_why_and_what_to_use(initializer, named: str) -> None:  # noqa: ANN001
    def model(b):  # noqa: ANN001, ANN202
        rows = xdl.embedding("ads", b["ad"], initializer, DIM, 40)
        return xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(rows, 1))

    with pytest.raises(XdlPortError) as refused:
        xdl.xdl_job(model, reader, xdl.SGD(0.1))
    message = str(refused.value)
    assert re.match(r"\S*test_xdl_matrix_initializers.py:\d+: embedding 'ads': ", message)  # the script's line first
    assert named in message
    assert "a table's rows are each drawn from (table seed, id)" in message and "use a row initializer" in message


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: xdl.Orthogonal([5]), r"xdl.Orthogonal: shape must be at least 2 positive ints"),
        (lambda: xdl.Orthogonal([5, 0]), r"xdl.Orthogonal: shape must be at least 2 positive ints"),
        (lambda: xdl.Orthogonal([5, 5], gain=float("nan")), r"xdl.Orthogonal: gain must be a finite number"),
        (lambda: xdl.Orthogonal([5, 5], seed=1.5), r"xdl.Orthogonal: seed must be an int or None"),
        (lambda: xdl.Identity("ones"), r"xdl.Identity: value must be an array of numbers"),
        (lambda: xdl.Identity([1.0, np.inf]), r"xdl.Identity: value holds NaN or infinity"),
        (lambda: xdl.Orthogonal([5, 5])([5, 4]), r"made for shape \[5, 5\], asked for a variable of shape \[5, 4\]"),
        (lambda: xdl.Identity(np.ones(3))([4]), r"its value is \[3\], asked for a variable of shape \[4\]"),
    ],
)
def test_bad_settings_and_shapes_are_refused(make, message: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=message):
        make()
