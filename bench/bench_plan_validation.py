"""Benchmark: ``xdl-ec plan``'s predictions against measured runs, on three configurations. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_plan_validation.py [--constants PATH] [--rounds 2]
                                                                     [--mtbf 4] [--table-rows 2000000]
                                                                     [--configs 3]

Memory, per configuration (a width, an optimizer, servers and a code): a fresh process holds one server's share
of ``--table-rows`` rows (ceil(rows / servers), random ids, loaded in chunks) and reports its resident growth;
the built-in job trained under ``ec`` with that code reports each server's rows and the parity it holds. The
plan's figure for that server is its memory model at those rows: tables (records, key index, slack) against the
fresh process's growth, parity against the report's parity bytes per server, and the sum against the sum.

Overhead, per configuration: ``--rounds`` rounds of the built-in job (synthetic data, deterministic) failure-free
and under ec, ckpt and cpr with kills drawn at ``--mtbf`` seconds of the cluster (the bench's schedule, one
seed per round), order rotating per round, plus an A/A failure-free run (the noise floor). The plan is asked at
the measured failure rate (per-server MTBF = servers x reference seconds / kills), the measured samples/s and the
job's bytes per server; predicted and measured overheads are printed side by side (goal: within 25%).

Prints the load average at start and end: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any, Dict, List, Tuple

from xdl_ec.benchmark.runner import (
    MATRIX,
    Variant,
    Workload,
    failure_steps,
    quiet_tensorflow,
    run_variant,
    summarize,
)
from xdl_ec.builtin.criteo_job import TrainConfig
from xdl_ec.plan.job_plan import JobPlan, PlanRequest, strategy_cost
from xdl_ec.plan.measured_constants import MeasuredConstants
from xdl_ec.plan.memory_model import in_memory
from xdl_ec.plan.row_layout import RowLayout
from xdl_ec.ps import ClusterConfig

# (name, dim, optimizer, batch, synthetic rows, servers, code)
CONFIGS = (
    ("d16-adagrad-6s-2+1", 16, "adagrad", 256, 60_000, 6, (2, 1)),
    ("d32-adam-4s-3+1", 32, "adam", 128, 40_000, 4, (3, 1)),
    ("d8-sgd-6s-4+2", 8, "sgd", 512, 80_000, 6, (4, 2)),
)

SHARE = """
import json, os, sys
import numpy as np
from xdl_ec.benchmark.row_memory_probe import resident_bytes
from xdl_ec.sparse.table import EmbeddingTable
rows, dim, optimizer = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
table = EmbeddingTable("share", dim, optimizer=optimizer, initializer="zeros")
keys = np.unique(np.random.default_rng(0).integers(1, 1 << 62, size=int(rows * 1.01) + 16, dtype=np.int64))[:rows]
before = resident_bytes()
for start in range(0, rows, 1 << 14):
    part = keys[start : start + (1 << 14)]
    table.load(part, np.zeros((len(part), dim), dtype=np.float32))
