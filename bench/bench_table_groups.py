"""Benchmark: what a step costs per table, with table groups and without (issue #49). Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_table_groups.py [--tables 25 50 100 200] [--batch 256]
                                                                  [--rounds 10] [--chunk 20] [--aa] [--servers 2]

For each table count N: a job of N tables of dim 16 (Adagrad), one feature of one id per example each (Zipf 1.1 over
100k ids), a linear model over their rows (so the model's own work is small and the tables' cost shows), trained in
one process ways that live side by side: grouped (the default), ungrouped (``table_groups=False``), the same N
features over ONE table (the same ids moved, salted per feature; such a table sums every feature's gradient of its
rows densely, so it is no floor) and, with ``--aa``, a second grouped copy (the A/A: its spread against the first is
the method's noise floor) and, with ``--servers S``, the grouped and ungrouped job on S parameter servers and one
worker of the one-process backend (servers as threads of this process: the client's and servers' Python per table
shows). They train the same batches in turns of ``--chunk`` steps, ``--rounds`` turns each after a
first turn that traces TF, the order rotating every round, so turns a fraction of a second apart see the same machine
(a shared VM swings by +-10-50% between whole runs). Per N: median ms per step of each way and the median over rounds
of the per-round ratio ungrouped / grouped (and A/A / grouped); then the cost per added table, the least-squares slope
of the median step time against N, in us per step. CPU: this process's (input threads included), per step. The batches
are made once and cycled: the input costs its preparation only (checks, salting, unique), as a dataset in memory
would.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Dict, Iterator, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import xdl_ec  # noqa: E402
from xdl_ec.job.local_run import LocalRun  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer  # noqa: E402
from xdl_ec.ps.worker import RunSettings  # noqa: E402
from xdl_ec.tf.determinism import configure_determinism  # noqa: E402

DIM, IDS, ZIPF, BATCHES = 16, 100_000, 1.1, 16


class LinearOverRows(tf.keras.Model):
    """logit = w . concat(every feature's row, dense): the least model a job of tables can have."""

    def __init__(self) -> None:
        super().__init__()
        self.out = tf.keras.layers.Dense(1)

    def call(self, embedded: Dict[str, Any], dense: Any, training: bool = False) -> Any:
        return self.out(tf.concat([*embedded.values(), dense], axis=1))


def _batches(tables: int, size: int) -> List[Dict[str, Any]]:
    out = []
    for b in range(BATCHES):
        rng = np.random.default_rng([tables, b])
        a = 1.0 - ZIPF  # bounded Zipf ranks by inverting the continuous power law's CDF
        x = (rng.random((size, tables)) * ((IDS + 1.0) ** a - 1.0) + 1.0) ** (1.0 / a)
        ids = np.minimum(np.floor(x) - 1.0, IDS - 1).clip(0).astype(np.int64)
        batch = {f"f{t}": ids[:, t] for t in range(tables)}
        batch.update(
            label=(rng.random(size) < 0.3).astype(np.float32), dense=rng.normal(size=(size, 4)).astype(np.float32)
        )
        out.append(batch)
    return out


def _job(tables: int, batches: List[Dict[str, Any]], grouped: bool, one_table: bool = False) -> xdl_ec.Job:
    """N features over N tables, or over one table (``one_table``)."""
    declared = [
        xdl_ec.Table(f"t{t}", DIM, optimizer=xdl_ec.optim.Adagrad(0.05), seed=t)
        for t in range(1 if one_table else tables)
    ]

    def cycle(worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        i = 0
        while True:
            yield batches[i % len(batches)]
            i += 1

    return xdl_ec.Job(
        tables=declared,
        features=[xdl_ec.Feature(f"f{t}", declared[0 if one_table else t]) for t in range(tables)],
        model_fn=LinearOverRows,
        input_fn=cycle,
        table_groups=grouped,
    )


def _measure(tables: int, args: argparse.Namespace) -> Dict[str, Any]:
    batches = _batches(tables, args.batch)
    ways = {"grouped": (True, False), "ungrouped": (False, False), "one_table": (True, True)}
    if args.aa:
        ways["aa"] = (True, False)
    settings = RunSettings(seed=0, deterministic=False)
    runs: Dict[str, Any] = {
        name: LocalRun(_job(tables, batches, g, one).spec, settings) for name, (g, one) in ways.items()
    }
    if args.servers:
        cluster = ClusterConfig(servers=args.servers, workers=1)
        for name, grouped in (("servers", True), ("servers_ungrouped", False)):
            runs[name] = PSTrainer(_job(tables, batches, grouped).spec, cluster, settings)
    wall: Dict[str, List[float]] = {name: [] for name in runs}
    cpu: Dict[str, List[float]] = {name: [] for name in runs}
    try:
        for run in runs.values():
            run.fit(args.chunk)  # traces TF, first inserts
        names = list(runs)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                c0, w0 = time.process_time(), time.perf_counter()
                runs[name].fit(args.chunk)
                wall[name].append((time.perf_counter() - w0) / args.chunk * 1e3)
                cpu[name].append((time.process_time() - c0) / args.chunk * 1e3)
    finally:
        for run in runs.values():
            run.close()
    out: Dict[str, Any] = {"tables": tables}
    for name in runs:
        out[f"{name}_ms"] = statistics.median(wall[name])
        out[f"{name}_cpu_ms"] = statistics.median(cpu[name])
    out["ungrouped_over_grouped"] = statistics.median(u / g for u, g in zip(wall["ungrouped"], wall["grouped"]))
    if args.servers:
        pairs = zip(wall["servers_ungrouped"], wall["servers"])
        out["servers_ungrouped_over_grouped"] = statistics.median(u / g for u, g in pairs)
    if args.aa:
        ratios = [a / g for a, g in zip(wall["aa"], wall["grouped"])]
        out["aa_over_grouped"] = statistics.median(ratios)
        out["aa_spread"] = (min(ratios), max(ratios))
    return out


def _slope(xs: List[float], ys: List[float]) -> float:
    return float(np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, nargs="+", default=[25, 50, 100, 200])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--chunk", type=int, default=20, help="steps per turn")
    parser.add_argument("--aa", action="store_true", help="also a second grouped run: the A/A noise floor")
    parser.add_argument("--servers", type=int, default=0, help="also the job on this many servers (0: not)")
    args = parser.parse_args()
    configure_determinism(0, False)
    print(f"load before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; batch {args.batch}", flush=True)
    results = []
    for n in args.tables:
        results.append(_measure(n, args))
        r = results[-1]
        aa = f", A/A {r['aa_over_grouped']:.3f} ({r['aa_spread'][0]:.2f}-{r['aa_spread'][1]:.2f})" if args.aa else ""
        print(
            f"{n:4d} tables: grouped {r['grouped_ms']:7.2f} ms/step ({r['grouped_cpu_ms']:6.2f} CPU), ungrouped "
            f"{r['ungrouped_ms']:7.2f} ({r['ungrouped_cpu_ms']:6.2f} CPU): ungrouped/grouped "
            f"{r['ungrouped_over_grouped']:.3f}{aa}; one table {r['one_table_ms']:7.2f} "
            f"({r['one_table_cpu_ms']:6.2f} CPU)",
            flush=True,
        )
        if args.servers:
            print(
                f"      on {args.servers} servers: grouped {r['servers_ms']:7.2f} ms/step ({r['servers_cpu_ms']:6.2f} "
                f"CPU), ungrouped {r['servers_ungrouped_ms']:7.2f} ({r['servers_ungrouped_cpu_ms']:6.2f} CPU): "
                f"ungrouped/grouped {r['servers_ungrouped_over_grouped']:.3f}",
                flush=True,
            )
    if len(results) > 1:
        counts = [r["tables"] for r in results]
        for name in ("grouped", "ungrouped") + (("servers", "servers_ungrouped") if args.servers else ()):
            wall = _slope(counts, [r[f"{name}_ms"] for r in results]) * 1e3
            cpu = _slope(counts, [r[f"{name}_cpu_ms"] for r in results]) * 1e3
            print(f"cost per added table, {name}: {wall:.1f} us/step wall, {cpu:.1f} us/step CPU")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
