"""Benchmark: the CPU one batch of parity costs on its way from a server's forwarder to its holders over the parity
links, both ends in one process over loopback (xdl_ec.ft.parity_link: RemoteHolderLink -> ParityReceiver ->
ParityHolder), for two builds of xdl-ec run in interleaved turns, and an A/A pair (one build against itself) for
the method's noise floor. Not a test.

    python3 bench/bench_parity_leg.py --a PYTHONPATH_A --b PYTHONPATH_B [--turns 8] [--batches 300] [--keys 256]

Each turn is a fresh process of one build (a, b, then b, a in the next turn, and so on; --aa runs a against a):
a sender server (a k=2, r=1 code over 3 servers, so two holders, each behind its own receiver) pushes ``--keys``
keys a batch into its shard, which records the deltas into its forwarder; its links are flushed and the turn
waits until both holders acked. The leg's CPU is the process's CPU minus the pushing thread's (the push and the
wait are the same in both builds): the forwarder's routing, both links' sends, both receivers' applies and
answers. Prints per build the median microseconds of CPU per batch over turns, and the ratio b / a with a 95%
bootstrap interval over turn pairs (seeded).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

N, K, R = 3, 2, 1


def _child(batches: int, keys: int, warmup: int) -> Dict[str, float]:
    """One turn: the leg's CPU per batch in this process's build."""
    import concurrent.futures

    import numpy as np

    from xdl_ec import _core
    from xdl_ec.ft import parity_link
    from xdl_ec.net.job_secret import JobSecret
    from xdl_ec.ps.handle import Handle
    from xdl_ec.sparse import init, optim

    class _AddressHandle(Handle):
        role = "server"

        def __init__(self, index: int, address: Tuple[str, int]) -> None:
            self.index, self.address = index, address

        def call(self, method: str, *args: Any) -> concurrent.futures.Future:
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_result(self.address)  # parity_address: a Ray call in a cluster
            return future

    parity_link.SEND_INTERVAL = 0.0  # each batch is sent at once when flushed (the turn waits for its ack)
    secret = JobSecret.generate()
    config = _core.ShardConfig()
    config.dim, config.seed, config.block_slots = 16, 5, 64
    config.optimizer = optim.Adagrad(0.1).to_config()
    config.initializer = init.RandomUniform(-0.1, 0.1).to_config()
    shard = _core.EmbeddingShard(config)
    bs, rb = int(shard.block_slots), int(shard.record_bytes)
    forwarder = _core.DeltaForwarder(0, N, K, R, {"t": (bs, rb)})
    holders = {h: _core.ParityHolder(h, N, K, R, {"t": bs * rb}) for h in forwarder.holders}
    receivers = {h: parity_link.ParityReceiver(holder, secret, host="127.0.0.1") for h, holder in holders.items()}
    links = [
        parity_link.RemoteHolderLink(
            forwarder, h, _AddressHandle(h, receivers[h].address), forwarder.set_holder(h, None), secret
        )
        for h in holders
    ]
    rng = np.random.default_rng(1)
    key_space = 50 * keys

    def one(seq: int) -> None:
        batch = rng.choice(key_space, keys, replace=False).astype(np.int64)
        grads = rng.standard_normal((keys, config.dim)).astype(np.float32)
        shard.push(batch, grads, seq, forwarder=forwarder, table="t", pushes={0: seq})
        forwarder.flush()
        for link in links:
            link.flush()
        deadline = time.monotonic() + 30.0
        while forwarder.progress()["pending"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"parity did not catch up: {forwarder.progress()} {forwarder.errors}")
            time.sleep(0.0002)

    try:
        for seq in range(1, warmup + 1):
            one(seq)
        sends = sum(link.sends for link in links)
        cpu, own, wall = time.process_time(), time.thread_time(), time.perf_counter()
        for seq in range(warmup + 1, warmup + batches + 1):
            one(seq)
        cpu, own, wall = time.process_time() - cpu, time.thread_time() - own, time.perf_counter() - wall
        sends = sum(link.sends for link in links) - sends
        if forwarder.errors or forwarder.progress()["down"]:
            raise RuntimeError(f"a holder failed: {forwarder.errors}")
        applied = {h: holder.applied(0) for h, holder in holders.items()}
        if set(applied.values()) != {int(forwarder.progress()["seq"])}:
            raise RuntimeError(f"holders applied {applied}, the forwarder is at {forwarder.progress()['seq']}")
    finally:
        for link in links:
            link.close()
        forwarder.close()
        for receiver in receivers.values():
            receiver.close()
    return {
        "leg_us": (cpu - own) / batches * 1e6,
        "push_us": own / batches * 1e6,
        "wall_us": wall / batches * 1e6,
        "sends_per_batch": sends / batches,
    }


def _turn(path: str, args: argparse.Namespace) -> Dict[str, float]:
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run(
        [
            sys.executable,
            "-P",
            __file__,
            "--child",
            "--batches",
            str(args.batches),
            "--keys",
            str(args.keys),
            "--warmup",
            str(args.warmup),
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _interval(pairs: List[Tuple[float, float]], seed: int = 7, draws: int = 2000) -> Tuple[float, float]:
    """95% bootstrap interval of median(b) / median(a) over turn pairs drawn with replacement."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(draws):
        drawn = [rng.choice(pairs) for _ in pairs]
        ratios.append(statistics.median(b for _, b in drawn) / statistics.median(a for a, _ in drawn))
    ratios.sort()
    return ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", help="PYTHONPATH of build a (e.g. the code before a change)")
    parser.add_argument("--b", help="PYTHONPATH of build b")
    parser.add_argument("--aa", action="store_true", help="A/A: build a against itself (the noise floor)")
    parser.add_argument("--turns", type=int, default=8, help="turn pairs (a then b, b then a, alternately)")
    parser.add_argument("--batches", type=int, default=300, help="timed batches per turn")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--keys", type=int, default=256, help="keys pushed per batch")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.batches, args.keys, args.warmup)), flush=True)
        os._exit(0)  # the links' and receivers' daemon threads may be inside native calls: no finalization
    if not args.a or not (args.b or args.aa):
        parser.error("give --a and --b (or --aa)")
    b_path = args.a if args.aa else args.b
    pairs: List[Tuple[Dict[str, float], Dict[str, float]]] = []
    for turn in range(args.turns):
        order = [("a", args.a), ("b", b_path)] if turn % 2 == 0 else [("b", b_path), ("a", args.a)]
        got = {name: _turn(path, args) for name, path in order}
        pairs.append((got["a"], got["b"]))
        print(
            f"turn {turn}: "
            + "  ".join(
                f"{name} leg {got[name]['leg_us']:.0f} us, push {got[name]['push_us']:.0f} "
                f"us, wall {got[name]['wall_us']:.0f} us"
                for name in ("a", "b")
            ),
            flush=True,
        )
    for name, at in (("a", 0), ("b", 1)):
        print(
            f"{name}{' (= a)' if args.aa and name == 'b' else ''}: leg CPU per batch median "
            f"{statistics.median(p[at]['leg_us'] for p in pairs):.1f} us (pushing thread "
            f"{statistics.median(p[at]['push_us'] for p in pairs):.1f} us, wall "
            f"{statistics.median(p[at]['wall_us'] for p in pairs):.0f} us, sends per batch "
            f"{statistics.median(p[at]['sends_per_batch'] for p in pairs):.2f})"
        )
    legs = [(a["leg_us"], b["leg_us"]) for a, b in pairs]
    ratio = statistics.median(b for _, b in legs) / statistics.median(a for a, _ in legs)
    low, high = _interval(legs)
    print(f"b / a leg CPU per batch: {ratio:.3f} (95% bootstrap interval over turn pairs {low:.3f} .. {high:.3f})")


if __name__ == "__main__":
    main()
