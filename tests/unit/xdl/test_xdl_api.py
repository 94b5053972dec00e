"""The XDL-shaped functional API: xdl_ec.xdl.embedding with its table registry, and the optimizers by XDL's names."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from xdl_ec.sparse import init, optim
from xdl_ec.xdl import api as xdl  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_registry():
    xdl.clear_tables()
    previous = xdl.sparse_optimizer()
    yield
    xdl.set_sparse_optimizer(previous)
    xdl.clear_tables()


def test_importing_xdl_ec_does_not_import_tensorflow():
    code = (
        "import sys, xdl_ec.xdl as xdl; xdl.Adagrad(0.1); assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-P", "-c", code], check=True)


def test_optimizers_by_xdl_names_map_to_optim_classes():
    assert xdl.SGD(0.5) == optim.SGD(learning_rate=0.5)
    assert xdl.Momentum(0.1, 0.8, use_nesterov=True) == optim.Momentum(0.1, 0.8, True)
    assert xdl.Adagrad(0.1, initial_accumulator_value=0.2) == optim.Adagrad(0.1, 0.2)
    assert xdl.Adam() == optim.Adam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8)
    assert xdl.Ftrl(0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.02) == optim.Ftrl(
        learning_rate=0.1, l1=0.01, l2=0.02
    )
    with pytest.raises(ValueError, match="learning_rate"):
        xdl.SGD(-1.0)


def test_embedding_creates_then_reuses_a_named_table():
    ids = tf.constant([[1, 2], [2, 2]], tf.int64)
    out = xdl.embedding("user", ids, init.RandomUniform(minval=-1.0, maxval=1.0), 4, 100)
    table = xdl.get_table("user")
    rows = table.pull(np.array([1, 2], np.int64))
    np.testing.assert_allclose(out.numpy(), [rows[0] + rows[1], rows[1] + rows[1]], rtol=1e-6)
    assert table.dim == 4 and table.optimizer == xdl.sparse_optimizer()
    again = xdl.embedding("user", tf.constant([[2]], tf.int64), "zeros", 4, 100, combiner=None)
    assert again.shape == (1, 1, 4)
    np.testing.assert_array_equal(again.numpy()[0, 0], rows[1])  # same table, same row
    assert xdl.tables() == {"user": table}
    ragged = xdl.embedding("user", tf.ragged.constant([[1, 2, 2], []], dtype=tf.int64), None, 4, 100, combiner="mean")
    np.testing.assert_allclose(ragged.numpy(), [(rows[0] + 2 * rows[1]) / 3, np.zeros(4)], rtol=1e-6)


def test_training_uses_the_chosen_sparse_optimizer():
    xdl.set_sparse_optimizer(xdl.SGD(0.25))
    ids = tf.constant([[3, 3, 4]], tf.int64)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(xdl.embedding("item", ids, init.Zeros(), 2, 10))
        # The tables' trigger variables put the lookup on the tape; asking for them is optional.
        return tape.gradient(loss, xdl.trainable_variables())

    step()
    step()
    table = xdl.get_table("item")
    assert table.optimizer == optim.SGD(0.25)
    np.testing.assert_array_equal(table.pull(np.array([3, 4], np.int64)), [[-1.0, -1.0], [-0.5, -0.5]])
    per_call = xdl.embedding("ads", ids, init.Zeros(), 2, 10, optimizer=xdl.Adam(0.01))
    assert per_call.shape == (1, 2) and xdl.get_table("ads").optimizer == optim.Adam(0.01, epsilon=1e-8)


def test_index_vtype_checks_range():
    out = xdl.embedding("idx", tf.constant([[0, 9]], tf.int64), init.Zeros(), 2, 10, vtype="index")
    assert out.shape == (1, 2)
    table = xdl.get_table("idx")
    with pytest.raises(tf.errors.InvalidArgumentError, match="feature_dim"):
        xdl.embedding("idx", tf.constant([[10]], tf.int64), init.Zeros(), 2, 10, vtype="index")
    with pytest.raises(tf.errors.InvalidArgumentError, match=">= 0"):
        xdl.embedding("idx", tf.constant([[-1]], tf.int64), init.Zeros(), 2, 10, vtype="index")
    assert len(table) == 2  # the rejected lookups inserted nothing


def test_bad_arguments_are_clear_and_create_nothing():
    ids = tf.constant([[1]], tf.int64)
    xdl.embedding("t", ids, init.Zeros(), 4, 10)
    with pytest.raises(ValueError, match="emb_dim 8 differs"):
        xdl.embedding("t", ids, init.Zeros(), 8, 10)
    with pytest.raises(ValueError, match="fixed when it is created"):
        xdl.embedding("t", ids, init.Zeros(), 4, 10, optimizer=xdl.SGD(1.0))
    with pytest.raises(ValueError, match="vtype"):
        xdl.embedding("u", ids, init.Zeros(), 4, 10, vtype="dense")
    with pytest.raises(ValueError, match="combiner"):
        xdl.embedding("u", ids, init.Zeros(), 4, 10, combiner="max")
    with pytest.raises(ValueError, match="emb_dim"):
        xdl.embedding("u", ids, init.Zeros(), 0, 10)
    with pytest.raises(TypeError, match="feature_dim"):
        xdl.embedding("u", ids, init.Zeros(), 4, 1.5)
    with pytest.raises(ValueError, match="name"):
        xdl.embedding("", ids, init.Zeros(), 4, 10)
    with pytest.raises(ValueError, match="optimizer"):
        xdl.set_sparse_optimizer("rmsprop")
    with pytest.raises(KeyError, match="'u'"):
        xdl.get_table("u")
    assert list(xdl.tables()) == ["t"]
