"""Benchmark: a user's job (examples/user_item_tags.py: three tables of dims 16/16/8, a variable-length tags
feature, dense features) trained with the job API in one process, on parameter servers in this process and on
Ray, against the same model with plain Keras embeddings (one ``tf.keras.layers.Embedding`` per table over hashed
ids, TF's sparse Adagrad kernel on the looked-up rows) in the same run. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_job.py [--batches 200] [--batch-size 1024] [--repeats 3] [--ray]

Every side trains the same batches (Adagrad on every table so the peer's optimizer is the same formula); turns
alternate side by side for --repeats rounds, the first turn of each side discarded as warm-up; medians of
steady samples/s (after each run's first step). Goal: the job in one process >= 1.0x plain Keras.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # example_jobs, beside this file (python -P too)

from example_jobs import load_example  # noqa: E402

import xdl_ec  # noqa: E402

example = load_example("user_item_tags")
BUCKETS = 1 << 16


def xdl_job(log: Any) -> xdl_ec.Job:
    tables = [
        xdl_ec.Table("users", 16, optimizer=xdl_ec.optim.Adagrad(0.05)),
        xdl_ec.Table("items", 16, optimizer=xdl_ec.optim.Adagrad(0.05)),
        xdl_ec.Table("tags", 8, optimizer=xdl_ec.optim.Adagrad(0.05)),
    ]
    features = [
        xdl_ec.Feature("user", tables[0]),
        xdl_ec.Feature("item", tables[1]),
        xdl_ec.Feature("tags", tables[2], combiner="mean"),
    ]
    return xdl_ec.Job(tables, features, example.make_model, log.train, dense_learning_rate=0.003)


class KerasPeer:
    """The same model over ``tf.keras.layers.Embedding`` tables indexed by ``id mod BUCKETS``."""

    def __init__(self, log: Any) -> None:
        import tensorflow as tf

        self.tf, self.log = tf, log
        tf.keras.utils.set_random_seed(0)
        self.tables = {}
        self.accumulators = {}
        for name, dim in (("user", 16), ("item", 16), ("tags", 8)):
            layer = tf.keras.layers.Embedding(
                BUCKETS, dim, embeddings_initializer=tf.keras.initializers.TruncatedNormal(0.0, 0.05)
            )
            layer.build((None,))
            self.tables[name] = layer.embeddings.value
            self.accumulators[name] = tf.Variable(tf.fill([BUCKETS, dim], 0.1), trainable=False)
        self.model = example.make_model()
        self.optimizer = tf.keras.optimizers.Adam(0.003)
        self._step = tf.function(self._train, reduce_retracing=True)

    def _train(self, user, item, tag_values, tag_splits, dense, label):  # noqa: ANN001, ANN202
        tf = self.tf
        with tf.GradientTape() as tape:
            tags = tf.RaggedTensor.from_row_splits(tf.nn.embedding_lookup(self.tables["tags"], tag_values), tag_splits)
            embedded = {
                "user": tf.nn.embedding_lookup(self.tables["user"], user),
                "item": tf.nn.embedding_lookup(self.tables["item"], item),
                # the mean combiner; an example without tags pools to zeros, as xdl-ec's does
                "tags": tf.math.divide_no_nan(
                    tf.reduce_sum(tags, axis=1), tf.cast(tf.expand_dims(tags.row_lengths(), 1), tf.float32)
                ),
            }
            logits = tf.squeeze(self.model(embedded, dense, training=True), 1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logits))
        variables = self.model.trainable_variables
        grads = tape.gradient(loss, [*variables, *self.tables.values()])
        self.optimizer.apply(grads[: len(variables)], variables)
        for (name, table), grad in zip(self.tables.items(), grads[len(variables) :]):
            unique, position = tf.unique(grad.indices)
            summed = tf.math.unsorted_segment_sum(grad.values, position, tf.shape(unique)[0])
            tf.raw_ops.ResourceSparseApplyAdagradV2(
                var=table.handle,
                accum=self.accumulators[name].handle,
                lr=tf.constant(0.05),
                epsilon=tf.constant(1e-7),
                grad=summed,
                indices=unique,
            )
        return loss

    def fit(self) -> Dict[str, Any]:
        samples, first_end, first_samples = 0, None, 0
        start = time.perf_counter()
        for b in self.log.train(0, 1):
            values, splits = b["tags"]
            self._step(b["user"] % BUCKETS, b["item"] % BUCKETS, values % BUCKETS, splits, b["dense"], b["label"])
            samples += b["label"].shape[0]
            if first_end is None:
                first_end, first_samples = time.perf_counter(), samples
        end = time.perf_counter()
        return {
            "steady_samples_per_sec": (samples - first_samples) / (end - first_end),
            "samples_per_sec": samples / (end - start),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--ray", action="store_true", help="also train on Ray (a local Ray, started once)")
    args = parser.parse_args()
    log = example.ClickLog(batch_size=args.batch_size, batches=args.batches)
    sides = {"keras": None, "job, one process": None, "job, local servers": xdl_ec.Cluster(servers=args.servers)}
    if args.ray:
        from xdl_ec.ps.backend import connect_ray

        connect_ray()
        sides["job, Ray servers"] = xdl_ec.Cluster(servers=args.servers, backend="ray")
    print(f"{args.batches} batches of {args.batch_size}, {args.servers} servers, {args.repeats} rounds (+1 warm-up)")
    rates: Dict[str, List[float]] = {name: [] for name in sides}
    for round_ in range(args.repeats + 1):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for name in order:
            if name == "keras":
                rate = KerasPeer(log).fit()["steady_samples_per_sec"]
            else:
                rate = xdl_job(log).fit(cluster=sides[name])["steady_samples_per_sec"]
            if round_ > 0:
                rates[name].append(rate)
            print(
                f"  round {round_} {name:>20}: {rate:>10,.0f} samples/s steady" + ("  (warm-up)" if not round_ else ""),
                flush=True,
            )
    base = statistics.median(rates["keras"])
    for name, values in rates.items():
        median = statistics.median(values)
        print(
            f"{name:>20}: median {median:>10,.0f} samples/s ({min(values):,.0f}..{max(values):,.0f}), "
            f"{median / base:.2f}x plain Keras"
        )
    print("goal: job, one process >= 1.0x plain Keras")
    return 0


if __name__ == "__main__":
    sys.exit(main())
