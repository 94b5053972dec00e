"""Benchmark: table groups on parameter servers and on Ray against one process, side by side (issue #49). Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_table_groups_ray.py --workload fields-100k [--batch 2048 256]
        [--ways one-process,aa,ray,ray-ungrouped,servers,servers-ungrouped] [--servers 2] [--rounds 5] [--chunk 10]

The job is bench/peers' (``peer_xdl_ec.make_job``: one table and one feature per field, DLRM, the peers'
hyperparameters) on the peers' shared batches of ``--workload`` (written once under ~/.cache/xdl-ec-peers/data by
bench/peers/run.py, or here if missing). Per batch size, the ways live side by side in this process and train in
turns of ``--chunk`` steps, ``--rounds`` turns each after a first turn that traces TF, the order rotating every
round:

- ``one-process``: ``LocalRun`` with table groups (the reference of every ratio);
- ``aa``: a second one-process grouped run (the A/A: its ratio to the reference is the method's noise floor);
- ``ray`` / ``ray-ungrouped``: ``--servers`` servers and one worker on Ray, grouped / ``table_groups=False``;
- ``servers`` / ``servers-ungrouped``: the same on the one-process backend (servers as threads).

Printed per way: median ms per step, samples/s, the median over rounds of the per-round ratio of samples/s to the
reference (and its range), and CPU per sample: the way's own processes (one process: this one; Ray: this driver,
its actors, and the raylet and GCS of the Ray started here) over its turns. Then, per cluster way, where its step's
time went (ms per step over the timed turns): the worker's phases inside ``train_step`` (bench_ray_step.py's) and
the driver's call minus the worker's time in it (transport, queueing, process switching) and its dense work.
Figures go to docs/results/table-groups-ray-2026-12-07.md with the load (``uptime``) they were measured under.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
BENCH = os.path.dirname(os.path.abspath(__file__))
PEERS = os.path.join(BENCH, "peers")
sys.path[:0] = [BENCH, PEERS]  # run with python -P: bench_ray_step and the peers' job beside it
# Ray's actors import the peers' job module (its input and model functions travel by reference)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), PEERS) if p)

from bench_ray_step import LOOP_PARTS, WORKER_PHASES, _ray_pids  # noqa: E402
from peer_xdl_ec import make_job  # noqa: E402
from shared_batches import SharedBatches  # noqa: E402

from xdl_ec.benchmark.machine_cpu import process_cpu_seconds  # noqa: E402
from xdl_ec.job.local_run import LocalRun  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402
from xdl_ec.ps.backend import connect_ray  # noqa: E402
from xdl_ec.tf.determinism import configure_determinism  # noqa: E402

WAYS = ("one-process", "aa", "ray", "ray-ungrouped", "servers", "servers-ungrouped")
DATA = os.path.expanduser("~/.cache/xdl-ec-peers/data")


def _data(workload: str, rows: int) -> SharedBatches:
    """The peers' shared batches of ``workload`` with at least ``rows`` train rows (written if missing)."""
    have = [f for f in os.listdir(DATA) if f.startswith(f"{workload}-")] if os.path.isdir(DATA) else []
    sizes = sorted((int(f[len(workload) + 1 :].split("rows")[0]), f) for f in have if "rows-seed0" in f)
    big = [f for size, f in sizes if size >= rows]
    if big:
        return SharedBatches(os.path.join(DATA, big[0]))
    path = os.path.join(DATA, f"{workload}-{rows}rows-seed0.npz")
    os.makedirs(DATA, exist_ok=True)
    writer = [sys.executable, "-P", os.path.join(PEERS, "shared_batches.py"), path, "--workload", workload]
    subprocess.run([*writer, "--train-rows", str(rows)], check=True, stdout=subprocess.DEVNULL)
    return SharedBatches(path)


