"""XDL's DIN (xdl-algorithm-solution/DIN in alibaba/x-deeplearning), ported to xdl-ec by renames.

What XDL's DIN script does and this port keeps: the candidate item and category and the user's clicked items and
categories are looked up in shared tables (``xdl.embedding(..., 'sum')``); the history comes as XDL's per-id
segments (``xdl.SparseTensor(ids, values, segments)`` with one segment per id of the padded history, so the
lookup gives one row per id, [B * T, dim], which the model reshapes to [B, T, dim]); the candidate attends over
the history under its mask; a batch normalization (``training=True``), dense layers and Dice activations (their
slopes made by ``tf.compat.v1.get_variable`` in an AUTO_REUSE scope) give the logit; and the model is built
twice, ``@xdl.tf_wrapper(is_training=True)`` for training and ``@xdl.tf_wrapper(is_training=False)`` for
testing, over the same variables.

The renames: ``import xdl`` -> ``import xdl_ec.xdl as xdl``; ``tf.layers.batch_normalization`` /
``tf.layers.dense`` -> ``xdl.layers.batch_normalization`` / ``xdl.layers.dense``; ``tf.variable_scope``,
``tf.get_variable``, ``tf.AUTO_REUSE``, ``tf.constant_initializer`` -> their ``tf.compat.v1`` names. What changes
beyond renames: the reader (XDL's ``py_func`` sample IO) is ``reader(worker, num_workers)`` yielding dict batches
of the same data, its history padded to a fixed length T (XDL pads each batch to its own longest); the two-way
softmax head is one logit with ``xdl.losses.sigmoid_cross_entropy`` here (XDL's own softmax over [B, 2] and its
hand-written loss port as written too: examples/xdl_dien.py); the loop is :func:`job`, whose ``test=`` is
XDL's test graph. The synthetic log plants DIN's signal: a user clicks a candidate of a category in their history
far more often.

Run it:
    xdl-ec train --script examples/xdl_din.py                                   # in this process
    xdl-ec train --script examples/xdl_din.py --servers 3 --ft ec --code 2,1 --fail-at 20:1
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator

import numpy as np
import tensorflow as tf

import xdl_ec
import xdl_ec.xdl as xdl

N_UID, N_MID, N_CAT, EMBEDDING_DIM, T = 500, 2000, 40, 8, 6


@dataclasses.dataclass(frozen=True)
class SyntheticLog:
    """Batch ``b`` is a pure function of (seed, b): users with a few favourite categories, a history of T items
    (fewer for some users, padded with id 0 under a zero mask), and a candidate whose click odds are high when its
    category is in the history."""

    seed: int = 0
    batch_size: int = 64
    batches: int = 200
    eval_batches: int = 8

    def batch(self, index: int, split: str = "train") -> Dict[str, Any]:
        rng = np.random.default_rng([self.seed, index, 0 if split == "train" else 1])
        n = self.batch_size
        item_cat = np.random.default_rng(self.seed).integers(0, N_CAT, N_MID)  # every item's category
        favourites = rng.integers(0, N_CAT, (n, 2))
        lengths = rng.integers(2, T + 1, n)
        mid_his = np.zeros((n, T), np.int64)
        for i in range(n):  # history items drawn from the user's favourite categories
            pool = np.flatnonzero(np.isin(item_cat, favourites[i]))
            mid_his[i, : lengths[i]] = rng.choice(pool, lengths[i])
        mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
        cat_his = item_cat[mid_his] * (mask > 0)
        liked = rng.random(n) < 0.5
        mid = np.where(liked, mid_his[np.arange(n), rng.integers(0, lengths)], rng.integers(0, N_MID, n))
        cat = item_cat[mid]
        in_history = (cat_his == cat[:, None]).any(axis=1) & (mask > 0).any(axis=1)
        logit = np.where(in_history, 1.5, -1.5)
        label = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32).reshape(n, 1)
        per_id = np.arange(1, n * T + 1, dtype=np.int32)  # XDL's per-id segments: each id its own segment
        ones = np.ones(n * T, np.float32)
        return {
            "uid": rng.integers(0, N_UID, n).astype(np.int64),
            "mid": mid.astype(np.int64),
            "cat": cat.astype(np.int64),
            "mid_his": xdl.SparseTensor(mid_his.reshape(-1), ones, per_id),
            "cat_his": xdl.SparseTensor(cat_his.reshape(-1).astype(np.int64), ones, per_id),
            "mask": mask,
            "label": label,
        }

    def reader(self, worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        return (self.batch(b) for b in range(worker, self.batches, num_workers))

    def holdout(self) -> Iterator[Dict[str, Any]]:
        return (self.batch(b, "eval") for b in range(self.eval_batches))


def initializer():  # noqa: ANN201 - XDL's get_xdl_initializer
    return xdl.TruncatedNormal(stddev=0.05)


def dice(x, name=""):  # noqa: ANN001, ANN201 - XDL's Dice: a slope per unit below the batch-normalized input
    with tf.compat.v1.variable_scope(name, reuse=tf.compat.v1.AUTO_REUSE):
        alphas = tf.compat.v1.get_variable(
            "alpha" + name, [x.get_shape()[-1]], initializer=tf.compat.v1.constant_initializer(0.0), dtype=tf.float32
        )
    mean = tf.reduce_mean(x, axis=0, keepdims=True)
    std = tf.sqrt(tf.reduce_mean(tf.square(x - mean) + 1e-9, axis=0, keepdims=True))
    p = tf.sigmoid((x - mean) / (std + 1e-9))
    return alphas * (1.0 - p) * x + p * x


def din_attention(query, facts, mask):  # noqa: ANN001, ANN201 - the candidate's attention over the history
    queries = tf.tile(query[:, None, :], [1, T, 1])
    din_all = tf.concat([queries, facts, queries - facts, queries * facts], axis=-1)
    d1 = xdl.layers.dense(din_all, 16, activation=tf.nn.sigmoid, name="f1_att")
    d2 = xdl.layers.dense(d1, 8, activation=tf.nn.sigmoid, name="f2_att")
    scores = xdl.layers.dense(d2, 1, name="f3_att")[:, :, 0]
    scores = tf.where(mask > 0, scores, tf.ones_like(scores) * (-(2.0**32) + 1))
    weights = tf.nn.softmax(scores)
    return tf.reduce_sum(weights[:, :, None] * facts, axis=1)


def build_tf_net(uid, mid, cat, mid_his, cat_his, mask, label):  # noqa: ANN001, ANN201 - XDL's Model_DIN
    item_eb = tf.concat([mid, cat], 1)
    item_his_eb = tf.reshape(tf.concat([mid_his, cat_his], 1), [-1, T, 2 * EMBEDDING_DIM])
    item_his_eb_sum = tf.reduce_sum(item_his_eb * mask[:, :, None], 1)
    with tf.compat.v1.variable_scope("Attention_layer"):
        attention_output = din_attention(item_eb, item_his_eb, mask)
    inp = tf.concat([uid, item_eb, item_his_eb_sum, item_eb * item_his_eb_sum, attention_output], -1)
    bn1 = xdl.layers.batch_normalization(inputs=inp, name="bn1", training=True)
    dnn1 = dice(xdl.layers.dense(bn1, 32, name="f1"), name="dice_1")
    dnn2 = dice(xdl.layers.dense(dnn1, 16, name="f2"), name="dice_2")
    y = xdl.layers.dense(dnn2, 1, name="f3")
    return xdl.losses.sigmoid_cross_entropy(label, y), tf.sigmoid(y)


@xdl.tf_wrapper(is_training=True)
def tf_train_model(*inputs):  # noqa: ANN002, ANN201
    with tf.compat.v1.variable_scope("tf_model", reuse=tf.compat.v1.AUTO_REUSE):
        return build_tf_net(*inputs)


@xdl.tf_wrapper(is_training=False)
def tf_test_model(*inputs):  # noqa: ANN002, ANN201
    with tf.compat.v1.variable_scope("tf_model", reuse=tf.compat.v1.AUTO_REUSE):
        loss, prob = build_tf_net(*inputs)
        return prob, loss  # XDL's test graph returns its predictions first


def xdl_embedding(batch):  # noqa: ANN001, ANN201 - XDL's xdl_embedding: shared item and category tables
    return [
        xdl.embedding("uid_embedding", batch["uid"], initializer(), EMBEDDING_DIM, N_UID, "sum"),
        xdl.embedding("mid_embedding", batch["mid"], initializer(), EMBEDDING_DIM, N_MID, "sum"),
        xdl.embedding("cat_embedding", batch["cat"], initializer(), EMBEDDING_DIM, N_CAT, "sum"),
        xdl.embedding("mid_embedding", batch["mid_his"], initializer(), EMBEDDING_DIM, N_MID, "sum"),
        xdl.embedding("cat_embedding", batch["cat_his"], initializer(), EMBEDDING_DIM, N_CAT, "sum"),
    ]


def train(batch):  # noqa: ANN001, ANN201 - XDL's build_final_net(is_train=True)
    return tf_train_model(*xdl_embedding(batch), batch["mask"], batch["label"])


def test(batch):  # noqa: ANN001, ANN201 - XDL's build_final_net(is_train=False)
    return tf_test_model(*xdl_embedding(batch), batch["mask"], batch["label"])


def make_job(log: SyntheticLog = SyntheticLog()) -> xdl_ec.Job:
    """XDL's optimizer and TrainSession loop (Adam for a short run), with the test graph for evaluation."""
    return xdl.xdl_job(train, log.reader, xdl.Adam(0.005), eval_reader=log.holdout, test=test)


def job() -> xdl_ec.Job:
    """What ``xdl-ec train --script`` calls."""
    return make_job()


if __name__ == "__main__":
    report = job().fit(deterministic=True)
    print(
        f"{report['samples']:,} samples, {report['samples_per_sec']:,.0f} samples/s, hold-out AUC "
        f"{report['auc']:.4f}, model_digest {report['model_digest'][:16]}"
    )
