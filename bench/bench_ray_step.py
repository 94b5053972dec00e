"""Benchmark: where a Ray step's time goes, against the one-process backend in the same run. Not a test.

    PYTHONPATH=build/stage RAY_AUTH_MODE=disabled python3 -P bench/bench_ray_step.py [--batch 256,2048]
        [--ft none,ec] [--servers 5] [--chunk 40] [--rounds 6] [--latency-calls 200]

For each batch size x ``--ft``: two clusters of ``--servers`` servers and one sync worker, one on the one-process
backend and one on Ray, live side by side and training the same synthetic data (``--deterministic``) in
alternating turns of ``--chunk`` steps (after a first turn each that traces TF; the order alternates every round
so a trend cancels). Under ``ec`` (k = servers - 1, r = 1) every turn drains its parity pipeline inside its timed
span, so background work is charged to the turn that caused it. Printed per backend, per step:

- wall ms, samples/s and the Ray / one-process ratio (of the totals, and the median over rounds);
- the driver's loop: its step call (sent until answered), its dense work (weights read, gradients applied), the
  boundary (bookkeeping, ``after_step``);
- the worker's phases inside ``train_step`` (set_weights, pull_wait, data_wait (the next batch and its prefetch
  pulls submitted), compute, push) and the call's overhead (the driver's step call minus the worker's time in it:
  transport, serialisation, queueing, process switching);
- an empty call's latency (driver -> worker, worker -> server; sequential pings, outside the turns), over the path
  the step's calls take (direct links on Ray, :mod:`xdl_ec.ps.direct`) and through the backend's handles;
- bytes per step: dense arrays between driver and worker, keys, rows and gradients between worker and servers
  (all serialised on Ray; nothing is on the one-process backend);
- CPU per sample: the whole machine's busy time (/proc/stat: every process, other jobs' included, which the
  interleaving spreads evenly) and that of the run's own processes (Ray: the driver, every actor, the raylet
  and GCS of the Ray this bench started; one process: this process).

Both clusters end with the same model_digest (checked and printed). Date and command go with the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.benchmark.machine_cpu import busy_cpu_seconds, process_cpu_seconds  # noqa: E402
from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402
from xdl_ec.ps.api import WorkerAPI  # noqa: E402
from xdl_ec.ps.backend import connect_ray  # noqa: E402
from xdl_ec.ps.remote import Remote  # noqa: E402

WORKER_PHASES = ("set_weights", "pull_wait", "data_wait", "compute", "push")
LOOP_PARTS = ("call", "dense", "boundary")


def _ray_pids(trainer: PSTrainer) -> List[int]:
    """This process, every actor of ``trainer`` and the raylet and GCS of the Ray this process started."""
    import ray

    pids = [os.getpid()]
    handles = list(trainer.scheduler.servers) + list(trainer.workers) + list(trainer.scheduler._spares)
    pids += ray.get([h.actor.__ray_call__.remote(lambda self: os.getpid()) for h in handles], timeout=60)
    node = getattr(ray._private.worker, "_global_node", None)
    for infos in (getattr(node, "all_processes", None) or {}).values():
        for info in infos:
            process = getattr(info, "process", None)
            if process is not None:
                pids.append(process.pid)
    return pids


@dataclasses.dataclass
class Snapshot:
    wall: float
    machine: Optional[float]
    own: float  # CPU seconds of the run's own processes
    samples: int
    steps: int
    loop: Dict[str, float]
    dense_bytes: int
    worker: Dict[str, Any]


@dataclasses.dataclass
class Turn:
    seconds: float
    machine: Optional[float]
    own: float
    samples: int
    steps: int
    loop: Dict[str, float]
    dense_bytes: int
    phases: Dict[str, float]  # worker seconds per phase, "in_step" included
    wire_bytes: int  # worker <-> servers: keys, rows, gradients


class Side:
    """One cluster of the comparison (a backend) and its measurements."""

    def __init__(self, backend: str, config: TrainConfig, servers: int, ft: str) -> None:
        self.backend = backend
        strategy = ErasureCoded(servers - 1, 1) if ft == "ec" else None
        self.trainer = PSTrainer(
            criteo_job(config).spec,
            ClusterConfig(servers=servers, workers=1, backend=backend),
            RunSettings(config.seed, config.deterministic),
            strategy,
        )
        self.pids = _ray_pids(self.trainer) if backend == "ray" else [os.getpid()]
        self.turns: List[Turn] = []

    def snapshot(self) -> Snapshot:
        t = self.trainer
        worker = t.result(t.worker(0).stats())
        return Snapshot(
            time.perf_counter(),
            busy_cpu_seconds(),
            process_cpu_seconds(self.pids),
            t.samples,
            t.step,
            dict(t.loop.loop_seconds),
            t.loop.dense_bytes,
            worker,
        )

    def turn(self, steps: int, record: bool = True) -> None:
        t = self.trainer
        before = self.snapshot()
        wall, machine, own = time.perf_counter(), busy_cpu_seconds(), process_cpu_seconds(self.pids)
        t.fit(steps=steps)
        if isinstance(t.strategy, ErasureCoded):
            t.strategy.drain()  # the turn's parity work is the turn's
        wall, machine_end, own = time.perf_counter() - wall, busy_cpu_seconds(), process_cpu_seconds(self.pids) - own
        after = self.snapshot()
        if not record:
            return
        w0, w1 = before.worker, after.worker
        phases = {k: w1[f"{k}_seconds"] - w0[f"{k}_seconds"] for k in (*WORKER_PHASES, "in_step")}
        wire = sum(w1[k] - w0[k] for k in ("bytes_pulled", "bytes_requested", "bytes_pushed"))
        self.turns.append(
            Turn(
                wall,
                None if machine is None else machine_end - machine,
                own,
                after.samples - before.samples,
                after.steps - before.steps,
                {k: after.loop[k] - before.loop[k] for k in LOOP_PARTS},
                after.dense_bytes - before.dense_bytes,
                phases,
                wire,
            )
        )

    def ping_ms(self, calls: int) -> tuple:
        """Mean ms of an empty call: (driver -> worker, worker -> server) over the step's path, then both through
        the backend's handles (Ray's calls)."""
        t = self.trainer
        out = []
        for remote in (t.worker(0), Remote(t.workers[0], WorkerAPI)):
            start = time.perf_counter()
            for _ in range(calls):
                remote.ping().result(60)
            out.append(1000 * (time.perf_counter() - start) / calls)
        out.insert(1, 1000 * t.result(t.worker(0).call_latency(calls, True)))
        out.append(1000 * t.result(t.worker(0).call_latency(calls, False)))
        return tuple(out)

    def close(self) -> None:
        self.trainer.close()


def _sum(turns: List[Turn], get) -> float:
    return sum(get(t) for t in turns)


def _compare(args: argparse.Namespace, batch: int, ft: str) -> Dict[str, Any]:
    steps = args.chunk * (args.rounds + 1)
    config = TrainConfig(
        synthetic=True,
        synthetic_rows=batch * (steps + 8),
        batch_size=batch,
        steps=steps,
        deterministic=True,
        progress=False,
        seed=3,
    )
    sides: Dict[str, Side] = {}
    try:
        for backend in ("local", "ray"):
            sides[backend] = Side(backend, config, args.servers, ft)
        for side in sides.values():
            side.turn(args.chunk, record=False)  # traces TF, inserts the first rows
        pings = {name: side.ping_ms(args.latency_calls) for name, side in sides.items()}
        for i in range(args.rounds):
            for name in ("local", "ray") if i % 2 == 0 else ("ray", "local"):
                sides[name].turn(args.chunk)
        digests = {name: side.trainer.digest() for name, side in sides.items()}
    finally:
        for side in sides.values():
            side.close()
    _print(args, batch, ft, sides, pings, digests)
    local, ray_ = sides["local"].turns, sides["ray"].turns
    rate = {n: _sum(s.turns, lambda t: t.samples) / _sum(s.turns, lambda t: t.seconds) for n, s in sides.items()}
    per_sample = {n: _sum(s.turns, lambda t: t.samples) for n, s in sides.items()}
    return {
        "batch": batch,
        "ft": ft,
        "ratio": rate["ray"] / rate["local"],
        "cpu_ratio": (_sum(ray_, lambda t: t.machine) / per_sample["ray"])
        / (_sum(local, lambda t: t.machine) / per_sample["local"]),
        "own_ratio": (_sum(ray_, lambda t: t.own) / per_sample["ray"])
        / (_sum(local, lambda t: t.own) / per_sample["local"]),
    }


def _print(
    args: argparse.Namespace,
    batch: int,
    ft: str,
    sides: Dict[str, Side],
    pings: Dict[str, tuple],
    digests: Dict[str, str],
) -> None:
    names = ("local", "ray")
    turns = {n: sides[n].turns for n in names}
    steps = {n: _sum(turns[n], lambda t: t.steps) for n in names}
    samples = {n: _sum(turns[n], lambda t: t.samples) for n in names}
    seconds = {n: _sum(turns[n], lambda t: t.seconds) for n in names}
    rate = {n: samples[n] / seconds[n] for n in names}
    per_round = statistics.median(
        (r.samples / r.seconds) / (loc.samples / loc.seconds) for loc, r in zip(turns["local"], turns["ray"])
    )
    print(
        f"\nbatch {batch}, --ft {ft}, {args.servers} servers, 1 sync worker: {args.rounds} rounds of {args.chunk} "
        f"steps per backend, interleaved"
    )
    print(
        f"  samples/s: one process {rate['local']:,.0f}, Ray {rate['ray']:,.0f}: Ray / one process "
        f"{rate['ray'] / rate['local']:.2f}x (median over rounds {per_round:.2f}x)"
    )
    print(f"  {'per step':<44}{'one process':>12}{'Ray':>12}")

    def row(label: str, value: Any, fmt: str = "{:12.2f}") -> None:
        print(f"  {label:<44}" + "".join(fmt.format(value(n)) for n in names))

    row("wall ms", lambda n: 1000 * seconds[n] / steps[n])
    for part in LOOP_PARTS:
        row(f"driver: {part} ms", lambda n, part=part: 1000 * _sum(turns[n], lambda t: t.loop[part]) / steps[n])
    row("worker: in train_step ms", lambda n: 1000 * _sum(turns[n], lambda t: t.phases["in_step"]) / steps[n])
    for phase in WORKER_PHASES:
        row(f"  {phase} ms", lambda n, phase=phase: 1000 * _sum(turns[n], lambda t: t.phases[phase]) / steps[n])
    row(
        "step call overhead (call - in train_step) ms",
        lambda n: (
            1000 * (_sum(turns[n], lambda t: t.loop["call"]) - _sum(turns[n], lambda t: t.phases["in_step"])) / steps[n]
        ),
    )
    row("empty call driver -> worker ms (step's path)", lambda n: pings[n][0], "{:12.3f}")
    row("empty call worker -> server ms (step's path)", lambda n: pings[n][1], "{:12.3f}")
    row("empty call driver -> worker ms (backend)", lambda n: pings[n][2], "{:12.3f}")
    row("empty call worker -> server ms (backend)", lambda n: pings[n][3], "{:12.3f}")
    row("bytes: dense, driver <-> worker", lambda n: _sum(turns[n], lambda t: t.dense_bytes) / steps[n], "{:12,.0f}")
    row(
        "bytes: keys/rows/grads, worker <-> servers",
        lambda n: _sum(turns[n], lambda t: t.wire_bytes) / steps[n],
        "{:12,.0f}",
    )
    if all(t.machine is not None for n in names for t in turns[n]):
        row(
            "CPU us per sample, whole machine",
            lambda n: 1e6 * _sum(turns[n], lambda t: t.machine) / samples[n],
            "{:12.1f}",
        )
    row(
        "CPU us per sample, the run's processes",
        lambda n: 1e6 * _sum(turns[n], lambda t: t.own) / samples[n],
        "{:12.1f}",
    )
    if all(t.machine is not None for n in names for t in turns[n]):
        machine = {n: _sum(turns[n], lambda t: t.machine) / samples[n] for n in names}
        print(f"  whole-machine CPU per sample, Ray / one process: {machine['ray'] / machine['local']:.2f}x")
    own = {n: _sum(turns[n], lambda t: t.own) / samples[n] for n in names}
    print(f"  the run's processes' CPU per sample, Ray / one process: {own['ray'] / own['local']:.2f}x")
    print(f"  same model_digest on both backends: {digests['local'] == digests['ray']}")


def _ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=_ints, default=[256, 2048])
    parser.add_argument("--ft", default="none,ec")
    parser.add_argument("--servers", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=40, help="steps per turn")
    parser.add_argument("--rounds", type=int, default=6, help="turns per backend")
    parser.add_argument("--latency-calls", type=int, default=200, help="pings per empty-call latency")
    args = parser.parse_args()
    fts = [f for f in args.ft.split(",") if f]
    for ft in fts:
        if ft not in ("none", "ec"):
            raise SystemExit(f"--ft: none or ec, got {ft!r}")
    if "ec" in fts and args.servers < 2:
        raise SystemExit("--servers: ec needs at least 2")
    connect_ray()  # every Ray cluster of the run in one Ray, started here
    print(
        f"bench_ray_step {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f}: " + " ".join(sys.argv[1:])
    )
    summary = [_compare(args, batch, ft) for batch in args.batch for ft in fts]
    print(
        "\nsummary (Ray / one process): "
        + ", ".join(
            f"batch {s['batch']} --ft {s['ft']}: {s['ratio']:.2f}x samples/s, {s['cpu_ratio']:.2f}x CPU per sample "
            f"(whole machine; the run's processes {s['own_ratio']:.2f}x)"
            for s in summary
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
