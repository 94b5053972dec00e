"""The table's optimizers against TensorFlow's own sparse kernels, bit for bit on float32.

TF's ResourceSparseApply* kernels apply duplicate indices one after another, while TF's optimizers
first sum duplicates (_deduplicate_indexed_slices: unique + unsorted_segment_sum); the table sums
duplicates too, so TF gets the deduplicated, summed gradients here. Adam (lazy) is ApplyAdam run on
the gathered touched rows with beta powers of the push's step.
"""

from __future__ import annotations

import numpy as np
import pytest

import xdl_ec
from xdl_ec.sparse import init, optim

tf = pytest.importorskip("tensorflow")

DIM = 5  # not a multiple of any SIMD width: TF's vector body and scalar tail both take part
ROWS = 12
STEPS = 6


class TfMirror:
    """Variables holding the same rows and state as the table, indexed by row number."""

    def __init__(self, table: xdl_ec.EmbeddingTable, keys: np.ndarray) -> None:
        self.keys = keys
        self.row_of = {int(k): i for i, k in enumerate(keys)}
        exported = table.export()
        order = np.argsort(exported["keys"])
        assert np.array_equal(exported["keys"][order], np.sort(keys))
        by_key = {int(k): i for i, k in enumerate(exported["keys"])}
        pick = np.array([by_key[int(k)] for k in keys])
        self.var = tf.Variable(exported["values"][pick])
        state = exported["state"][pick]
        self.slots = [tf.Variable(state[:, i * DIM : (i + 1) * DIM]) for i in range(state.shape[1] // DIM)]

    def dedup(self, batch_keys: np.ndarray, grads: np.ndarray):
        unique, idx = tf.unique(tf.constant(batch_keys))
        summed = tf.math.unsorted_segment_sum(tf.constant(grads), idx, tf.size(unique))
        rows = tf.constant([self.row_of[int(k)] for k in unique.numpy()], dtype=tf.int64)
        return rows, summed

    def assert_equal(self, table: xdl_ec.EmbeddingTable) -> None:
        exported = table.export()
        by_key = {int(k): i for i, k in enumerate(exported["keys"])}
        pick = np.array([by_key[int(k)] for k in self.keys])
        np.testing.assert_array_equal(exported["values"][pick], self.var.numpy(), err_msg="values")
        tf_state = (
            np.concatenate([s.numpy() for s in self.slots], axis=1)
            if self.slots
            else np.zeros((len(self.keys), 0), np.float32)
        )
        np.testing.assert_array_equal(exported["state"][pick], tf_state, err_msg="optimizer state")


def run(optimizer: optim.Optimizer, apply_tf, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    table = xdl_ec.EmbeddingTable("t", DIM, optimizer=optimizer, initializer=init.RandomUniform(-0.5, 0.5), seed=7)
    keys = rng.choice(1 << 40, size=ROWS, replace=False).astype(np.int64)
    table.pull(keys)
    mirror = TfMirror(table, keys)
    for step in range(1, STEPS + 1):
        batch = rng.choice(keys, size=20, replace=True)  # duplicates on purpose
        grads = rng.normal(0.0, 1.0, size=(20, DIM)).astype(np.float32)
        table.push(batch, grads, step=step)
        rows, summed = mirror.dedup(batch, grads)
        apply_tf(mirror, rows, summed, step)
        mirror.assert_equal(table)


def test_sgd_matches_scatter_sub() -> None:
    lr = np.float32(0.05)

    def apply_tf(m, rows, g, step):
        tf.raw_ops.ResourceScatterSub(resource=m.var.handle, indices=rows, updates=g * lr)

    run(optim.SGD(learning_rate=float(lr)), apply_tf)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_matches_resource_sparse_apply_momentum(nesterov: bool) -> None:
    o = optim.Momentum(learning_rate=0.05, momentum=0.9, use_nesterov=nesterov)

    def apply_tf(m, rows, g, step):
        tf.raw_ops.ResourceSparseApplyMomentum(
            var=m.var.handle,
            accum=m.slots[0].handle,
            lr=np.float32(o.learning_rate),
            grad=g,
            indices=rows,
            momentum=np.float32(o.momentum),
            use_nesterov=nesterov,
        )

    run(o, apply_tf, seed=1)


def test_adagrad_matches_resource_sparse_apply_adagrad_v2() -> None:
    o = optim.Adagrad(learning_rate=0.1, initial_accumulator_value=0.1, epsilon=1e-7)

    def apply_tf(m, rows, g, step):
        tf.raw_ops.ResourceSparseApplyAdagradV2(
            var=m.var.handle,
            accum=m.slots[0].handle,
            lr=np.float32(o.learning_rate),
            epsilon=np.float32(o.epsilon),
            grad=g,
            indices=rows,
        )

    run(o, apply_tf, seed=2)


def test_adam_matches_apply_adam_on_touched_rows() -> None:
    o = optim.Adam(learning_rate=0.01, beta1=0.9, beta2=0.999, epsilon=1e-7)

    def apply_tf(m, rows, g, step):
        var = tf.Variable(tf.gather(m.var, rows))
        mm = tf.Variable(tf.gather(m.slots[0], rows))
        vv = tf.Variable(tf.gather(m.slots[1], rows))
        # beta^t correctly rounded to float32, as the table computes it (numpy's float32 power is not).
        beta1_power = np.float32(np.float64(np.float32(o.beta1)) ** step)
        beta2_power = np.float32(np.float64(np.float32(o.beta2)) ** step)
        tf.raw_ops.ResourceApplyAdam(
            var=var.handle,
            m=mm.handle,
            v=vv.handle,
            beta1_power=beta1_power,
            beta2_power=beta2_power,
            lr=np.float32(o.learning_rate),
            beta1=np.float32(o.beta1),
            beta2=np.float32(o.beta2),
            epsilon=np.float32(o.epsilon),
            grad=g,
        )
        for dst, src in ((m.var, var), (m.slots[0], mm), (m.slots[1], vv)):
            tf.raw_ops.ResourceScatterUpdate(resource=dst.handle, indices=rows, updates=src.value())

    run(o, apply_tf, seed=3)


@pytest.mark.parametrize("l1,l2,shrinkage", [(0.0, 0.0, 0.0), (0.01, 0.02, 0.0), (0.01, 0.02, 0.03)])
def test_ftrl_matches_resource_sparse_apply_ftrl_v2(l1: float, l2: float, shrinkage: float) -> None:
    o = optim.Ftrl(
        learning_rate=0.1, learning_rate_power=-0.5, initial_accumulator_value=0.1, l1=l1, l2=l2, l2_shrinkage=shrinkage
    )

    def apply_tf(m, rows, g, step):
        tf.raw_ops.ResourceSparseApplyFtrlV2(
            var=m.var.handle,
            accum=m.slots[0].handle,
            linear=m.slots[1].handle,
            grad=g,
            indices=rows,
            lr=np.float32(o.learning_rate),
            l1=np.float32(l1),
            l2=np.float32(l2),
            l2_shrinkage=np.float32(shrinkage),
            lr_power=np.float32(o.learning_rate_power),
            multiply_linear_by_lr=False,
        )

    run(o, apply_tf, seed=4)


def test_ftrl_general_power_matches_resource_sparse_apply_ftrl_v2() -> None:
    o = optim.Ftrl(learning_rate=0.1, learning_rate_power=-0.75, initial_accumulator_value=0.2, l1=0.001, l2=0.01)

    def apply_tf(m, rows, g, step):
        tf.raw_ops.ResourceSparseApplyFtrlV2(
            var=m.var.handle,
            accum=m.slots[0].handle,
            linear=m.slots[1].handle,
            grad=g,
            indices=rows,
            lr=np.float32(o.learning_rate),
            l1=np.float32(o.l1),
            l2=np.float32(o.l2),
            l2_shrinkage=np.float32(0.0),
            lr_power=np.float32(o.learning_rate_power),
        )

    run(o, apply_tf, seed=5)