class Way:
    """One run of the comparison and its turns' wall and CPU seconds."""

    def __init__(self, name: str, data: SharedBatches, batch: int, steps: int, servers: int) -> None:
        self.name = name
        job = make_job(data, batch, steps, grouped=not name.endswith("ungrouped")).spec
        settings = RunSettings(seed=0, deterministic=False)
        self.run: Any
        self.others: List[int] = []  # the way's processes besides this one
        if name in ("one-process", "aa"):
            self.run = LocalRun(job, settings)
        else:
            backend = "ray" if name.startswith("ray") else "local"
            self.run = PSTrainer(job, ClusterConfig(servers=servers, workers=1, backend=backend), settings)
            if backend == "ray":
                self.others = [p for p in _ray_pids(self.run) if p != os.getpid()]
        self.wall: List[float] = []
        self.cpu: List[float] = []
        self.phases: Dict[str, float] = {}  # a cluster's seconds per phase over the timed turns

    def _cpu(self) -> float:
        # this process's by process_time (its threads that ended count too), the others' by their threads' schedstat
        return time.process_time() + process_cpu_seconds(self.others)

    def _clock(self) -> Dict[str, float]:
        """A cluster's worker phases and driver loop parts so far (seconds); nothing for one process."""
        if not isinstance(self.run, PSTrainer):
            return {}
        stats = self.run.result(self.run.worker(0).stats())
        out = {k: stats[f"{k}_seconds"] for k in (*WORKER_PHASES, "in_step")}
        out.update(self.run.loop.loop_seconds)
        return out

    def turn(self, steps: int, record: bool = True) -> None:
        before = self._clock()
        cpu, wall = self._cpu(), time.perf_counter()
        self.run.fit(steps)
        wall, cpu = time.perf_counter() - wall, self._cpu() - cpu
        if record:
            self.wall.append(wall)
            self.cpu.append(cpu)
            for k, seconds in self._clock().items():
                self.phases[k] = self.phases.get(k, 0.0) + seconds - before[k]

    def close(self) -> None:
        self.run.close()


def _compare(args: argparse.Namespace, batch: int, data: SharedBatches) -> None:
    steps = args.chunk * (args.rounds + 1)
    ways: Dict[str, Way] = {}
    try:
        for name in args.ways:
            ways[name] = Way(name, data, batch, steps, args.servers)
        for way in ways.values():
            way.turn(args.chunk, record=False)  # traces TF, first inserts
        names = list(ways)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                ways[name].turn(args.chunk)
    finally:
        for way in ways.values():
            way.close()
    reference = ways[args.ways[0]]
    samples = args.chunk * batch
    print(f"\nbatch {batch}: {args.rounds} turns of {args.chunk} steps per way, load {os.getloadavg()[0]:.1f}")
    ratio = "/ " + reference.name
    print(f"{'way':>18} {'ms/step':>9} {'samples/s':>10} {ratio:>16} {'(range)':>13} {'CPU us/sample':>14}")
    for way in ways.values():
        ratios = [r / w for w, r in zip(way.wall, reference.wall)]  # of samples/s: the reference's time over the way's
        print(
            f"{way.name:>18} {statistics.median(way.wall) / args.chunk * 1e3:9.1f} "
            f"{samples / statistics.median(way.wall):10,.0f} {statistics.median(ratios):15.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f}) {sum(way.cpu) / (samples * len(way.cpu)) * 1e6:14.1f}",
            flush=True,
        )
    for way in ways.values():
        if way.phases:
            per_step = {k: v / (args.chunk * args.rounds) * 1e3 for k, v in way.phases.items()}
            parts = [f"{k} {per_step[k]:.2f}" for k in (*WORKER_PHASES, "in_step")]
            parts.append(f"call overhead {per_step['call'] - per_step['in_step']:.2f}")
            parts += [f"driver {k} {per_step[k]:.2f}" for k in LOOP_PARTS if k != "call"]
            print(f"{way.name:>18} ms/step: " + ", ".join(parts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=("criteo-shaped", "fields-100k", "wide"), default="fields-100k")
    parser.add_argument("--batch", type=int, nargs="+", default=[2048, 256])
    parser.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated, the first the reference: {WAYS}")
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=10, help="steps per turn")
    args = parser.parse_args()
    args.ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = [w for w in args.ways if w not in WAYS]
    if unknown or not args.ways:
        parser.error(f"--ways: expected names from {', '.join(WAYS)}, got {', '.join(unknown) or 'none'}")
    configure_determinism(0, False)
    if any(w.startswith("ray") for w in args.ways):
        connect_ray()  # every Ray cluster of the run in one Ray, started here
    print(
        f"bench_table_groups_ray {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}: " + " ".join(sys.argv[1:]),
        flush=True,
    )
    data = _data(args.workload, max(args.batch) * args.chunk * (args.rounds + 1))
    for batch in args.batch:
        _compare(args, batch, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
