"""XDL's DIEN (xdl-algorithm-solution/DIEN in alibaba/x-deeplearning) in its own shape, ported by renames.

What XDL's DIEN does and this port keeps: the candidate, the user's clicked history and a sampled non-clicked
history are looked up in shared tables; a GRU extracts interests from the clicked history, and an auxiliary loss
(an auxiliary net, its layers shared by name with ``reuse=tf.AUTO_REUSE``, scoring each next clicked item against
a non-clicked one) supervises it; the candidate attends over the interests and an AUGRU (``VecAttGRUCell``, its
update gate scaled by the attention) evolves them; a batch normalization, dense layers with Dice and a two-way
softmax give ``y_hat``; the loss is XDL's hand-written cross entropy over labels [B, 2] plus the auxiliary loss, and
the model returns it with its accuracy and auxiliary loss (``@xdl.tf_wrapper(is_training=True)``), its test graph
``y_hat`` first (``is_training=False``), over the same variables.

The renames (docs/porting-xdl.md): ``import xdl`` -> ``import xdl_ec.xdl as xdl``; ``tf.layers.*`` ->
``xdl.layers.*``; ``tf.variable_scope``, ``tf.get_variable``, ``tf.AUTO_REUSE`` and the initializers -> their
``tf.compat.v1`` names; ``tf.log`` -> ``tf.math.log``; ``GRUCell``, XDL's ``rnn.dynamic_rnn`` and ``VecAttGRUCell``
-> ``xdl.rnn``'s (XDL's own cells and rnn.py also run, on ``tf.compat.v1.nn.rnn_cell``: docs/porting-xdl.md, "TF 1's
RNN cells"). Beyond renames: the reader (XDL's sample IO) is ``reader(worker, num_workers)`` yielding dict batches,
histories padded to a fixed T under a float mask; the loop is :func:`job`. The synthetic log plants DIEN's signal: a
user clicks a candidate of the category of their latest clicks far more often.

Run it:
    xdl-ec train --script examples/xdl_dien.py                                  # in this process
    xdl-ec train --script examples/xdl_dien.py --servers 3 --ft ec --code 2,1 --fail-at 10:1
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, Tuple

import numpy as np
import tensorflow as tf

import xdl_ec
import xdl_ec.xdl as xdl

N_UID, N_MID, N_CAT, EMBEDDING_DIM, HIDDEN_SIZE, ATTENTION_SIZE, T = 300, 1000, 20, 8, 8, 8, 5


@dataclasses.dataclass(frozen=True)
class SyntheticLog:
    """Batch ``b`` is a pure function of (seed, b): histories of T items (fewer for some users: padded with id 0 under
    a zero mask), a non-clicked item per position, and a candidate clicked often when its category is that of the
    user's latest click."""

    seed: int = 0
    batch_size: int = 32
    batches: int = 100
    eval_batches: int = 4

    def batch(self, index: int, split: str = "train") -> Dict[str, Any]:
        rng = np.random.default_rng([self.seed, index, 0 if split == "train" else 1])
        n = self.batch_size
        item_cat = np.random.default_rng(self.seed).integers(0, N_CAT, N_MID)
        lengths = rng.integers(2, T + 1, n)
        mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
        mid_his = np.where(mask > 0, rng.integers(1, N_MID, (n, T)), 0)
        noclk_mid_his = np.where(mask > 0, rng.integers(1, N_MID, (n, T)), 0)
        mid = rng.integers(1, N_MID, n)
        latest = item_cat[mid_his[np.arange(n), lengths - 1]]
        clicked = (rng.random(n) < np.where(item_cat[mid] == latest, 0.85, 0.15)).astype(np.float32)
        return {
            "label": np.stack([clicked, 1.0 - clicked], 1),  # XDL's target [B, 2]
            "uid": rng.integers(0, N_UID, n),
            "mid": mid,
            "cat": item_cat[mid],
            "mid_his": mid_his,
            "cat_his": item_cat[mid_his],
            "noclk_mid_his": noclk_mid_his,
            "noclk_cat_his": item_cat[noclk_mid_his],
            "mask": mask,
        }

    def reader(self, worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        for index in range(worker, self.batches, num_workers):
            yield self.batch(index)

    def eval_reader(self) -> Iterator[Dict[str, Any]]:
        for index in range(self.eval_batches):
            yield self.batch(index, "eval")


def get_tf_initializer() -> Any:
    return tf.compat.v1.truncated_normal_initializer(stddev=0.1)


def dice(x: Any, name: str) -> Any:
    """XDL's Dice: a PReLU whose gate is the sigmoid of the batch-normalized input, its slope made by get_variable."""
    alphas = tf.compat.v1.get_variable(
        "alpha" + name, x.shape[-1], initializer=tf.compat.v1.constant_initializer(0.0), dtype=tf.float32
    )
    mean = tf.reduce_mean(x, axis=0)
    std = tf.sqrt(tf.reduce_mean(tf.square(x - mean), axis=0) + 1e-8)
    x_p = tf.sigmoid((x - mean) / std)
    return alphas * (1.0 - x_p) * x + x_p * x


def din_fcn_attention(query: Any, facts: Any, mask: Any) -> Any:
    """DIN's attention of ``query`` [B, d] over ``facts`` [B, T, H] under ``mask`` [B, T]: the scores [B, T]."""
    query = xdl.layers.dense(query, int(facts.shape[-1]), activation=None, name="f1_att_query")
    queries = tf.tile(tf.expand_dims(query, 1), [1, int(facts.shape[1]), 1])
    din_all = tf.concat([queries, facts, queries - facts, queries * facts], axis=-1)
    d_layer_1 = xdl.layers.dense(din_all, ATTENTION_SIZE, activation=tf.nn.sigmoid, name="f1_att")
    scores = tf.squeeze(xdl.layers.dense(d_layer_1, 1, activation=None, name="f2_att"), -1)
    paddings = tf.ones_like(scores) * (-(2.0**32) + 1)
    return tf.nn.softmax(tf.where(mask > 0, scores, paddings))


def auxiliary_net(in_: Any, stag: str) -> Any:
    """The auxiliary net, called on clicked and on non-clicked items: its layers shared by name."""
    with tf.compat.v1.variable_scope("aux", reuse=tf.compat.v1.AUTO_REUSE):
        bn1 = xdl.layers.batch_normalization(
            inputs=in_, name="bn1" + stag, reuse=tf.compat.v1.AUTO_REUSE, training=True
        )
        dnn1 = tf.nn.sigmoid(
            xdl.layers.dense(
                bn1, 16, kernel_initializer=get_tf_initializer(), name="f1" + stag, reuse=tf.compat.v1.AUTO_REUSE
            )
        )
        dnn2 = tf.nn.sigmoid(
            xdl.layers.dense(
                dnn1, 8, kernel_initializer=get_tf_initializer(), name="f2" + stag, reuse=tf.compat.v1.AUTO_REUSE
            )
        )
        dnn3 = xdl.layers.dense(
            dnn2, 2, kernel_initializer=get_tf_initializer(), name="f3" + stag, reuse=tf.compat.v1.AUTO_REUSE
        )
        return tf.nn.softmax(dnn3) + 0.00000001


def auxiliary_loss(h_states: Any, click_seq: Any, noclick_seq: Any, mask: Any, stag: str) -> Any:
    click_prop_ = auxiliary_net(tf.concat([h_states, click_seq], -1), stag)[:, :, 0]
    noclick_prop_ = auxiliary_net(tf.concat([h_states, noclick_seq], -1), stag)[:, :, 0]
    click_loss_ = -tf.math.log(click_prop_) * mask
    noclick_loss_ = -tf.math.log(1.0 - noclick_prop_) * mask
    return tf.reduce_mean(click_loss_ + noclick_loss_)


def embeddings(batch: Any) -> Dict[str, Any]:
    init = xdl.TruncatedNormal(stddev=0.1)
    out = {"uid": xdl.embedding("uid_embedding", batch["uid"], init, EMBEDDING_DIM, N_UID, "sum")}
    for name in ("mid", "mid_his", "noclk_mid_his"):  # one table, three entries: its rows shared
        out[name] = xdl.embedding(
            "mid_embedding", batch[name], init, EMBEDDING_DIM, N_MID, None if "his" in name else "sum"
        )
    for name in ("cat", "cat_his", "noclk_cat_his"):
        out[name] = xdl.embedding(
            "cat_embedding", batch[name], init, EMBEDDING_DIM, N_CAT, None if "his" in name else "sum"
        )
    return out


def build_tf_net(batch: Any) -> Tuple[Any, Any, Any, Any]:
    """(y_hat, loss, accuracy, aux_loss) of XDL's Model_DIEN."""
    e = embeddings(batch)
    mask, target = batch["mask"], batch["label"]
    seq_len = tf.reduce_sum(mask, 1)
    with tf.compat.v1.variable_scope("tf_model", reuse=tf.compat.v1.AUTO_REUSE):
        item_eb = tf.concat([e["mid"], e["cat"]], 1)
        item_his_eb = tf.concat([e["mid_his"], e["cat_his"]], 2)
        item_his_eb_sum = tf.reduce_sum(item_his_eb * mask[:, :, None], 1)
        noclk_item_his_eb = tf.concat([e["noclk_mid_his"], e["noclk_cat_his"]], 2)
        rnn_outputs, _ = xdl.rnn.dynamic_rnn(
            xdl.rnn.GRUCell(HIDDEN_SIZE, kernel_initializer=get_tf_initializer()),
            inputs=item_his_eb,
            sequence_length=seq_len,
            dtype=tf.float32,
            scope="gru1",
        )
        aux_loss = auxiliary_loss(
            rnn_outputs[:, :-1, :], item_his_eb[:, 1:, :], noclk_item_his_eb[:, 1:, :], mask[:, 1:], stag="gru"
        )
        alphas = din_fcn_attention(item_eb, rnn_outputs, mask)
        _, final_state2 = xdl.rnn.dynamic_rnn(
            xdl.rnn.VecAttGRUCell(HIDDEN_SIZE, kernel_initializer=get_tf_initializer()),
            inputs=rnn_outputs,
            att_scores=tf.expand_dims(alphas, -1),
            sequence_length=seq_len,
            dtype=tf.float32,
            scope="gru2",
        )
        inp = tf.concat([e["uid"], item_eb, final_state2, item_his_eb_sum], 1)
        bn1 = xdl.layers.batch_normalization(inputs=inp, name="bn1", training=True)
        dnn1 = dice(
            xdl.layers.dense(bn1, 32, activation=None, kernel_initializer=get_tf_initializer(), name="f1"), "dice_1"
        )
        dnn2 = dice(
            xdl.layers.dense(dnn1, 16, activation=None, kernel_initializer=get_tf_initializer(), name="f2"), "dice_2"
        )
        dnn3 = xdl.layers.dense(dnn2, 2, activation=None, kernel_initializer=get_tf_initializer(), name="f3")
        y_hat = tf.nn.softmax(dnn3) + 0.00000001
        ctr_loss = -tf.reduce_mean(tf.math.log(y_hat) * target)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.round(y_hat), target), tf.float32))
    return y_hat, ctr_loss + aux_loss, accuracy, aux_loss


@xdl.tf_wrapper(is_training=True)
def tf_train_model(batch: Any) -> Any:
    _, loss, accuracy, aux_loss = build_tf_net(batch)
    return loss, [accuracy, aux_loss]


@xdl.tf_wrapper(is_training=False)
def tf_test_model(batch: Any) -> Any:
    y_hat, loss, accuracy, aux_loss = build_tf_net(batch)
    return y_hat, [loss, accuracy, aux_loss, batch["label"]]


def make_job(log: SyntheticLog = SyntheticLog()) -> xdl_ec.Job:
    return xdl.xdl_job(tf_train_model, log.reader, xdl.Adam(0.005), eval_reader=log.eval_reader, test=tf_test_model)


def job() -> xdl_ec.Job:
    """What ``xdl-ec train --script examples/xdl_dien.py`` runs."""
    return make_job()


if __name__ == "__main__":
    report = make_job().fit(deterministic=True, seed=3)
    print({k: report[k] for k in ("steps", "final_loss", "auc", "logloss", "accuracy", "outputs")})
