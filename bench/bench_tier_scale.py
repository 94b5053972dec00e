"""Benchmark 2 of issue #48: MLPerf DLRM's Criteo 1TB tables (26 tables capped at 40M rows: 187,767,399 rows) at d16
with Adagrad under ec k4r1, loaded in bulk and trained on Zipf 1.1 ids over the whole id space with a memory budget
per server, a server killed mid-run; against the same job in memory at benchmark 1's 20M rows. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_tier_scale.py --spill-dir DIR [--rows-scale 1.0]
        [--memory-budget 2G] [--train-seconds 600] [--baseline-seconds 120] [--batch 4096] [--servers 5]

Each run is a child process of this one (``--child``), one after the other: the in-memory baseline (A), the scale run
(S), the baseline again (A'). A run builds the built-in job (``xdl_ec.builtin.criteo_job``: one table of the 26
columns' ids, DLRM, d16 Adagrad, synthetic Criteo-shaped data over ``--synthetic-tables criteo-1tb``, every column's
rows times ``--rows-scale``) on a local-backend ec cluster of ``--servers`` servers (k4r1 needs 5: four data servers
per stripe and one parity), preloads every id's row (``xdl-ec train --synthetic-preload``'s path: chunks of keys, each
server creating its rows through its agent's pull, parity following), then trains for ``--train-seconds``: a first
part until half of the time, then server 1 is killed before the next step and the rest is trained while it is rebuilt
(the report's ``seconds_to_full_redundancy``). The baseline runs have no budget, ``--baseline-rows`` rows (default
benchmark 1's 20M: every table times 20M / 187.8M) and no kill. The model digest is not taken (it
exports every row into the driver's RAM, which a table larger than RAM does not fit); exactness after a preload and
a kill is the tests' (tests/integration/test_preload.py).

Printed per run: the preload's rows/s, samples/s of each training part, peak RSS (the child's ``ru_maxrss`` from
``wait4``, and the system's used memory sampled every second: total minus available, less what was used before the
child started), disk use (the spill files' bytes as the tiers count them, and the filesystem's used bytes sampled,
less before), the tier's counts, and the ratio of the scale run's samples/s to the baselines' mean with the A/A' ratio
as the noise floor. The machine's load average is printed beside every figure (a shared machine).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

FULL_ROWS = 187_767_399  # sum of MLPerf DLRM's Criteo 1TB table sizes capped at 40M
BASELINE_ROWS = 20_000_000  # benchmark 1's table
CAP = 40_000_000


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def used_memory() -> int:
    """Bytes of RAM in use system-wide: MemTotal - MemAvailable."""
    fields = {}
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            name, value = line.split(":", 1)
            fields[name] = int(value.split()[0]) * 1024
    return fields["MemTotal"] - fields["MemAvailable"]


def rss_parts(pid: int) -> Dict[str, int]:
    """A process's RSS now, whole and by kind (bytes): VmRSS, RssAnon, RssFile, RssShmem (0 once it is gone)."""
    parts = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0, "RssShmem": 0}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                name, value = line.split(":", 1)
                if name in parts:
                    parts[name] = int(value.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return parts


def rss_text() -> str:
    """This process's RSS now, anonymous and file-backed (GiB)."""
    parts = rss_parts(os.getpid())
    return f"{parts['RssAnon'] / 2**30:.2f} anon + {parts['RssFile'] / 2**30:.2f} file GiB"


def used_disk(path: str) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


# ---- the child: one run --------------------------------------------------------------------------------------------


def child(args: argparse.Namespace) -> None:
    from xdl_ec.builtin.criteo_job import TABLE_NAME, SyntheticIds, TrainConfig, criteo_job
    from xdl_ec.ft.factory import make_strategy
    from xdl_ec.ft.failure_injector import FailureInjector
    from xdl_ec.ft.failure_schedule import FailureSchedule, Kill
    from xdl_ec.job.cluster import Cluster
    from xdl_ec.ps.training import PSTrainer
    from xdl_ec.ps.worker import RunSettings

    config = TrainConfig(
        synthetic=True,
        synthetic_tables="criteo-1tb",
        synthetic_table_scale=args.scale,
        synthetic_max_cardinality=CAP,
        synthetic_rows=10**12,  # batches are drawn by index: no row is held; never exhausted here
        synthetic_preload=True,
        eval_fraction=0.0,
        batch_size=args.batch,
        emb_dim=16,
        optimizer="adagrad",
        seed=args.seed,
    )
    job = criteo_job(config)
    cluster = Cluster(
        servers=args.servers,
        ft="ec",
        code=(4, 1),
        memory_budget=args.memory_budget,
        spill_dir=args.spill_dir if args.memory_budget else None,
    )
    settings = RunSettings(seed=args.seed, deterministic=False)
    injector = FailureInjector(FailureSchedule())
    trainer = PSTrainer(
        job.spec,
        cluster.cluster_config(),
        settings,
        make_strategy(cluster.strategy_config(args.seed)),
        injector,
        False,
        cluster.caches(job.spec.tables),
    )
    out: Dict[str, Any] = {"load_start": load()}
    try:
        start = time.perf_counter()
        rows = trainer.preload(TABLE_NAME, SyntheticIds(config)())
        seconds = time.perf_counter() - start
        out["preload"] = {"rows": rows, "seconds": seconds, "rows_per_sec": rows / seconds, "load": load()}
        out["preload"]["rss"] = rss_parts(os.getpid())
        print(
            f"  preload: {rows:,} rows in {seconds:.0f} s ({rows / seconds:,.0f} rows/s), RSS now {rss_text()}, "
            f"load {load()}",
            flush=True,
        )
        parts: List[Dict[str, Any]] = []
        last: Dict[str, Any] = {}

        def train(seconds: float, label: str) -> None:
            """fit() in chunks of steps until ``seconds`` of training passed."""
            began, samples, steps, train_s = time.perf_counter(), 0, 0, 0.0
            chunk, failures = 5, {}
            while time.perf_counter() - began < seconds:
                r = trainer.fit(chunk)
                last.update(r)
                samples += r["samples"]
                steps += r["steps_this_fit"]
                train_s += r["train_seconds"]
                for f in r.get("failures", []):  # the strategy's list: every failure of the run so far
                    failures[(f["step"], f["index"])] = f
                injector.schedule = FailureSchedule()  # a kill fires once
                left = seconds - (time.perf_counter() - began)
                chunk = max(1, min(200, int(steps / max(time.perf_counter() - began, 1e-3) * min(left, 30))))
            part = {
                "part": label,
                "samples": samples,
                "steps": steps,
                "train_seconds": train_s,
                "wall_seconds": time.perf_counter() - began,
                "samples_per_sec": samples / train_s,
                "failures": list(failures.values()),
                "load": load(),
                "rss": rss_parts(os.getpid()),
            }
            parts.append(part)
            print(
                f"  {label}: {samples:,} samples in {steps} steps, {part['samples_per_sec']:,.0f} samples/s, "
                f"RSS now {rss_text()}, load {load()}",
                flush=True,
            )

        if args.kill:
            train(args.train_seconds / 2, "before the kill")
            injector.schedule = FailureSchedule([Kill(trainer.step + 1, "server", 1)])
            train(args.train_seconds / 2, "kill and after")
        else:
            train(args.train_seconds, "steady")
        out["parts"] = parts
        samples = sum(p["samples"] for p in parts)
        out["samples_per_sec"] = samples / sum(p["train_seconds"] for p in parts)
        report = trainer.report()
        out["tables"] = report.get("tables")
        out["servers"] = report.get("servers")
        out["parity"] = {k: v for k, v in last.items() if k.startswith("parity")}  # the strategy's, per fit
        out["load_end"] = load()
    finally:
        trainer.close()
    with open(args.child, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, default=str)


# ---- the parent: the runs in order, measured from outside ----------------------------------------------------------


def run(args: argparse.Namespace, label: str, scale: float, budget: Optional[str], seconds: float, kill: bool) -> Dict:
    fd, result = tempfile.mkstemp(prefix="bench-tier-scale-", suffix=".json")
    os.close(fd)
    cmd = [
        sys.executable,
        "-P",
        __file__,
        "--child",
        result,
        "--scale",
        repr(scale),
        "--train-seconds",
        repr(seconds),
        "--batch",
        str(args.batch),
        "--servers",
        str(args.servers),
        "--seed",
        str(args.seed),
        "--spill-dir",
        args.spill_dir,
    ]
    if budget:
        cmd += ["--memory-budget", budget]
    if kill:
        cmd += ["--kill"]
    rows = sum(min(CAP, max(1, math.ceil(c * scale))) for c in _cards())
    print(f"{label}: {rows:,} rows, budget {budget or 'none'} per server, load {load()}", flush=True)
    mem0, disk0 = used_memory(), used_disk(args.spill_dir)
    peak = {"mem": 0, "disk": 0, "VmRSS": 0, "RssAnon": 0, "RssFile": 0, "RssShmem": 0}
    done = threading.Event()
    began = time.perf_counter()
    proc = subprocess.Popen(cmd)

    def sample() -> None:
        while not done.wait(1.0):
            peak["mem"] = max(peak["mem"], used_memory() - mem0)
            peak["disk"] = max(peak["disk"], used_disk(args.spill_dir) - disk0)
            for name, value in rss_parts(proc.pid).items():
                peak[name] = max(peak[name], value)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{label}: the run failed (exit {proc.returncode})")
    with open(result, encoding="utf-8") as f:
        out = json.load(f)
    os.unlink(result)
    out.update(
        label=label,
        rows=rows,
        budget=budget,
        wall_seconds=time.perf_counter() - began,
        peak_rss_bytes=usage.ru_maxrss * 1024,
        peak_rss_sampled={k: peak[k] for k in ("VmRSS", "RssAnon", "RssFile", "RssShmem")},
        peak_rss_anon=peak["RssAnon"],
        peak_used_memory_bytes=peak["mem"],
        peak_disk_bytes=peak["disk"],
    )
    tier = (out.get("tables") or {}).get("criteo_categorical", {})
    parity = out.get("parity", {}).get("parity_tier", {})
    print(
        f"  {label}: peak RSS {out['peak_rss_bytes'] / 2**30:.2f} GiB (sampled: anonymous "
        f"{peak['RssAnon'] / 2**30:.2f}, file {peak['RssFile'] / 2**30:.2f}, shmem {peak['RssShmem'] / 2**30:.2f} GiB; "
        f"system used +{peak['mem'] / 2**30:.2f} GiB), "
        f"disk +{peak['disk'] / 1e9:.1f} GB of the (shared) filesystem"
        + (
            f" (the tiers' files: rows {tier.get('disk_bytes', 0) / 1e9:.2f} GB, parity "
            f"{parity.get('disk_bytes', 0) / 1e9:.2f} GB), "
            if budget
            else ", "
        )
        + f"{out['samples_per_sec']:,.0f} samples/s, load {load()}",
        flush=True,
    )
    return out


def _cards() -> List[int]:
    from xdl_ec.data.synthetic import CRITEO_1TB_CARDINALITIES

    return list(CRITEO_1TB_CARDINALITIES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spill-dir", required=True, help="where the budgeted servers' spill files go")
    parser.add_argument("--rows-scale", type=float, default=1.0, help="every table's rows times this (smoke: 0.01)")
    parser.add_argument("--memory-budget", default="2G", help="per server (the key index and slot words included)")
    parser.add_argument("--train-seconds", type=float, default=600.0)
    parser.add_argument("--baseline-seconds", type=float, default=120.0)
    parser.add_argument("--baseline-rows", type=int, default=BASELINE_ROWS, help="the in-memory runs' rows")
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--servers", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-baseline", action="store_true", help="the scale run alone (no ratio): a probe")
    parser.add_argument("--json", default=None, help="write every run's figures here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--scale", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kill", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        args.scale = float(args.scale)
        child(args)
        return
    if not os.path.isdir(args.spill_dir):
        raise SystemExit(f"--spill-dir {args.spill_dir!r}: no such directory")
    base_scale = args.baseline_rows / FULL_ROWS
    if args.no_baseline:
        run(args, "S (scale, budgeted, a kill)", args.rows_scale, args.memory_budget, args.train_seconds, True)
        return
    runs = [
        run(args, "A (in memory, benchmark 1's rows)", base_scale, None, args.baseline_seconds, False),
        run(args, "S (scale, budgeted, a kill)", args.rows_scale, args.memory_budget, args.train_seconds, True),
        run(args, "A' (in memory again)", base_scale, None, args.baseline_seconds, False),
    ]
    a, s, a2 = runs
    base = (a["samples_per_sec"] + a2["samples_per_sec"]) / 2
    kills = {(f["step"], f["index"]): f for p in s["parts"] for f in p["failures"]}.values()
    print(
        f"samples/s S / mean(A, A'): {s['samples_per_sec'] / base:.3f}; the A/A' floor: "
        f"{a['samples_per_sec'] / a2['samples_per_sec']:.3f}"
    )
    for f in kills:
        print(
            f"kill: server {f.get('index')} before step {f.get('step')}, seconds to full redundancy "
            f"{f.get('seconds_to_full_redundancy')}, training held {f.get('training_held_seconds')} s"
        )
    gib = 2**30
    print(
        f"S: {s['rows']:,} rows, peak RSS {s['peak_rss_bytes'] / gib:.2f} GiB (anonymous {s['peak_rss_anon'] / gib:.2f}"
        f" GiB), disk +{s['peak_disk_bytes'] / 1e9:.1f} GB; load average now {load()}"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(runs, f, indent=1, default=str)


if __name__ == "__main__":
    main()
