"""Benchmark: what this machine lets any rebuild beside training reach, measured with an ideal rebuild. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_rebuild_floor.py [--emb-dim 256] [--batch 512] [--servers 6]
        [--code 4,2] [--shard-mb 60] [--block-mb 2] [--turn-steps 60] [--rounds 3] [--duties 1,0.5,0.33]

The goal of a background rebuild is a short window at reduced redundancy (at most 2x the rebuild's time with
training paused) while training keeps >= 95% of its speed. Whatever the rebuild's code, it has to read k
fragments and write one per lost block. This bench gives it no other cost: a thread decodes one lost shard of
``--shard-mb`` from k survivor shards held in this process (``ErasureCode.reconstruct`` straight from their
memory: no copies, no locks, no Python between blocks but a loop, the GIL released around every block), under
``SCHED_IDLE`` so the scheduler gives training every cycle it asks for. Measured in one process beside the
one-process trainer of ``--ft ec`` (the ``bench_ft_ec.py --redundancy`` configuration by default):

- alone: the seconds the decode takes with training paused (the "unthrottled" time of this ideal rebuild);
- for each duty d of ``--duties``: training turns of ``--turn-steps`` steps with the decode looping beside them at
  duty d (working d of each 20-ms period), interleaved with turns without it (the order rotates each round):
  samples/s against the turns without it, and the seconds a whole shard's decode would take at the rate it made,
  as a multiple of the alone time.

Also measured, to tell memory from CPU: the same with a thread that only computes (SHA-256 of a 256 KiB buffer that
stays in the core's cache) at duty 1. Prints the date, the command and every turn.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ft.configs import parse_code  # noqa: E402
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402
from xdl_ec.sparse.codec import ErasureCode  # noqa: E402

PERIOD = 0.02  # seconds: a duty-cycled thread works duty x this, then sleeps the rest


class IdealRebuild:
    """Decodes lost shard 0 of a k + r code from k survivor shards, block by block, as fast as it is let."""

    def __init__(self, k: int, r: int, shard_bytes: int, block_bytes: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.code = ErasureCode(k, r)
        self.block = block_bytes
        self.blocks = max(1, shard_bytes // block_bytes)
        size = self.blocks * block_bytes
        # survivors: data fragments 1..k-1 and parity fragment k (what a decode of fragment 0 reads)
        self.survivors = {i: rng.integers(0, 256, size, dtype=np.uint8) for i in [*range(1, k), k]}
        self.out = np.empty((1, size), np.uint8)
        self._next = 0

    def decode_next(self) -> None:
        """One block, the shard's blocks in turn (so it streams memory as a rebuild does)."""
        self.decode_block(self._next)
        self._next = (self._next + 1) % self.blocks

    def decode_block(self, b: int) -> None:
        lo, hi = b * self.block, (b + 1) * self.block
        self.code.reconstruct({i: s[lo:hi] for i, s in self.survivors.items()}, [0], self.out[:, lo:hi])

    def alone(self) -> float:
        start = time.perf_counter()
        for b in range(self.blocks):
            self.decode_block(b)
        return time.perf_counter() - start


