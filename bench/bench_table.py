"""Embedding table pull/push throughput against TensorFlow's own path, measured in the same run.

    PYTHONPATH=build-<name>/stage python3 -P bench/bench_table.py [--rows 1000000] [--big] [--repeats 5]

For each dim (16, 64) a table of --rows keys (random 64-bit ids, like hashed features) is filled,
then Zipf-skewed batches of 4096..65536 keys (with duplicates, as real batches have) are
  pull:  xdl_ec EmbeddingTable.pull  vs  tf.lookup.experimental.MutableHashTable (key -> row) + tf.gather
  push:  xdl_ec EmbeddingTable.push (Adagrad; duplicates summed, one step per unique key)
         vs  tf.unique + unsorted_segment_sum + hash-table lookup + ResourceSparseApplyAdagradV2
The TF side runs as a tf.function (graph), so what is measured is TF's kernels, not eager overhead.
rows/s counts batch keys (duplicates included) per second; best of --repeats. Also printed: bytes
held per row (slot blocks + key index + free list) vs the raw record bytes (goal: index <= 25%).
--big adds tables of 10M keys (several GB for d=64: needs the memory).
Goal: at least 5x TF's path.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, List

import numpy as np

import xdl_ec
from xdl_ec.sparse import init, optim

ZIPF_A = 1.1
LR, EPS, ACC0 = 0.01, 1e-7, 0.1


def best_seconds(fn: Callable[[], None], repeats: int) -> float:
    """Best of `repeats` timings after one warm-up call (caches, page faults, tf.function tracing).
    Local, not shared with bench_codec.py: benches run with python -P, so they cannot import each other."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def zipf_batch(rng: np.random.Generator, keys: np.ndarray, size: int) -> np.ndarray:
    ranks = rng.zipf(ZIPF_A, size=size) - 1
    return keys[ranks % len(keys)]


def fill_tf(tf, keys: np.ndarray, dim: int):
    index = tf.lookup.experimental.MutableHashTable(key_dtype=tf.int64, value_dtype=tf.int64, default_value=-1)
    chunk = 1 << 20
    for s in range(0, len(keys), chunk):
        index.insert(tf.constant(keys[s : s + chunk]), tf.range(s, min(s + chunk, len(keys)), dtype=tf.int64))
    params = tf.Variable(tf.random.truncated_normal([len(keys), dim], stddev=0.05))
    accum = tf.Variable(tf.fill([len(keys), dim], tf.constant(ACC0, tf.float32)))
    return index, params, accum


def bench_dim(tf, n_rows: int, dim: int, batches: List[int], repeats: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(-(1 << 62), 1 << 62, size=n_rows, dtype=np.int64)
    keys = np.unique(keys)
    rng.shuffle(keys)
    table = xdl_ec.EmbeddingTable(
        f"bench{dim}", dim, optimizer=optim.Adagrad(LR, ACC0, EPS), initializer=init.TruncatedNormal(0.0, 0.05)
    )
    chunk = 1 << 18
    for s in range(0, len(keys), chunk):
        table.pull(keys[s : s + chunk])
    stats = table.memory_stats()
    index, params, accum = fill_tf(tf, keys, dim)

    @tf.function(jit_compile=False)
    def tf_pull(batch):
        return tf.gather(params, index.lookup(batch))

    @tf.function(jit_compile=False)
    def tf_push(batch, grads):
        unique, idx = tf.unique(batch)
        summed = tf.math.unsorted_segment_sum(grads, idx, tf.size(unique))
        rows = index.lookup(unique)
        tf.raw_ops.ResourceSparseApplyAdagradV2(
            var=params.handle,
            accum=accum.handle,
            lr=tf.constant(LR),
            epsilon=tf.constant(EPS),
            grad=summed,
            indices=rows,
        )

    print(
        f"\n-- {len(keys):,} keys, dim {dim}: record {stats['record_bytes']} B raw; held "
        f"{stats['bytes_per_row']:.1f} B/row ({stats['bytes_per_row'] / stats['record_bytes']:.3f}x raw); "
        f"index {stats['index_bytes_per_row']:.1f} B/row = {100 * stats['index_overhead']:.1f}% of raw"
    )
    print(
        f"{'batch':>7} {'uniq':>6} | {'pull xdl_ec':>12} {'pull TF':>12} {'ratio':>6} | "
        f"{'push xdl_ec':>12} {'push TF':>12} {'ratio':>6}   (rows/s)"
    )
    for size in batches:
        batch = zipf_batch(rng, keys, size)
        grads = rng.normal(0.0, 0.01, size=(size, dim)).astype(np.float32)
        tb, tg = tf.constant(batch), tf.constant(grads)
        ours_pull = best_seconds(lambda batch=batch: table.pull(batch), repeats)
        tf_pull_s = best_seconds(lambda tb=tb: tf_pull(tb).numpy(), repeats)
        ours_push = best_seconds(lambda batch=batch, grads=grads: table.push(batch, grads), repeats)
        tf_push_s = best_seconds(lambda tb=tb, tg=tg: tf_push(tb, tg), repeats)
        unique = len(np.unique(batch))
        print(
            f"{size:>7} {unique:>6} | {size / ours_pull:>12,.0f} {size / tf_pull_s:>12,.0f} "
            f"{tf_pull_s / ours_pull:>5.1f}x | {size / ours_push:>12,.0f} {size / tf_push_s:>12,.0f} "
            f"{tf_push_s / ours_push:>5.1f}x"
        )
    table.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="keys per table (default 1M)")
    parser.add_argument("--big", action="store_true", help="also run tables of 10M keys")
    parser.add_argument("--dims", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--batches", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    print(f"TensorFlow {tf.__version__} on 1 thread; xdl_ec {xdl_ec.__version__}; Zipf a={ZIPF_A}")
    sizes = [args.rows] + ([10_000_000] if args.big else [])
    for n_rows in sizes:
        for dim in args.dims:
            bench_dim(tf, n_rows, dim, args.batches, args.repeats, seed=dim)


if __name__ == "__main__":
    main()
