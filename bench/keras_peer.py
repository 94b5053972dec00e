"""The plain-Keras peer of ``xdl-ec train``: the same model body on a dense Keras ``Embedding`` table.

Shape: one shared ``keras.layers.Embedding(buckets, emb_dim)`` (the xdl-ec trainer also uses one table for the 26
columns) indexed by ``key mod buckets`` of the same salted keys, the same body (:func:`xdl_ec.models.build_model`),
the same dense Keras optimizer, the same loss, data, batches and epochs. Rows start uniform in [-0.05, 0.05) as
the xdl-ec table's do.

Table optimizer: by default TF's sparse Adagrad kernel (``ResourceSparseApplyAdagradV2``) on the deduplicated
``IndexedSlices`` gradient, the formula the xdl-ec table applies, touching only the rows in the batch. Keras 3's
own ``Adagrad`` (``table_optimizer="keras"``) densifies the update over the whole table (about 170 ms per step at
2**20 rows on 2 cores), which would make the peer needlessly slow; it is kept as an option.

Used by ``bench/bench_train.py`` and by the AUC comparison test; also runnable:
``python bench/keras_peer.py --data ../shared/data/criteo_kaggle_train_head10k.tsv.gz``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Optional

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

from xdl_ec.builtin.criteo_job import FEATURE_NAME, CriteoModel, TrainConfig, open_training_data  # noqa: E402
from xdl_ec.data.schema import NUM_SPARSE, tf_signature  # noqa: E402
from xdl_ec.data.source import TrainingData  # noqa: E402
from xdl_ec.model.metrics import holdout_metrics  # noqa: E402
from xdl_ec.tf.determinism import configure_determinism  # noqa: E402

DEFAULT_BUCKETS = 1 << 20


class KerasPeer:
    """Trains the plain-Keras peer of a :class:`TrainConfig` (only Adagrad is supported as table optimizer)."""

    def __init__(
        self,
        config: TrainConfig,
        data: Optional[TrainingData] = None,
        *,
        buckets: int = DEFAULT_BUCKETS,
        table_optimizer: str = "tf_sparse",
    ) -> None:
        if config.optimizer != "adagrad":
            raise ValueError(f"optimizer: the Keras peer implements adagrad only, got {config.optimizer!r}")
        if table_optimizer not in ("tf_sparse", "keras"):
            raise ValueError(f"table_optimizer: must be 'tf_sparse' or 'keras', got {table_optimizer!r}")
        self.config = config
        self.data = data if data is not None else open_training_data(config)
        self.buckets = int(buckets)
        configure_determinism(config.seed, config.deterministic)
        self.embedding = tf.keras.layers.Embedding(
            self.buckets, config.emb_dim, embeddings_initializer=tf.keras.initializers.RandomUniform(-0.05, 0.05)
        )
        self.embedding.build((None, NUM_SPARSE))
        # The layer's tf.Variable: looked up with tf.nn.embedding_lookup (a ResourceGather of the batch's rows).
        # Calling the Keras layer instead reads the whole table every step (36 ms at 2**20 x 16 on 2 cores).
        self.table = self.embedding.embeddings.value
        # the same body, built as the job builds it (seeded just before), and the same dense optimizer
        tf.keras.utils.set_random_seed(config.seed)
        self.model = CriteoModel(config)()
        self.model({FEATURE_NAME: tf.zeros([1, NUM_SPARSE, config.emb_dim])}, tf.zeros([1, 13]))
        self.dense_optimizer = tf.keras.optimizers.get(
            {"class_name": config.dense_optimizer, "config": {"learning_rate": config.dense_lr}}
        )
        self.dense_optimizer.build(self.model.trainable_variables)
        table = self.table
        if table_optimizer == "keras":
            keras_adagrad = tf.keras.optimizers.Adagrad(config.lr, initial_accumulator_value=0.1, epsilon=1e-7)
            keras_adagrad.build([table])
            self._apply_table = lambda grad: keras_adagrad.apply([grad], [table])
        else:
            self._accumulator = tf.Variable(tf.fill([self.buckets, config.emb_dim], 0.1), trainable=False)
            self._apply_table = self._sparse_adagrad
        self._train_step = tf.function(self._step, input_signature=list(tf_signature()))
        self._predict = tf.function(
            lambda dense, sparse: tf.sigmoid(self.model({FEATURE_NAME: self._lookup(sparse)}, dense, training=False)),
            input_signature=list(tf_signature()[:2]),
        )

    def _lookup(self, sparse: tf.Tensor) -> tf.Tensor:
        return tf.nn.embedding_lookup(self.table, tf.math.floormod(sparse, self.buckets))

    def _sparse_adagrad(self, grad: tf.IndexedSlices) -> Any:
        unique, position = tf.unique(grad.indices)
        summed = tf.math.unsorted_segment_sum(grad.values, position, tf.shape(unique)[0])
        return tf.raw_ops.ResourceSparseApplyAdagradV2(
            var=self.table.handle,
            accum=self._accumulator.handle,
            lr=tf.constant(self.config.lr, tf.float32),
            epsilon=tf.constant(1e-7, tf.float32),
            grad=summed,
            indices=unique,
        )

    def _step(self, dense: tf.Tensor, sparse: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            emb = self._lookup(sparse)
            logits = self.model({FEATURE_NAME: emb}, dense, training=True)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logits))
        grads = tape.gradient(loss, [*variables, self.table])
        self.dense_optimizer.apply(grads[:-1], variables)
        self._apply_table(grads[-1])
        return loss

    def fit(self) -> dict:
        """Trains for the config's steps or epochs (same fields as ``Job.fit``'s report)."""
        cfg = self.config
        samples, steps, losses = 0, 0, []
        first_step_end, first_samples = None, 0
        start = time.perf_counter()
        # The usual Keras input pipeline: tf.data over the batches, prefetched in the background.
        dataset = tf.data.Dataset.from_generator(
            lambda: (tuple(b) for b in self.data.train_batches(cfg.batch_size)), output_signature=tf_signature()
        )
        dataset = dataset.repeat() if cfg.steps is not None else dataset.repeat(cfg.epochs)
        if cfg.steps is not None:
            dataset = dataset.take(cfg.steps)
        for dense, sparse, label in dataset.prefetch(4):
            losses.append(float(self._train_step(dense, sparse, label)))
            samples += int(label.shape[0])
            steps += 1
            if first_step_end is None:
                first_step_end, first_samples = time.perf_counter(), samples
        end = time.perf_counter()
        seconds = end - start
        steady = (samples - first_samples) / (end - first_step_end) if samples > first_samples else None
        return {
            "samples": samples,
            "steps": steps,
            "train_seconds": seconds,
            "samples_per_sec": samples / seconds,
            "steady_samples_per_sec": steady,
            "final_loss": float(np.mean(losses[-50:])) if losses else None,
        }

    def evaluate(self) -> dict:
        """AUC and log loss on the held-out split."""
        labels, probs = [], []
        for b in self.data.eval_batches(max(self.config.batch_size, 4096)):
            probs.append(self._predict(b.dense, b.sparse).numpy())
            labels.append(b.label)
        return holdout_metrics(labels, probs)

    def run(self) -> dict:
        """fit + evaluate."""
        return {**self.fit(), **self.evaluate()}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Train the plain-Keras peer of `xdl-ec train` and print its report")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--data")
    src.add_argument("--synthetic", action="store_true")
    parser.add_argument("--model", default="dlrm", choices=("dlrm", "mlp"))
    parser.add_argument("--steps", type=int)
    parser.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    parser.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    parser.add_argument("--buckets", type=int, default=DEFAULT_BUCKETS)
    parser.add_argument("--table-optimizer", choices=("tf_sparse", "keras"), default="tf_sparse")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = TrainConfig(
        data=args.data,
        synthetic=args.synthetic,
        model=args.model,
        steps=args.steps,
        epochs=args.epochs,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    print(json.dumps(KerasPeer(config, buckets=args.buckets, table_optimizer=args.table_optimizer).run(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
