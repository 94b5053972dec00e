"""ESMM on xdl-ec: a click head and a conversion head over shared embeddings, trained on the whole impression
space (Ma et al., SIGIR 2018).

pCTR = sigmoid(click tower), pCVR = sigmoid(conversion tower), and the loss is the click's cross-entropy plus the
cross-entropy of a purchase against pCTCVR = pCTR x pCVR: the conversion tower learns from every impression, not
only the clicked ones. Batches carry two labels, ``"labels": {"click": [B], "buy": [B]}``; the model returns
``{"click": logits, "buy": logits}`` (the buy head's logits are pCVR's), and the loss is a callable of both dicts.
``job.evaluate`` and the report give per-head AUC; the SavedModel's ``serving_default`` returns ``{"click",
"buy"}`` probabilities.

A seeded synthetic log plants the signal: a click depends on hidden user and item biases, a purchase after a click
on another hidden item score and the price bucket.

Run it:
    xdl-ec train --script examples/esmm.py
    xdl-ec train --script examples/esmm.py --servers 3 --ft ec --code 2,1 --fail-at 20:1
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator

import numpy as np

import xdl_ec

USERS, ITEMS, PRICES = 2000, 800, 10
DENSE = 3


@dataclasses.dataclass(frozen=True)
class ImpressionLog:
    """Batch ``b`` of the train split (or of the hold-out) is a pure function of (seed, b)."""

    seed: int = 0
    batch_size: int = 256
    batches: int = 120
    eval_batches: int = 16

    def _truth(self) -> Dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        return {
            "user": rng.normal(0, 1.0, USERS),
            "item": rng.normal(0, 1.0, ITEMS),
            "buy": rng.normal(0, 1.5, ITEMS),
            "price": np.linspace(1.0, -1.0, PRICES),
            "dense": rng.normal(0, 0.5, DENSE),
        }

    def batch(self, b: int, split: int) -> Dict[str, Any]:
        truth = self._truth()
        rng = np.random.default_rng([self.seed, split, b])
        n = self.batch_size
        user = (rng.zipf(1.3, n) - 1) % USERS
        item = (rng.zipf(1.2, n) - 1) % ITEMS
        price = rng.integers(0, PRICES, n)
        dense = rng.normal(size=(n, DENSE)).astype(np.float32)
        click_logit = truth["user"][user] + truth["item"][item] + dense @ truth["dense"] - 1.0
        click = rng.random(n) < 1 / (1 + np.exp(-click_logit))
        buy_logit = truth["buy"][item] + truth["price"][price] - 0.5
        buy = click & (rng.random(n) < 1 / (1 + np.exp(-buy_logit)))
        return {
            "labels": {"click": click.astype(np.float32), "buy": buy.astype(np.float32)},
            "user": user.astype(np.int64),
            "item": item.astype(np.int64),
            "price": price.astype(np.int64),
            "dense": dense,
        }

    def train(self, worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        for b in range(worker, self.batches, num_workers):
            yield self.batch(b, 0)

    def holdout(self) -> Iterator[Dict[str, Any]]:
        for b in range(self.eval_batches):
            yield self.batch(b, 1)


def make_model() -> Any:
    import tensorflow as tf

    class Esmm(tf.keras.Model):
        """Two towers over the same embedded input: click logits and conversion logits."""

        def __init__(self) -> None:
            super().__init__()
            self.ctr = [tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(1)]
            self.cvr = [tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(1)]

        def call(self, embedded, dense, training=False):  # noqa: ANN001, ANN201 - the job API's call
            x = tf.concat([embedded["user"], embedded["item"], embedded["price"], dense], axis=1)
            ctr, cvr = x, x
            for layer in self.ctr:
                ctr = layer(ctr)
            for layer in self.cvr:
                cvr = layer(cvr)
            return {"click": ctr, "buy": cvr}

    return Esmm()


def esmm_loss(labels: Dict[str, Any], logits: Dict[str, Any]) -> Any:
    """Click cross-entropy plus purchase cross-entropy against pCTCVR = pCTR x pCVR, in log space."""
    import tensorflow as tf

    ctr = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels["click"], logits=logits["click"]))
    log_p = tf.math.log_sigmoid(logits["click"]) + tf.math.log_sigmoid(logits["buy"])  # log pCTCVR
    log_not_p = tf.math.log(-tf.math.expm1(tf.minimum(log_p, -1e-7)))  # log(1 - pCTCVR)
    ctcvr = -tf.reduce_mean(labels["buy"] * log_p + (1.0 - labels["buy"]) * log_not_p)
    return ctr + ctcvr


def make_job(log: ImpressionLog = ImpressionLog()) -> xdl_ec.Job:
    users = xdl_ec.Table("users", dim=8, optimizer=xdl_ec.optim.Adagrad(0.1), seed=log.seed)
    items = xdl_ec.Table("items", dim=8, optimizer=xdl_ec.optim.Adagrad(0.1), seed=log.seed + 1)
    return xdl_ec.Job(
        tables=[users, items],
        features=[xdl_ec.Feature("user", users), xdl_ec.Feature("item", items), xdl_ec.Feature("price", items)],
        model_fn=make_model,
        input_fn=log.train,
        eval_fn=log.holdout,
        loss=esmm_loss,
        dense_learning_rate=0.01,
    )


def job() -> xdl_ec.Job:
    """What ``xdl-ec train --script`` calls."""
    return make_job()


if __name__ == "__main__":
    report = job().fit(deterministic=True)
    heads = ", ".join(f"{h} AUC {m['auc']:.3f}" for h, m in report["heads"].items())
    print(f"{report['samples']:,} samples, hold-out {heads}, model_digest {report['model_digest'][:16]}")
