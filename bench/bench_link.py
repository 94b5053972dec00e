"""Benchmark: what a direct link adds to a worker's ``push_pull`` (xdl_ec.ps.direct), against the same call made
in-process on a ParameterServer of the same shape, in the same run. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_link.py [--keys 700] [--dim 16] [--calls 2000] [--rounds 9]

Two servers with one table of ``--dim``: one in this process, called directly (what the one-process backend does),
and one in a child process behind its LinkServer, called over a Link (what a worker does on Ray). Each call pushes
the gradients of ``--keys`` keys and pulls the rows of the next step's ``--keys`` (as a worker's step does with
prefetching). The rounds interleave the two sides (the order alternates) and a third, A/A side: a second in-process
server, whose ratio to the first is the method's noise floor. Printed per call, median over rounds with the
min-max: the CPU of this process (the caller's side, the in-process servers' whole call), the CPU of the linked
server's process, the wall time; then the linked call's CPU (both processes) over the in-process call's.

CPU per process comes from /proc (schedstat, every thread), so it counts the kernel's loopback and the wake-ups a
link costs. One process per side and no TF: the figures isolate the link from a training step's other work.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing as mp
import os
import statistics
import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

from xdl_ec.benchmark.machine_cpu import process_cpu_seconds
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.backend import Handle
from xdl_ec.ps.direct import Link
from xdl_ec.ps.server import ParameterServer
from xdl_ec.sparse.table_config import Table


class _AddressHandle(Handle):
    """A role's handle whose only backend call, ``open_links``, answers a known address (no Ray here)."""

    role = "server"

    def __init__(self, address: Tuple[str, int]) -> None:
        self.index, self._address = 0, address

    def call(self, method: str, *args: Any) -> Any:
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(self._address)
        return future


def _serve(secret: JobSecret, dim: int, addresses: Any) -> None:
    server = ParameterServer(0, [Table("emb", dim)])
    addresses.put(server.open_links(secret))
    while True:
        time.sleep(3600)


def _median_range(values: List[float]) -> str:
    return f"{statistics.median(values):8.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keys",
        type=int,
        default=700,
        help="keys pushed and pulled per call (a batch-256 step's share of one of 5 servers)",
    )
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--calls", type=int, default=2000, help="calls per side and round")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    secret = JobSecret.generate()
    context = mp.get_context("spawn")
    addresses = context.Queue()
    child = context.Process(target=_serve, args=(secret, args.dim, addresses), daemon=True)
    child.start()
    link = Link(_AddressHandle(addresses.get(timeout=60)), secret, caller=0)
    local = {
        "in-process": ParameterServer(0, [Table("emb", args.dim)]),
        "A/A": ParameterServer(0, [Table("emb", args.dim)]),
    }

    rng = np.random.default_rng(0)
    batches = [
        np.unique(rng.integers(0, 50 * args.keys, 2 * args.keys))[: args.keys].astype(np.int64) for _ in range(64)
    ]
    grads = (rng.standard_normal((args.keys, args.dim)) * 0.01).astype(np.float32)
    steps: Dict[str, int] = {"in-process": 0, "A/A": 0, "link": 0}

    def call(side: str) -> Callable[[], Any]:
        def one() -> Any:
            steps[side] += 1
            step = steps[side]
            parts, requests = [("emb", batches[step % 64], grads, step)], [("emb", batches[(step + 1) % 64])]
            if side == "link":
                return link.call("push_pull", parts, step, 0, 1, requests).result(60)
            return local[side].push_pull(parts, step, 0, 1, requests)

        return one

    sides = ["in-process", "link", "A/A"]
    for side in sides:  # warm-up: tables filled, code paths hot
        for _ in range(200):
            call(side)()
    per_call: Dict[str, Dict[str, List[float]]] = {s: {"caller": [], "server": [], "wall": []} for s in sides}
    ratios: Dict[str, List[float]] = {"link": [], "A/A": []}
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        cpu: Dict[str, float] = {}
        for side in order:
            one = call(side)
            w0, c0, s0 = time.perf_counter(), time.process_time(), process_cpu_seconds([child.pid])
            for _ in range(args.calls):
                one()
            wall = time.perf_counter() - w0
            caller, server = time.process_time() - c0, process_cpu_seconds([child.pid]) - s0
            if side != "link":
                server = 0.0  # the child serves only the link (its idle threads' CPU is not the in-process call's)
            n = args.calls
            per_call[side]["caller"].append(1e6 * caller / n)
            per_call[side]["server"].append(1e6 * server / n)
            per_call[side]["wall"].append(1e6 * wall / n)
            cpu[side] = caller + server
        ratios["link"].append(cpu["link"] / cpu["in-process"])
        ratios["A/A"].append(cpu["A/A"] / cpu["in-process"])

    print(
        f"bench_link {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f}: push_pull of {args.keys} keys x dim {args.dim}, {args.calls} calls x "
        f"{args.rounds} rounds per side, interleaved"
    )
    print(f"  {'us per call, median (min-max)':32s} {'this process':>22s} {'linked server':>22s} {'wall':>22s}")
    for side in sides:
        row = per_call[side]
        server = _median_range(row["server"]) if side == "link" else f"{'-':>8s}"
        print(f"  {side:32s} {_median_range(row['caller']):>22s} {server:>22s} {_median_range(row['wall']):>22s}")
    for name in ("link", "A/A"):
        values = ratios[name]
        print(
            f"  CPU per call, {name} / in-process: {statistics.median(values):.2f}x "
            f"({min(values):.2f}-{max(values):.2f}x over rounds)"
        )
    child.kill()


if __name__ == "__main__":
    main()
