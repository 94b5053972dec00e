"""Training-side cost of parity and rebuild speed, measured in one run (not a test).

Push throughput of n shards with parity maintenance (xdl_ec ParityGroup) against the same n plain
shards without it, fed identical batches: the ratio is the cost of parity (goal: < 10% slower at
k=4, r=1). Then rebuild throughput: GB of lost shard bytes (data blocks) rebuilt per second.

    PYTHONPATH=build-<name>/stage python3 bench/bench_parity.py [--rows 400000 --dim 16 --batch 4096]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from xdl_ec import _core, optim
from xdl_ec.parity import server_of


def shard_config(dim: int, optimizer: str, block_slots: int) -> "_core.ShardConfig":
    config = _core.ShardConfig()
    config.dim = dim
    config.block_slots = block_slots
    config.optimizer = optim.get(optimizer).to_config()
    return config


def make_batches(n: int, rows: int, batch: int, steps: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        keys = rng.integers(0, rows, size=batch, dtype=np.int64)
        owner = server_of(keys, n)
        grads = rng.standard_normal((batch, dim)).astype(np.float32)
        out.append([(s, np.ascontiguousarray(keys[owner == s]), np.ascontiguousarray(grads[owner == s]))
                    for s in range(n)])
    return out


def run_push(push, batches) -> float:
    start = time.perf_counter()
    for step, per_server in enumerate(batches, start=1):
        for s, keys, grads in per_server:
            push(s, keys, grads, step)
    return time.perf_counter() - start


def bench_push(n: int, k: int, r: int, args) -> None:
    config = shard_config(args.dim, args.optimizer, args.block_slots)
    warm = make_batches(n, args.rows, args.batch, args.warm_steps, args.dim, seed=1)
    batches = make_batches(n, args.rows, args.batch, args.steps, args.dim, seed=2)
    best = {"off": float("inf"), "sync": float("inf"), "background": float("inf")}
    for _ in range(args.repeats):
        # Fresh tables each repeat, pre-filled by the warm-up so the measured pushes update existing rows.
        shards = [_core.EmbeddingShard(config) for _ in range(n)]
        sync = _core.ParityGroup(n, k, r, config)
        sync.background_apply = False
        group = _core.ParityGroup(n, k, r, config)
        plain = lambda s, keys, grads, step: shards[s].push(keys, grads, step)  # noqa: E731
        for push in (plain, sync.push, group.push):
            run_push(push, warm)
        group.stats()  # waits for the warm-up's parity
        # Interleave the variants so machine noise hits all alike; background time includes the drain.
        best["off"] = min(best["off"], run_push(plain, batches))
        best["sync"] = min(best["sync"], run_push(sync.push, batches))
        start = time.perf_counter()
        run_push(group.push, batches)
        group.stats()
        best["background"] = min(best["background"], time.perf_counter() - start)
    updates = args.steps * args.batch
    off = best["off"]
    print(f"push  n={n} k={k} r={r} {args.optimizer} dim={args.dim} batch={args.batch}: "
          f"parity off {updates / off / 1e6:.2f} M keys/s")
    for mode in ("sync", "background"):
        print(f"      parity on ({mode:10s}) {updates / best[mode] / 1e6:.2f} M keys/s, time ratio on/off "
              f"{best[mode] / off:.3f} ({(best[mode] / off - 1) * 100:+.1f}%)")
    stats = group.stats()
    print(f"      parity bytes / data bytes = {stats['total_parity_bytes'] / stats['total_data_bytes']:.3f} "
          f"(r/k = {r / k:.3f}); delta bytes received per server max/min = "
          f"{max(stats['delta_bytes_received']) / max(1, min(stats['delta_bytes_received'])):.3f}")


def bench_rebuild(n: int, k: int, r: int, args) -> None:
    config = shard_config(args.dim, args.optimizer, args.block_slots)
    group = _core.ParityGroup(n, k, r, config)
    keys = np.arange(args.rows, dtype=np.int64)
    owner = server_of(keys, n)
    for s in range(n):
        mine = keys[owner == s]
        group.push(s, mine, np.full((len(mine), args.dim), 0.01, np.float32), 1)
    lost = list(range(r))
    lost_bytes = sum(group.num_data_blocks(s) for s in lost) * group.block_bytes
    group.kill(lost)
    start = time.perf_counter()
    group.begin_rebuild()
    index_seconds = time.perf_counter() - start
    group.finish_rebuild()
    seconds = time.perf_counter() - start
    assert group.scrub() == []
    print(f"rebuild n={n} k={k} r={r}: {r} servers, {lost_bytes / 1e6:.1f} MB of shard data (+ their parity) in "
          f"{seconds * 1e3:.1f} ms = {lost_bytes / seconds / 1e9:.2f} GB/s of shard rebuilt "
          f"(key index phase {index_seconds * 1e3:.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000, help="distinct keys in the table")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4096, help="keys per push step (split over servers)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warm-steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--optimizer", default="adagrad")
    parser.add_argument("--block-slots", type=int, default=1024)
    args = parser.parse_args()
    for n, k, r in [(5, 4, 1), (6, 4, 2)]:
        bench_push(n, k, r, args)
    for n, k, r in [(5, 4, 1), (6, 4, 2)]:
        bench_rebuild(n, k, r, args)


if __name__ == "__main__":
    main()
