"""DIN on xdl-ec: target attention of the candidate item over the user's behaviour sequence (Zhou et al., KDD 2018),
with BatchNormalization and the Dice activation.

The user's last clicked items are a sequence feature, ``(ids [B, T], lengths [B])``; the model receives them as
``embedded["hist"]`` [B, T, dim] (zero rows past each length) and ``embedded["hist_mask"]`` [B, T]. The candidate
item and the clicked items are the same ids in one table (``shared_ids=True``: one row per item). An attention MLP
scores each clicked item against the candidate; the weighted sum of the history, the candidate and their product
go through BatchNormalization and a Dice MLP. The hour of the impression is a side input (``xdl_ec.Input``), which
the model receives beside ``dense``.

A seeded synthetic log plants the signal: every item belongs to one of a few hidden categories, a user's history
is mostly of one category, and a candidate of the history's category is clicked far more often (a model must
compare the candidate with the history to learn that part); each item also has a hidden appeal.

Run it:
    xdl-ec train --script examples/din.py
    xdl-ec train --script examples/din.py --servers 3 --ft ec --code 2,1 --fail-at 20:1
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator

import numpy as np

import xdl_ec

ITEMS, CATEGORIES, MAX_LEN, HOURS = 600, 6, 12, 24


@dataclasses.dataclass(frozen=True)
class BehaviourLog:
    """Batch ``b`` of the train split (or of the hold-out) is a pure function of (seed, b)."""

    seed: int = 0
    batch_size: int = 256
    batches: int = 120
    eval_batches: int = 16

    def batch(self, b: int, split: int) -> Dict[str, Any]:
        rng = np.random.default_rng([self.seed, split, b])
        n = self.batch_size
        category = np.arange(ITEMS) % CATEGORIES  # item i's hidden category
        liked = rng.integers(0, CATEGORIES, n)  # each user's favourite category
        lengths = rng.integers(1, MAX_LEN + 1, n)
        # a history is mostly of the favourite category, the rest random
        own = liked[:, None] + CATEGORIES * rng.integers(0, ITEMS // CATEGORIES, (n, MAX_LEN))
        noise = rng.integers(0, ITEMS, (n, MAX_LEN))
        hist = np.where(rng.random((n, MAX_LEN)) < 0.8, own, noise)
        hist[np.arange(MAX_LEN)[None, :] >= lengths[:, None]] = 0  # padding: never looked up
        item = rng.integers(0, ITEMS, n)
        hour = rng.integers(0, HOURS, n)
        appeal = np.random.default_rng(self.seed).normal(0.0, 1.0, ITEMS)  # each item's hidden appeal
        logit = np.where(category[item] == liked, 1.5, -1.5) + appeal[item] + 0.3 * np.cos(hour / HOURS * 2 * np.pi)
        click = rng.random(n) < 1 / (1 + np.exp(-logit))
        return {
            "label": click.astype(np.float32),
            "item": item.astype(np.int64),
            "hist": (hist.astype(np.int64), lengths.astype(np.int64)),
            "hour": hour.astype(np.int64),
        }

    def train(self, worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        for b in range(worker, self.batches, num_workers):
            yield self.batch(b, 0)

    def holdout(self) -> Iterator[Dict[str, Any]]:
        for b in range(self.eval_batches):
            yield self.batch(b, 1)


def make_model() -> Any:
    import tensorflow as tf

    class Dice(tf.keras.layers.Layer):
        """DIN's data-dependent activation: x * (p + alpha (1 - p)), p = sigmoid of x normalised over the batch."""

        def __init__(self) -> None:
            super().__init__()
            self.norm = tf.keras.layers.BatchNormalization(center=False, scale=False, epsilon=1e-6, momentum=0.9)

        def build(self, input_shape: Any) -> None:
            self.alpha = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="alpha")

        def call(self, x, training=False):  # noqa: ANN001, ANN201
            p = tf.sigmoid(self.norm(x, training=training))
            return x * (p + self.alpha * (1.0 - p))

    class Din(tf.keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.attention = [tf.keras.layers.Dense(16, activation="sigmoid"), tf.keras.layers.Dense(1)]
            self.norm = tf.keras.layers.BatchNormalization(momentum=0.9)
            self.hidden = tf.keras.layers.Dense(32)
            self.dice = Dice()
            self.out = tf.keras.layers.Dense(1)
            self.scale = self.add_weight(shape=(), initializer="ones", name="match_scale")

        def call(self, embedded, inputs, training=False):  # noqa: ANN001, ANN201 - the job API's call
            hist, mask, item = embedded["hist"], embedded["hist_mask"], embedded["item"]
            target = tf.broadcast_to(item[:, None, :], tf.shape(hist))
            scores = tf.concat([hist, target, hist * target, hist - target], axis=-1)
            for layer in self.attention:
                scores = layer(scores)
            scores = tf.where(mask[:, :, None], scores, tf.fill(tf.shape(scores), -1e9))
            weights = tf.nn.softmax(scores, axis=1) * tf.cast(mask, tf.float32)[:, :, None]
            interest = tf.reduce_sum(weights * hist, axis=1)
            hour = tf.one_hot(inputs["hour"], HOURS)
            match = tf.reduce_sum(interest * item, axis=1, keepdims=True)
            x = tf.concat([interest, item, interest * item, match, hour], axis=1)
            x = self.dice(self.norm(self.hidden(x), training=training), training=training)
            return self.out(x) + self.scale * match

    return Din()


def make_job(log: BehaviourLog = BehaviourLog()) -> xdl_ec.Job:
    # Adam: the candidate-history products' gradients start small, which Adagrad's accumulator would damp
    items = xdl_ec.Table(
        "items",
        dim=8,
        optimizer=xdl_ec.optim.Adam(0.02),
        seed=log.seed,
        initializer=xdl_ec.init.TruncatedNormal(stddev=0.3),
    )
    return xdl_ec.Job(
        tables=[items],
        features=[
            xdl_ec.Feature("item", items, shared_ids=True),
            xdl_ec.Feature("hist", items, shared_ids=True, sequence=True, max_length=MAX_LEN),
        ],
        inputs=[xdl_ec.Input("hour", "int64", ())],
        model_fn=make_model,
        input_fn=log.train,
        eval_fn=log.holdout,
        dense_learning_rate=0.01,
    )


def job() -> xdl_ec.Job:
    """What ``xdl-ec train --script`` calls."""
    return make_job()


if __name__ == "__main__":
    report = job().fit(deterministic=True)
    print(
        f"{report['samples']:,} samples, hold-out AUC {report['auc']:.3f}, model_digest {report['model_digest'][:16]}"
    )
