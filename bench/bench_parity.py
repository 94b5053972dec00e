"""Training-side cost of parity on the live path, measured in one run (not a test).

Push throughput of n shards whose pushes record into their server's DeltaForwarder (``shard.push(...,
forwarder=...)``: the shard's DeltaSink), delivered by the forwarders to in-process ParityHolders, against the same
n plain shards without parity, fed identical batches to tables already holding every row (steady state: updates, no
inserts). The forwarded side's time includes its drain (flush, then wait until every holder applied everything),
so no background work is carried over. Rounds interleave off / on / off; each round's ratio is taken against the
mean of the two parity-off runs around it, and the median over rounds is printed. Then the C++ Scrubber over the
result (every stripe re-encoded and compared with the holders' parity), which must find nothing.

``--against STAGE``: the same benchmark in alternating subprocesses on this build and on another staged build
(PYTHONPATH=STAGE, e.g. one of an earlier commit): the ratio of their forwarded-push times per pair of runs,
for a before/after of a change to the path.

    PYTHONPATH=build-<name>/stage python3 -P bench/bench_parity.py [--rows 400000 --dim 16 --batch 4096]
                                                                 [--against OTHER/stage --runs 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.sparse import optim

Batches = List[List[Tuple[int, np.ndarray, np.ndarray]]]


def shard_config(dim: int, optimizer: str, block_slots: int) -> "_core.ShardConfig":
    config = _core.ShardConfig()
    config.dim = dim
    config.block_slots = block_slots
    config.optimizer = optim.get(optimizer).to_config()
    return config


def make_batches(n: int, rows: int, batch: int, steps: int, dim: int, seed: int) -> Batches:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        keys = rng.integers(0, rows, size=batch, dtype=np.int64)
        owner = _core.server_of(keys, n)
        grads = rng.standard_normal((batch, dim)).astype(np.float32)
        out.append(
            [(s, np.ascontiguousarray(keys[owner == s]), np.ascontiguousarray(grads[owner == s])) for s in range(n)]
        )
    return out


def fill_batches(n: int, rows: int, dim: int) -> Batches:
    """One step pushing every key once: the tables hold all rows, so measured pushes only update."""
    keys = np.arange(rows, dtype=np.int64)
    owner = _core.server_of(keys, n)
    return [
        [
            (s, np.ascontiguousarray(keys[owner == s]), np.full((int((owner == s).sum()), dim), 0.01, np.float32))
            for s in range(n)
        ]
    ]


def run_push(push: Callable[[int, np.ndarray, np.ndarray, int], None], batches: Batches, first_step: int) -> float:
    start = time.perf_counter()
    for step, per_server in enumerate(batches, start=first_step):
        for s, keys, grads in per_server:
            push(s, keys, grads, step)
    return time.perf_counter() - start


class Forwarded:
    """n shards, each recording into its server's DeltaForwarder, every holder a ParityHolder in this process."""

    def __init__(self, n: int, k: int, r: int, config: "_core.ShardConfig") -> None:
        self.n, self.k, self.r = n, k, r
        self.shards = [_core.EmbeddingShard(config) for _ in range(n)]
        self.bs, self.rb = int(self.shards[0].block_slots), int(self.shards[0].record_bytes)
        self.holders = [_core.ParityHolder(i, n, k, r, {"t": self.bs * self.rb}) for i in range(n)]
        self.forwarders = [_core.DeltaForwarder(i, n, k, r, {"t": (self.bs, self.rb)}) for i in range(n)]
        for f in self.forwarders:
            for h in f.holders:
                f.set_holder(h, self.holders[h])

    def push(self, s: int, keys: np.ndarray, grads: np.ndarray, step: int) -> None:
        self.shards[s].push(keys, grads, step, forwarder=self.forwarders[s], table="t", pushes={0: step})

    def drain(self) -> None:
        for f in self.forwarders:
            f.flush()
        while any(f.progress()["pending"] for f in self.forwarders):
            time.sleep(0.0002)

    def scrub(self) -> List[Any]:
        def data(server: int, block: int, offset: int, width: int) -> np.ndarray:
            whole = self.shards[server].read_block(block).reshape(self.bs, self.rb)
            return np.ascontiguousarray(whole[:, offset : offset + width]).reshape(-1)

        def parity(server: int, block: int, offset: int, width: int) -> np.ndarray:
            return self.holders[server].read_block("t", block, self.rb, offset, width)[0]

        stripes = max(-(-int(s.num_blocks) // self.k) * self.n for s in self.shards)
        return _core.Scrubber(self.n, self.k, self.r, self.bs, self.rb).scrub(stripes, data, parity)

    def close(self) -> None:
        for f in self.forwarders:
            f.close()


def bench_push(n: int, k: int, r: int, args: argparse.Namespace) -> Dict[str, Any]:
    config = shard_config(args.dim, args.optimizer, args.block_slots)
    warm = fill_batches(n, args.rows, args.dim) + make_batches(n, args.rows, args.batch, args.warm_steps, args.dim, 1)
    # Tables built once (filling them dominates otherwise); every round pushes fresh batches.
    plain = [_core.EmbeddingShard(config) for _ in range(n)]
    on = Forwarded(n, k, r, config)
    push_off = lambda s, keys, grads, step: plain[s].push(keys, grads, step)  # noqa: E731
    run_push(push_off, warm, 1)
    run_push(on.push, warm, 1)
    on.drain()
    offs: List[float] = []
    ons: List[float] = []
    ratios: List[float] = []
    first_step = len(warm) + 1
    for repeat in range(args.repeats):
        batches = make_batches(n, args.rows, args.batch, args.steps, args.dim, seed=100 + repeat)
        step0 = first_step + repeat * args.steps
        off_a = run_push(push_off, batches, step0)
        start = time.perf_counter()
        run_push(on.push, batches, step0)
        on.drain()
        on_time = time.perf_counter() - start
        off_b = run_push(push_off, batches, step0)
        off = (off_a + off_b) / 2
        offs.append(off)
        ons.append(on_time)
        ratios.append(on_time / off)
    start = time.perf_counter()
    mismatches = on.scrub() if hasattr(_core, "Scrubber") else []  # an --against build may predate the Scrubber
    scrub_seconds = time.perf_counter() - start
    data_bytes = sum(int(s.num_blocks) for s in on.shards) * on.bs * on.rb
    coalesced = sum(int(f.progress()["coalesced"]) for f in on.forwarders)
    on.close()
    if mismatches:
        raise SystemExit(
            f"bench_parity: the scrub found {len(mismatches)} parity blocks that disagree: {mismatches[:4]}"
        )
    updates = args.steps * args.batch
    return {
        "n": n,
        "k": k,
        "r": r,
        "off_keys_per_s": updates / statistics.median(offs),
        "on_keys_per_s": updates / statistics.median(ons),
        "on_seconds": statistics.median(ons),
        "ratio": statistics.median(ratios),
        "best_ratio": min(ratios),
        "coalesced": coalesced,
        "scrub_gb_per_s": data_bytes / scrub_seconds / 1e9,
    }


def report(result: Dict[str, Any], args: argparse.Namespace) -> None:
    ratio = result["ratio"]
    print(
        f"push  n={result['n']} k={result['k']} r={result['r']} {args.optimizer} dim={args.dim} batch={args.batch} "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores): parity off "
        f"{result['off_keys_per_s'] / 1e6:.2f} M keys/s, forwarded {result['on_keys_per_s'] / 1e6:.2f} M keys/s; "
        f"time ratio on/off median {ratio:.3f} ({(ratio - 1) * 100:+.1f}%), best {result['best_ratio']:.3f} over "
        f"{args.repeats} rounds; {result['coalesced']} mutations coalesced; scrub clean at "
        f"{result['scrub_gb_per_s']:.2f} GB/s of data"
    )


def compare(args: argparse.Namespace) -> None:
    """Alternating subprocesses on this build (PYTHONPATH as given) and on ``--against``: A B B A A B ..."""
    here = os.environ.get("PYTHONPATH", "")
    sides = {"this": here, "against": args.against}
    child = [
        sys.executable,
        "-P",
        os.path.abspath(__file__),
        "--json",
        "--rows",
        str(args.rows),
        "--dim",
        str(args.dim),
        "--batch",
        str(args.batch),
        "--steps",
        str(args.steps),
        "--warm-steps",
        str(args.warm_steps),
        "--repeats",
        str(args.repeats),
        "--optimizer",
        args.optimizer,
        "--block-slots",
        str(args.block_slots),
    ]
    runs: Dict[str, List[List[Dict[str, Any]]]] = {"this": [], "against": []}
    for run in range(args.runs):
        order = ["this", "against"] if run % 2 == 0 else ["against", "this"]
        for side in order:
            out = subprocess.run(
                child, env={**os.environ, "PYTHONPATH": sides[side]}, check=True, capture_output=True, text=True
            ).stdout
            runs[side].append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    print(f"before/after, {args.runs} interleaved runs each: this = {here}, against = {args.against}")
    for g in range(len(runs["this"][0])):
        this = [r[g] for r in runs["this"]]
        against = [r[g] for r in runs["against"]]
        pair = [a["on_seconds"] / b["on_seconds"] for a, b in zip(this, against)]
        geometry = f"n={this[0]['n']} k={this[0]['k']} r={this[0]['r']}"
        print(
            f"  {geometry}: forwarded push M keys/s this {[round(x['on_keys_per_s'] / 1e6, 2) for x in this]} "
            f"against {[round(x['on_keys_per_s'] / 1e6, 2) for x in against]}; time this/against per run "
            f"{[round(p, 3) for p in pair]}, median {statistics.median(pair):.3f}; on/off ratio median this "
            f"{statistics.median(x['ratio'] for x in this):.3f} against "
            f"{statistics.median(x['ratio'] for x in against):.3f}"
        )


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
    parser.add_argument("--against", help="another staged build (PYTHONPATH) to compare with, run by run")
    parser.add_argument("--runs", type=int, default=6, help="with --against: runs of each side")
    parser.add_argument("--json", action="store_true", help="print each geometry's figures as a JSON line")
    args = parser.parse_args()
    if args.against:
        compare(args)
        return
    for n, k, r in [(5, 4, 1), (6, 4, 2)]:
        result = bench_push(n, k, r, args)
        print(json.dumps(result)) if args.json else report(result, args)


if __name__ == "__main__":
    main()
