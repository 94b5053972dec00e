"""Checkpoint save/load throughput of one server's shard, beside plain numpy files of the same arrays.

    PYTHONPATH=build-<name>/stage python3 -P bench/bench_checkpoint.py [--rows 1000000] [--dim 16] [--dir /tmp]

Save = ShardCheckpoint.write (export, sha256, write, fsync, atomic rename); load = ShardCheckpoint.restore
(read, sha256 and header checks, load into a fresh shard). The baselines write / read the same three arrays with
np.save + fsync / np.load and export / load the shard, with no checksums and no atomic rename, in the same run.
Also: MFU access counting (AccessCounter.add) per Criteo-shaped batch, beside the push of that batch and np.unique
of it.
MB/s are of record bytes (keys + values + optimizer state).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import xdl_ec
from xdl_ec.ft import AccessCounter, ShardCheckpoint


def make_table(rows: int, dim: int) -> xdl_ec.EmbeddingTable:
    t = xdl_ec.EmbeddingTable("bench", dim, "adagrad", block_slots=4096)
    rng = np.random.default_rng(0)
    keys = rng.permutation(rows * 4)[:rows].astype(np.int64)
    values = rng.normal(size=(rows, dim)).astype(np.float32)
    t.load(keys, values, np.abs(values) + 0.1)
    return t


def plain_save(directory: Path, t: xdl_ec.EmbeddingTable) -> None:
    directory.mkdir()
    for name, array in t.export().items():
        with open(directory / f"{name}.npy", "wb") as f:
            np.save(f, array)
            f.flush()
            os.fsync(f.fileno())


def plain_load(directory: Path, t: xdl_ec.EmbeddingTable) -> None:
    fresh = xdl_ec.EmbeddingTable("bench", t.dim, "adagrad", block_slots=4096)
    fresh.load(*(np.load(directory / f"{n}.npy") for n in ("keys", "values", "state")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    t = make_table(args.rows, args.dim)
    mb = len(t) * (8 + 4 * args.dim + 4 * t.state_floats) / 1e6
    root = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.dir))
    results = {}
    try:
        for label, save, load in (
            (
                "checkpoint",
                lambda d: ShardCheckpoint.write(d, {"t": t}),
                lambda d: ShardCheckpoint.open(d).restore({"t": t}),
            ),
            ("plain npy", lambda d: plain_save(d, t), lambda d: plain_load(d, t)),
        ):
            best_save = best_load = float("inf")
            for i in range(args.repeats):
                d = root / f"{label.replace(' ', '-')}-{i}"
                start = time.perf_counter()
                save(d)
                best_save = min(best_save, time.perf_counter() - start)
                start = time.perf_counter()
                load(d)
                best_load = min(best_load, time.perf_counter() - start)
                shutil.rmtree(d)
            results[label] = (best_save, best_load)
            print(
                f"{label:>11}: save {best_save:6.3f} s = {mb / best_save:7.1f} MB/s   "
                f"load {best_load:6.3f} s = {mb / best_load:7.1f} MB/s   ({len(t)} rows, {mb:.1f} MB)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    (cs, cl), (ps, pl) = results["checkpoint"], results["plain npy"]
    print(f"checkpoint / plain: save {ps / cs:.2f}x the throughput, load {pl / cl:.2f}x")

    rng = np.random.default_rng(1)
    batches = [np.minimum(rng.zipf(1.2, size=128 * 26), args.rows).astype(np.int64) for _ in range(300)]
    counter = AccessCounter()
    start = time.perf_counter()
    for b in batches:
        counter.add(b)
    counter.items()
    count_s = (time.perf_counter() - start) / len(batches)
    start = time.perf_counter()
    for b in batches:
        np.unique(b)
    unique_s = (time.perf_counter() - start) / len(batches)
    grads = np.ones((batches[0].size, args.dim), np.float32)
    start = time.perf_counter()
    for b in batches:
        t.push(b, grads)
    push_s = (time.perf_counter() - start) / len(batches)
    print(
        f"MFU counting: {count_s * 1e6:.0f} us per batch of {batches[0].size} keys ({len(counter)} distinct "
        f"rows): {count_s / push_s:.2f}x the push of that batch, {count_s / unique_s:.2f}x np.unique of it"
    )


if __name__ == "__main__":
    main()