class Beside:
    """A thread running ``work()`` (one unit) at ``duty`` under SCHED_IDLE until stopped; counts units done."""

    def __init__(self, work: Callable[[], None], duty: float) -> None:
        self.work, self.duty = work, duty
        self.units = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        while not self._stop.is_set():
            start = time.perf_counter()
            while time.perf_counter() - start < self.duty * PERIOD and not self._stop.is_set():
                self.work()
                self.units += 1
            if self.duty < 1.0:
                self._stop.wait(PERIOD * (1.0 - self.duty))

    def __enter__(self) -> "Beside":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--emb-dim", type=int, default=256)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--servers", type=int, default=6)
    parser.add_argument("--code", default="4,2")
    parser.add_argument("--shard-mb", type=float, default=60.0, help="the lost shard's size (MB)")
    parser.add_argument("--block-mb", type=float, default=2.0, help="bytes decoded per GIL-free call (MB)")
    parser.add_argument("--turn-steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duties", default="1,0.5,0.33")
    args = parser.parse_args()
    k, r = parse_code(args.code)
    duties = [float(d) for d in args.duties.split(",")]
    print(f"bench_rebuild_floor {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores: {' '.join(sys.argv[1:])}")

    ideal = IdealRebuild(k, r, int(args.shard_mb * 1e6), int(args.block_mb * 1e6))
    steps = args.turn_steps * (args.rounds * (len(duties) + 2) * 2 + 4)
    config = TrainConfig(
        synthetic=True,
        synthetic_rows=args.batch * (steps + 8),
        batch_size=args.batch,
        steps=steps,
        deterministic=True,
        progress=False,
        seed=1,
        emb_dim=args.emb_dim,
    )
    trainer = PSTrainer(
        criteo_job(config).spec,
        ClusterConfig(servers=args.servers, workers=1),
        RunSettings(1, True),
        ErasureCoded(k, r),
    )
    try:
        trainer.fit(steps=2 * args.turn_steps)  # traced, warm
        alone = statistics.median(ideal.alone() for _ in range(5))
        hash_data = bytes(256 << 10)
        start = time.perf_counter()
        for _ in range(200):
            hashlib.sha256(hash_data).digest()
        hash_alone = (time.perf_counter() - start) / 200
        print(
            f"ideal rebuild alone (training paused): {alone * 1000:.0f} ms for {ideal.blocks} blocks of "
            f"{args.block_mb} MB, k={k}: {ideal.blocks * ideal.block * k / alone / 1e9:.2f} GB/s read"
        )

        def turn(beside: Optional[Beside] = None) -> Tuple[float, float]:
            """(samples/s, seconds) of a turn of training, with ``beside`` running meanwhile."""
            start = time.perf_counter()
            if beside is None:
                trainer.fit(steps=args.turn_steps)
            else:
                with beside:
                    trainer.fit(steps=args.turn_steps)
            seconds = time.perf_counter() - start
            return args.turn_steps * args.batch / seconds, seconds

        kinds = ["none", *[f"decode@{d:g}" for d in duties], "compute@1"]
        speed: Dict[str, List[float]] = {kind: [] for kind in kinds}
        window: Dict[str, List[float]] = {kind: [] for kind in kinds}
        for rnd in range(args.rounds):
            order = kinds[rnd % len(kinds) :] + kinds[: rnd % len(kinds)]
            for kind in order + ["none"]:  # a "none" turn beside every other turn's round
                if kind == "none":
                    rate, _ = turn()
                    speed[kind].append(rate)
                    print(f"  round {rnd + 1} {kind:>12}: {rate:,.0f} samples/s")
                    continue
                duty = float(kind.split("@")[1])
                work = ideal.decode_next if kind.startswith("decode") else (lambda: hashlib.sha256(hash_data).digest())
                beside = Beside(work, duty)
                rate, seconds = turn(beside)
                speed[kind].append(rate)
                unit_alone = alone / ideal.blocks if kind.startswith("decode") else hash_alone
                # seconds a whole shard's decode would take at the rate the thread made, over the alone time
                factor = (seconds / max(beside.units, 1)) / unit_alone
                window[kind].append(factor)
                print(
                    f"  round {rnd + 1} {kind:>12}: {rate:,.0f} samples/s, {beside.units} units done: "
                    f"{factor:.2f}x the time alone"
                )
        base = statistics.median(speed["none"])
        print(
            f"\nmedians over {args.rounds} rounds (training beside the thread / training alone; the thread's "
            f"work time / alone):"
        )
        for kind in kinds[1:]:
            print(
                f"  {kind:>12}: training at {100 * statistics.median(speed[kind]) / base:.0f}% "
                f"({', '.join(f'{100 * s / base:.0f}%' for s in speed[kind])}), its work "
                f"{statistics.median(window[kind]):.2f}x the time alone"
            )
        print("goal of a background rebuild: <= 2x the time alone with training >= 95%")
    finally:
        trainer.close()


if __name__ == "__main__":
    main()
