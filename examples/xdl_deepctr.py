"""XDL's deepctr example (xdl/examples/deepctr/deepctr.py in alibaba/x-deeplearning), ported to xdl-ec.

The model code is XDL's with renames only (see xdl_ec.xdl for the list): ``import xdl`` -> ``import xdl_ec.xdl
as xdl``, ``tf.layers.dense`` -> ``xdl.layers.dense``, ``tf.losses.sigmoid_cross_entropy`` ->
``xdl.losses.sigmoid_cross_entropy``, ``tf.truncated_normal_initializer`` ->
``tf.compat.v1.truncated_normal_initializer``. XDL's DataReader of data.txt becomes ``SyntheticLog.reader``, a
seeded synthetic log with the same entries (``sparse0``, ``sparse1``, ``deep0``, ``label``); ``train()`` takes
the batch instead of reading it and returns the loss, and the TrainSession loop becomes :func:`job`. Three
settings differ from XDL's example, so that a short run learns: the hidden layers have ReLUs and a larger initial
scale (XDL's four linear layers at stddev 0.001 pass almost no gradient back), and the optimizer is Adam(0.01)
instead of SGD(0.5).

The log: ``sparse0`` one id per example (e.g. the ad), ``sparse1`` a variable-length list of ids (e.g. the user's
recent categories), ``deep0`` DENSE floats; the click's log-odds are a hidden weight of the sparse0 id, the mean
hidden weight of the sparse1 ids, and a linear function of deep0, so a model that learns the embeddings beats one
that cannot (the hold-out AUC says how much).

Run it:
    xdl-ec train --script examples/xdl_deepctr.py                     # in this process
    xdl-ec train --script examples/xdl_deepctr.py --servers 3 --ft ec --code 2,1 --fail-at 40:1
    python examples/xdl_deepctr.py                                    # the same job from Python
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator

import numpy as np
import tensorflow as tf

import xdl_ec
import xdl_ec.xdl as xdl

FEATURE_DIM, EMB_DIM, DENSE, MAX_LIST = 1024, 8, 16, 5
KERNEL_STDDEV = 0.05


@dataclasses.dataclass(frozen=True)
class SyntheticLog:
    """Stands for XDL's data.txt: batch ``b`` of the train split (or of the hold-out) is a pure function of
    (seed, b), so every reader call reads the same batches (what a restarted worker's replay needs)."""

    seed: int = 0
    batch_size: int = 64
    batches: int = 300
    eval_batches: int = 16

    def _truth(self) -> Dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        return {
            "w0": rng.normal(size=FEATURE_DIM) * 1.5,
            "w1": rng.normal(size=FEATURE_DIM) * 1.5,
            "deep": rng.normal(size=DENSE) * 0.3,
        }

    def batch(self, index: int, split: str = "train") -> Dict[str, Any]:
        truth = self._truth()
        rng = np.random.default_rng([self.seed, index, 0 if split == "train" else 1])
        n = self.batch_size
        sparse0 = np.minimum(rng.zipf(1.2, n) - 1, FEATURE_DIM - 1).astype(np.int64)
        counts = rng.integers(1, MAX_LIST + 1, n)
        row_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        sparse1 = np.minimum(rng.zipf(1.3, int(row_splits[-1])) - 1, FEATURE_DIM - 1).astype(np.int64)
        deep0 = rng.normal(size=(n, DENSE)).astype(np.float32)
        list_mean = np.add.reduceat(truth["w1"][sparse1], row_splits[:-1]) / counts
        logit = truth["w0"][sparse0] + list_mean + deep0 @ truth["deep"] - 0.5
        label = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32).reshape(n, 1)
        return {"sparse0": sparse0, "sparse1": (sparse1, row_splits), "deep0": deep0, "label": label}

    def reader(self, worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        """XDL's ``reader.read()`` batches: worker i of W reads batches i, i + W, ..."""
        return (self.batch(b) for b in range(worker, self.batches, num_workers))

    def holdout(self) -> Iterator[Dict[str, Any]]:
        return (self.batch(b, "eval") for b in range(self.eval_batches))


def train(batch):  # noqa: ANN001, ANN201 - XDL's train() from `batch = reader.read()` to the loss
    emb1 = xdl.embedding(
        "emb1", batch["sparse0"], xdl.TruncatedNormal(stddev=0.001), EMB_DIM, FEATURE_DIM, vtype="hash"
    )
    emb2 = xdl.embedding(
        "emb2", batch["sparse1"], xdl.TruncatedNormal(stddev=0.001), EMB_DIM, FEATURE_DIM, vtype="hash"
    )
    loss = model(batch["deep0"], [emb1, emb2], batch["label"])
    return loss


@xdl.tf_wrapper()
def model(deep, embeddings, labels):  # noqa: ANN001, ANN201 - XDL's model, renames only
    input = tf.concat([deep] + embeddings, 1)  # noqa: A001 - XDL's name
    fc1 = xdl.layers.dense(
        input,
        128,
        activation=tf.nn.relu,
        kernel_initializer=tf.compat.v1.truncated_normal_initializer(stddev=KERNEL_STDDEV),
    )
    fc2 = xdl.layers.dense(
        fc1,
        64,
        activation=tf.nn.relu,
        kernel_initializer=tf.compat.v1.truncated_normal_initializer(stddev=KERNEL_STDDEV),
    )
    fc3 = xdl.layers.dense(
        fc2,
        32,
        activation=tf.nn.relu,
        kernel_initializer=tf.compat.v1.truncated_normal_initializer(stddev=KERNEL_STDDEV),
    )
    y = xdl.layers.dense(fc3, 1, kernel_initializer=tf.compat.v1.truncated_normal_initializer(stddev=KERNEL_STDDEV))
    loss = xdl.losses.sigmoid_cross_entropy(labels, y)
    return loss


def make_job(log: SyntheticLog = SyntheticLog()) -> xdl_ec.Job:
    """XDL's ``xdl.SGD(0.5).optimize()`` (here Adam) and TrainSession loop: the job that runs them."""
    return xdl.xdl_job(train, log.reader, xdl.Adam(0.01), eval_reader=log.holdout)


def job() -> xdl_ec.Job:
    """What ``xdl-ec train --script`` calls."""
    return make_job()


if __name__ == "__main__":
    report = job().fit(deterministic=True)
    print(
        f"{report['samples']:,} samples, {report['samples_per_sec']:,.0f} samples/s, hold-out AUC "
        f"{report['auc']:.4f}, model_digest {report['model_digest'][:16]}"
    )