print(json.dumps({"rss": resident_bytes() - before, "rows": len(table)}))
"""


def share_rss(rows: int, dim: int, optimizer: str) -> int:
    """Resident growth of a fresh process holding ``rows`` rows."""
    out = subprocess.run(
        [sys.executable, "-P", "-c", SHARE, str(rows), str(dim), optimizer],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ,
    )
    return int(json.loads(out.stdout.strip().splitlines()[-1])["rss"])


def workload(dim: int, optimizer: str, batch: int, rows: int) -> Workload:
    train = TrainConfig(
        synthetic=True,
        synthetic_rows=rows,
        batch_size=batch,
        epochs=1,
        seed=0,
        deterministic=True,
        progress=False,
        emb_dim=dim,
        optimizer=optimizer,
    )
    return Workload.built_in(train)


def error(predicted: float, measured: float) -> float:
    return predicted / measured - 1.0 if measured else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--constants", help="plan-constants.json (default: the shipped one)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--mtbf", type=float, default=4.0, help="seconds between kills of the cluster")
    p.add_argument("--table-rows", type=int, default=2_000_000, help="rows of the memory part's table")
    p.add_argument("--configs", type=int, default=len(CONFIGS), help="the first N configurations only")
    args = p.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    constants = MeasuredConstants.load(args.constants)
    print(f"constants: {constants.provenance.get('command')}", flush=True)
    quiet_tensorflow()
    by_label = {v.label: v for v in MATRIX}
    report: List[Dict[str, Any]] = []
    for name, dim, optimizer, batch, rows, servers, code in CONFIGS[: args.configs]:
        layout = {"t": RowLayout.of(dim, optimizer)}
        # ---- memory: a server's table share in a fresh process, and ec's parity from a training run
        per_server = -(-args.table_rows // servers)
        measured_tables = share_rss(per_server, dim, optimizer)
        model = in_memory({"t": per_server}, layout, constants.row_memory, code[1] / code[0])
        predicted_tables = model.rows + model.optimizer_state + model.key_index + model.slack
        work = workload(dim, optimizer, batch, rows)
        cluster = ClusterConfig(servers=servers, workers=1, backend="local", mode="sync")
        ec = Variant(f"ec-{code[0]}+{code[1]}", "ec", {"code": f"{code[0]},{code[1]}"})
        run_variant(by_label["none"], work, cluster, (), None, 0, steps=20)  # warm-up: one-time costs
        trained = run_variant(ec, work, cluster, (), None, 0)
        rep = trained["report"]
        fullest = max(s["rows"]["criteo_categorical"] for s in rep["servers"])
        parity_model = in_memory({"t": fullest}, layout, constants.row_memory, code[1] / code[0]).parity
        parity_measured = rep["parity_bytes"] / servers
        print(
            f"{name}: memory of one server's tables ({per_server:,} rows): plan {predicted_tables / 2**20:,.1f} MiB, "
            f"measured {measured_tables / 2**20:,.1f} MiB ({100 * error(predicted_tables, measured_tables):+.1f}%); "
            f"parity per server (ec {code[0]},{code[1]}, {fullest:,} rows on the fullest): plan "
            f"{parity_model / 2**20:.2f} MiB, report {parity_measured / 2**20:.2f} MiB "
            f"({100 * error(parity_model, parity_measured):+.1f}%)",
            flush=True,
        )
        # ---- overhead: rounds of none / ec / ckpt / cpr / A/A under the same kills
        order = ["none", "ec", "ckpt", "cpr", "aa"]
        measured: Dict[str, List[float]] = {k: [] for k in order[1:]}
        kills_seen: List[Tuple[int, float, float]] = []
        schedule = run_variant(by_label["none"], work, cluster, (), None, 0)["report"]
        for rnd in range(args.rounds):
            kills = failure_steps(schedule["timeline"], args.mtbf, 100 + rnd, servers, schedule["steps"], 10)
            rows_of: Dict[str, Any] = {}
            shift = rnd % len(order)
            for label in order[shift:] + order[:shift]:
                variant = {
                    "none": by_label["none"],
                    "aa": by_label["none"],
                    "ec": ec,
                    "ckpt": by_label["ckpt"],
                    "cpr": by_label["cpr-mfu"],
                }[label]
                rows_of[label] = run_variant(
                    variant, work, cluster, () if label in ("none", "aa") else kills, args.mtbf, 0
                )
            ref = rows_of["none"]
            for label in order[1:]:
                measured[label].append(summarize(rows_of[label], ref)["overhead"])
            ref_rep = ref["report"]
            seconds = ref_rep["train_seconds"] - ref_rep["timeline"][0][1]
            kills_seen.append((len(kills), seconds, summarize(ref, ref)["samples_per_sec_normal"] or 0.0))
        n_kills = sum(k for k, _, _ in kills_seen)
        seconds = sum(s for _, s, _ in kills_seen)
        rate = statistics.median(r for _, _, r in kills_seen)
        per_server_mtbf = servers * seconds / n_kills if n_kills else 1e12
        request = PlanRequest(
            {"t": rows},
            layout,
            memory_per_server=1 << 40,
            mtbf_s=per_server_mtbf,
            samples_per_sec=rate,
            max_servers=servers,
        )
        plan = JobPlan(request, constants)
        # the plan at these servers and this code (not its own choice): the configuration measured
        fixed = {}
        for s in ("ec", "ckpt", "cpr"):
            memory = in_memory({"t": fullest}, layout, constants.row_memory, code[1] / code[0] if s == "ec" else 0.0)
            records = memory.rows + memory.optimizer_state
            cost = strategy_cost(constants, s, records / constants.bytes_per_server, rate)
            fixed[s] = cost.overhead(servers * 3600.0 / per_server_mtbf)
        line = {
            "config": name,
            "kills": n_kills,
            "reference_seconds": seconds,
            "samples_per_sec": rate,
            "memory": {
                "tables_plan": predicted_tables,
                "tables_measured": measured_tables,
                "parity_plan": parity_model,
                "parity_measured": parity_measured,
            },
            "overhead": {},
        }
        for s in ("ec", "ckpt", "cpr"):
            m = statistics.fmean(measured[s])
            line["overhead"][s] = {"plan": fixed[s], "measured": m, "rounds": measured[s]}
            print(
                f"  {s}: plan {100 * fixed[s]:+.1f}%, measured {100 * m:+.1f}% "
                f"(rounds {', '.join(f'{100 * x:+.1f}%' for x in measured[s])}); "
                f"plan/measured {fixed[s] / m if m else float('nan'):.2f}",
                flush=True,
            )
        aa = measured["aa"]
        print(
            f"  A/A: {', '.join(f'{100 * x:+.1f}%' for x in aa)}; kills {n_kills} over {seconds:.1f} s of "
            f"reference; plan's own choice: {plan.recommended} on {plan.plans[plan.recommended].servers} servers",
            flush=True,
        )
        line["aa"] = aa
        report.append(line)
    print(f"load average at end: {os.getloadavg()}")
    print(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
