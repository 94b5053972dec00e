"""Your own model on xdl-ec: three tables of different dims, a variable-length feature, dense features.

A seeded synthetic recommendation log: each example is a user, an item, a variable-length list of the item's
tags and 4 dense features; the click depends on hidden user and item biases and user/item/tag vectors (so AUC is
meaningful: a model that learns the embeddings beats one that cannot). Tables: ``users`` (dim 16), ``items`` (dim 16),
``tags`` (dim 8,
pooled by a mean combiner).

Run it:
    xdl-ec train --script examples/user_item_tags.py                       # in this process
    xdl-ec train --script examples/user_item_tags.py --servers 3 --ft ec --code 2,1 --fail-at 40:1
    python examples/user_item_tags.py                                      # the same job from Python
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator

import numpy as np

import xdl_ec

USERS, ITEMS, TAGS, HIDDEN = 5000, 2000, 300, 8
MAX_TAGS = 4
DENSE = 4


@dataclasses.dataclass(frozen=True)
class ClickLog:
    """The synthetic log: batch ``b`` of the train split (or of the hold-out) is a pure function of (seed, b)."""

    seed: int = 0
    batch_size: int = 256
    batches: int = 300
    eval_batches: int = 20

    def _truth(self) -> Dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        return {
            "user": rng.normal(size=(USERS, HIDDEN)),
            "item": rng.normal(size=(ITEMS, HIDDEN)),
            "tag": rng.normal(size=(TAGS, HIDDEN)) * 0.5,
            "item_tags": rng.integers(0, TAGS, (ITEMS, MAX_TAGS)),
            "item_tag_count": rng.integers(0, MAX_TAGS + 1, ITEMS),
            "dense": rng.normal(size=DENSE),
            "user_bias": rng.normal(size=USERS),
            "item_bias": rng.normal(size=ITEMS),
        }

    def batch(self, index: int, split: str = "train") -> Dict[str, Any]:
        truth = self._truth()
        rng = np.random.default_rng([self.seed, index, 0 if split == "train" else 1])
        n = self.batch_size
        users = np.minimum(rng.zipf(1.3, n) - 1, USERS - 1).astype(np.int64)
        items = np.minimum(rng.zipf(1.2, n) - 1, ITEMS - 1).astype(np.int64)
        counts = truth["item_tag_count"][items]
        splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        tags = np.concatenate([truth["item_tags"][i, :c] for i, c in zip(items, counts)]).astype(np.int64)
        dense = rng.normal(size=(n, DENSE)).astype(np.float32)
        tag_mean = np.stack(
            [truth["tag"][truth["item_tags"][i, :c]].mean(0) if c else np.zeros(HIDDEN) for i, c in zip(items, counts)]
        )
        logit = (
            truth["user_bias"][users]
            + truth["item_bias"][items]
            + np.sum(truth["user"][users] * (truth["item"][items] + tag_mean), axis=1) / np.sqrt(HIDDEN)
            + dense @ truth["dense"] * 0.5
            - 0.5
        )
        label = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
        return {"label": label, "dense": dense, "user": users, "item": items, "tags": (tags, splits)}

    def train(self, worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        """``input_fn``: worker i of W reads batches i, i + W, ..."""
        return (self.batch(b) for b in range(worker, self.batches, num_workers))

    def holdout(self) -> Iterator[Dict[str, Any]]:
        return (self.batch(b, "eval") for b in range(self.eval_batches))


def make_model() -> Any:
    """``model_fn``: a two-tower dot product plus an MLP over everything."""
    import tensorflow as tf

    class UserItemModel(tf.keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.item_tower = tf.keras.layers.Dense(16, name="item_tower")  # item + tags -> the user space
            self.hidden = tf.keras.layers.Dense(32, activation="relu", name="hidden")
            self.out = tf.keras.layers.Dense(1, name="logit")

        def call(self, embedded, dense, training=False):  # noqa: ANN001, ANN201 - the job API's call
            item = self.item_tower(tf.concat([embedded["item"], embedded["tags"]], axis=1))
            dot = tf.reduce_sum(embedded["user"] * item, axis=1, keepdims=True)
            h = self.hidden(tf.concat([embedded["user"], item, dense], axis=1))
            return self.out(tf.concat([h, dot], axis=1))  # logits [B, 1]

    return UserItemModel()


def make_job(log: ClickLog = ClickLog()) -> xdl_ec.Job:
    users = xdl_ec.Table("users", dim=16, optimizer=xdl_ec.optim.Adagrad(0.05), seed=log.seed)
    items = xdl_ec.Table("items", dim=16, optimizer=xdl_ec.optim.Adagrad(0.05), seed=log.seed + 1)
    tags = xdl_ec.Table("tags", dim=8, optimizer=xdl_ec.optim.Adam(0.01), seed=log.seed + 2)
    return xdl_ec.Job(
        tables=[users, items, tags],
        features=[
            xdl_ec.Feature("user", users),
            xdl_ec.Feature("item", items),
            xdl_ec.Feature("tags", tags, combiner="mean"),
        ],
        model_fn=make_model,
        input_fn=log.train,
        eval_fn=log.holdout,
        dense_learning_rate=0.003,
    )


def job() -> xdl_ec.Job:
    """What ``xdl-ec train --script`` calls."""
    return make_job()


if __name__ == "__main__":
    report = job().fit(deterministic=True)
    print(
        f"{report['samples']:,} samples, {report['samples_per_sec']:,.0f} samples/s, hold-out AUC "
        f"{report['auc']:.4f}, model_digest {report['model_digest'][:16]}"
    )
