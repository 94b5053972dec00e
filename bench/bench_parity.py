"""Training-side cost of parity and rebuild speed, measured in one run (not a test).

Push throughput of n shards with parity maintenance (xdl_ec ParityGroup) against the same n plain
shards without it, fed identical batches to tables already holding every row (steady state: updates,
no inserts): the median over repeats of the on/off time ratio is the cost of parity (goal: < 10%
slower at k=4, r=1). "sync" applies parity inside the push; "background" hands the deltas to the
applier thread, which only pays off while the other core is idle (the load average is printed). Then rebuild throughput: GB of lost shard bytes (data blocks) rebuilt per second.

    PYTHONPATH=build-<name>/stage python3 bench/bench_parity.py [--rows 400000 --dim 16 --batch 4096]
"""

from __future__ import annotations

import argparse
import os
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


def run_push(push, batches, first_step: int = 1) -> float:
    start = time.perf_counter()
    for step, per_server in enumerate(batches, start=first_step):
        for s, keys, grads in per_server:
            push(s, keys, grads, step)
    return time.perf_counter() - start


def fill_batches(n: int, rows: int, dim: int):
    """One step pushing every key once: the tables hold all rows, so measured pushes only update."""
    keys = np.arange(rows, dtype=np.int64)
    owner = server_of(keys, n)
    return [[(s, np.ascontiguousarray(keys[owner == s]), np.full((int((owner == s).sum()), dim), 0.01, np.float32))
             for s in range(n)]]


def bench_push(n: int, k: int, r: int, args) -> None:
    config = shard_config(args.dim, args.optimizer, args.block_slots)
    warm = fill_batches(n, args.rows, args.dim) + make_batches(n, args.rows, args.batch, args.warm_steps, args.dim, 1)
    # Tables built once (filling them dominates otherwise); every repeat pushes fresh batches.
    shards = [_core.EmbeddingShard(config) for _ in range(n)]
    sync = _core.ParityGroup(n, k, r, config)
    sync.background_apply = False
    group = _core.ParityGroup(n, k, r, config)
    group.background_apply = True
    plain = lambda s, keys, grads, step: shards[s].push(keys, grads, step)  # noqa: E731
    for push in (plain, sync.push, group.push):
        run_push(push, warm)
    group.stats()  # waits for the warm-up's parity
    times: dict[str, list[float]] = {"off": [], "sync": [], "background": []}
    ratios: dict[str, list[float]] = {"sync": [], "background": []}
    first_step = len(warm) + 1
    for repeat in range(args.repeats):
        batches = make_batches(n, args.rows, args.batch, args.steps, args.dim, seed=100 + repeat)
        # Interleaved off / sync / background / off: machine noise (other jobs on the 2 cores) hits all
        # alike, and each repeat's ratio is taken against the mean of the two parity-off runs around it.
        # Background time includes the drain (stats() waits for every queued delta).
        offsets = first_step + repeat * args.steps
        off_a = run_push(plain, batches, offsets)
        on_sync = run_push(sync.push, batches, offsets)
        start = time.perf_counter()
        run_push(group.push, batches, offsets)
        group.stats()
        on_bg = time.perf_counter() - start
        off_b = run_push(plain, batches, offsets)
        off = (off_a + off_b) / 2
        times["off"].append(off)
        times["sync"].append(on_sync)
        times["background"].append(on_bg)
        ratios["sync"].append(on_sync / off)
        ratios["background"].append(on_bg / off)
    updates = args.steps * args.batch
    off = float(np.median(times["off"]))
    print(f"push  n={n} k={k} r={r} {args.optimizer} dim={args.dim} batch={args.batch} (load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores): parity off {updates / off / 1e6:.2f} M keys/s")
    for mode in ("sync", "background"):
        ratio = float(np.median(ratios[mode]))
        print(f"      parity on ({mode:10s}) {updates / float(np.median(times[mode])) / 1e6:.2f} M keys/s, time ratio "
              f"on/off median {ratio:.3f} ({(ratio - 1) * 100:+.1f}%), best {min(ratios[mode]):.3f} "
              f"over {args.repeats} repeats")
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
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warm-steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--optimizer", default="adagrad")
    parser.add_argument("--block-slots", type=int, default=1024)
    args = parser.parse_args()
    for n, k, r in [(5, 4, 1), (6, 4, 2)]:
        bench_push(n, k, r, args)
    for n, k, r in [(5, 4, 1), (6, 4, 2)]:
        bench_rebuild(n, k, r, args)


if __name__ == "__main__":
    main()
