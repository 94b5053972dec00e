"""XDL's mnist (xdl/examples/mnist/mnist.py in alibaba/x-deeplearning) ported by renames: a 10-class softmax over
the pixels, no embedding table.

What XDL's script does and this port keeps: ``fc`` makes its weights and bias with ``get_variable`` in a
``variable_scope("train")``; the model computes ``tf.losses.sparse_softmax_cross_entropy`` of class ids [B] and returns
it (``@xdl.tf_wrapper(is_training=True)``); the eval graph reuses the variables (``variable_scope("train",
reuse=True)``) and returns its accuracy. The renames: ``import xdl`` -> ``import xdl_ec.xdl as xdl``;
``tf.variable_scope``, ``tf.get_variable``, ``tf.zeros_initializer`` and ``tf.losses`` -> their ``tf.compat.v1``
names. Beyond renames: the reader (XDL's ``py_func`` over TF's mnist reader) is ``reader(worker, num_workers)``
yielding dict batches (here synthetic digits: 10 class centres in 64 "pixels" plus noise, as the machine has no
download); the eval graph also returns its probabilities after its accuracy, which the job predicts and serves
([B, 10]); the loop is :func:`job`. With no table, the servers hold no rows: any fault tolerance runs, a server's
loss costs nothing to rebuild, and the dense model is the driver's, as always.

Run it:
    xdl-ec train --script examples/xdl_mnist.py                                 # in this process
    xdl-ec train --script examples/xdl_mnist.py --servers 3 --ft ec --code 2,1 --fail-at 10:1
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator

import numpy as np
import tensorflow as tf

import xdl_ec
import xdl_ec.xdl as xdl

PIXELS, CLASSES = 64, 10


@dataclasses.dataclass(frozen=True)
class SyntheticDigits:
    """Batch ``b`` is a pure function of (seed, b): class ids [B] (floats, as XDL's reader gives them) and images
    [B, PIXELS], each its class centre plus noise."""

    seed: int = 0
    batch_size: int = 100
    batches: int = 100
    eval_batches: int = 4

    def batch(self, index: int, split: str = "train") -> Dict[str, Any]:
        centres = np.random.default_rng(self.seed).normal(size=(CLASSES, PIXELS)).astype(np.float32)
        rng = np.random.default_rng([self.seed, index, 0 if split == "train" else 1])
        labels = rng.integers(0, CLASSES, self.batch_size)
        noise = rng.normal(scale=1.5, size=(self.batch_size, PIXELS)).astype(np.float32)
        return {"label": labels.astype(np.float32), "images": centres[labels] + noise}

    def reader(self, worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        for index in range(worker, self.batches, num_workers):
            yield self.batch(index)

    def eval_reader(self) -> Iterator[Dict[str, Any]]:
        for index in range(self.eval_batches):
            yield self.batch(index, "eval")


def fc(inputs: Any, w_shape: Any, b_shape: Any) -> Any:
    weight = tf.compat.v1.get_variable("weights", w_shape, initializer=tf.compat.v1.zeros_initializer(tf.float32))
    bias = tf.compat.v1.get_variable("bias", b_shape, initializer=tf.compat.v1.zeros_initializer(tf.float32))
    return tf.matmul(inputs, weight) + bias


@xdl.tf_wrapper(is_training=True)
def model(batch: Any) -> Any:
    with tf.compat.v1.variable_scope("train"):
        y = fc(batch["images"], [PIXELS, CLASSES], [CLASSES])
        labels = tf.cast(batch["label"], tf.int64)
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=y)
    return loss


@xdl.tf_wrapper(is_training=False)
def eval_model(batch: Any) -> Any:
    with tf.compat.v1.variable_scope("train", reuse=True):
        eval_y = fc(batch["images"], [PIXELS, CLASSES], [CLASSES])
        labels_test = tf.cast(batch["label"], tf.int64)
        correct_prediction = tf.equal(tf.argmax(eval_y, 1), labels_test)
        accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
    return accuracy, tf.nn.softmax(eval_y)


def make_job(digits: SyntheticDigits = SyntheticDigits()) -> xdl_ec.Job:
    return xdl.xdl_job(model, digits.reader, xdl.Adagrad(0.5), eval_reader=digits.eval_reader, test=eval_model)


def job() -> xdl_ec.Job:
    """What ``xdl-ec train --script examples/xdl_mnist.py`` runs."""
    return make_job()


if __name__ == "__main__":
    report = make_job().fit(deterministic=True, seed=3)
    print({k: report[k] for k in ("steps", "final_loss", "accuracy", "auc", "logloss")})
