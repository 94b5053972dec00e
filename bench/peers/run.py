"""Peer benchmark (issue #37): xdl-ec's job API against plain Keras, TFRA dynamic_embedding and TorchRec on the
same batches, the same DLRM and sparse Adagrad, one system at a time in interleaved rounds, each in its own
process (and environment). Not a test.

    python3 bench/peers/run.py --batch-size 2048 256 --rounds 3

Steps: build the peers' environments outside the repo (setup_envs.sh, cached: a second run reuses them), write
the shared batches once per workload and row count (shared_batches.py, cached too), then per batch size run
``--rounds`` rounds of every system (the order rotates each round), and print the table: median samples/s over the
timed steps (``--steps`` minus the first ``--skip``), the ratio to xdl-ec in the same round for samples/s and CPU
per sample (process CPU time, all threads), peak RSS, hold-out AUC on the same split; then one epoch of the real
Criteo sample per system where the file exists. ``tf-body`` (ceiling_tf_body.py) is not a peer but the ceiling:
TF's DLRM body alone with no tables, the most any system whose model body is TF's can reach on these cores; the goal
line gives it over the best peer.

The xdl-ec side runs as whatever ``--xdl-ec-python`` with ``--xdl-ec-pythonpath`` imports (default: this Python
and build/lead/stage), so the table can be rerun against a newer build.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from peer_table import CEILING, format_table, goal_line, summarise  # noqa: E402

SYSTEMS = ("xdl-ec", "xdl-ec-ungrouped", "keras", "tfra", "torchrec", "tf-body")
SCRIPTS = {
    "xdl-ec": "peer_xdl_ec.py",
    "xdl-ec-ungrouped": "peer_xdl_ec.py",  # the same job with table_groups=False: issue #49's A/B
    "keras": "peer_keras.py",
    "tfra": "peer_tfra.py",
    "torchrec": "peer_torchrec.py",
    "tf-body": "ceiling_tf_body.py",
}
VENVS = {"tfra", "torchrec"}
DEFAULT_CRITEO = os.path.join(os.path.dirname(REPO), "shared", "data", "criteo_kaggle_train_head10k.tsv.gz")
PEER_TIMEOUT = 1800


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, nargs="+", default=[2048], help="one table per batch size")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip", type=int, default=20, help="first steps of a run left out of the timing")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)}")
    parser.add_argument(
        "--workload",
        choices=("criteo-shaped", "fields-100k", "wide"),
        default="criteo-shaped",
        help="criteo-shaped: the built-in synthetic data and job; fields-100k: 26 fields of 100k ids, one table each; "
        "wide: 100 fields of 10 to 10M ids (a few multi-hot), one table each",
    )
    parser.add_argument("--criteo", default=DEFAULT_CRITEO, help="Criteo TSV for the one-epoch run ('' to skip)")
    parser.add_argument("--env-root", default=os.path.expanduser("~/.cache/xdl-ec-peers"), help="peers' venvs")
    parser.add_argument("--data-dir", help="where the shared batches are written (default ENV_ROOT/data)")
    parser.add_argument("--xdl-ec-python", default=sys.executable)
    parser.add_argument("--xdl-ec-pythonpath", default=os.path.join(REPO, "build", "lead", "stage"))
    parser.add_argument("--keras-python", default=sys.executable, help="a Python with TF 2.x and Keras (no venv)")
    parser.add_argument("--no-setup", action="store_true", help="do not build missing venvs (fail instead)")
    parser.add_argument("--json", help="also write every run's result line to this file")
    parser.add_argument("--tables-from", metavar="JSON", help="print the tables of a --json file, run nothing")
    args = parser.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown or not args.systems:
        parser.error(f"--systems: expected names from {', '.join(SYSTEMS)}, got {', '.join(unknown) or 'none'}")
    for name in ("rounds", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: must be a positive integer, got {getattr(args, name)}")
    if any(b < 1 for b in args.batch_size):
        parser.error(f"--batch-size: must be positive integers, got {args.batch_size}")
    if not 0 <= args.skip < args.steps:
        parser.error(f"--skip: must be in [0, --steps), got {args.skip}")
    args.data_dir = args.data_dir or os.path.join(args.env_root, "data")
    return args


def python_of(system: str, args: argparse.Namespace) -> str:
    if system.startswith("xdl-ec"):
        return args.xdl_ec_python
    if system in ("keras", "tf-body"):
        return args.keras_python
    return os.path.join(args.env_root, system, "bin", "python")


def setup(args: argparse.Namespace) -> None:
    needed = [s for s in args.systems if s in VENVS]
    missing = [s for s in needed if not os.path.exists(os.path.join(args.env_root, s, ".xdl-ec-peer-ready"))]
    if not missing:
        return
    if args.no_setup:
        raise SystemExit(f"--no-setup: no environment for {', '.join(missing)} under {args.env_root}")
    print(
        f"building the environments of {', '.join(missing)} under {args.env_root} (once; downloads ~2 GB)", flush=True
    )
    subprocess.run(["bash", os.path.join(HERE, "setup_envs.sh"), "--root", args.env_root, *missing], check=True)


def shared_file(args: argparse.Namespace, workload: str, train_rows: int = 0, criteo: Optional[str] = None) -> str:
    """The batches file of a workload, written by the xdl-ec Python once (reused while it exists)."""
    os.makedirs(args.data_dir, exist_ok=True)
    name = (
        f"{workload}-{train_rows}rows-seed0.npz" if criteo is None else f"criteo-sample-{os.path.basename(criteo)}.npz"
    )
    path = os.path.join(args.data_dir, name)
    if not os.path.exists(path):
        command = [args.xdl_ec_python, "-P", os.path.join(HERE, "shared_batches.py"), path, "--workload", workload]
        command += ["--criteo", criteo] if criteo is not None else ["--train-rows", str(train_rows)]
        subprocess.run(command, check=True, env=_env("xdl-ec", args), stdout=subprocess.DEVNULL)
    return path


def _env(system: str, args: argparse.Namespace) -> Dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    if system.startswith("xdl-ec"):
        env["PYTHONPATH"] = args.xdl_ec_pythonpath
    if system == "xdl-ec-ungrouped":
        env["XDL_EC_TABLE_GROUPS"] = "0"
    return env


def run_one(
    system: str, args: argparse.Namespace, data: str, batch_size: int, steps: Optional[int], skip: int
) -> Dict[str, Any]:
    """One system's process on one file; its result line, or ``{"error": ...}``."""
    command = [python_of(system, args), "-P", os.path.join(HERE, SCRIPTS[system]), "--data", data]
    command += ["--batch-size", str(batch_size), "--skip", str(skip)]
    if steps is not None:
        command += ["--steps", str(steps)]
    load = os.getloadavg()[0]
    try:
        done = subprocess.run(command, env=_env(system, args), capture_output=True, text=True, timeout=PEER_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"system": system, "error": f"no result within {PEER_TIMEOUT} s", "load_before": load}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"system": system, "error": f"exit {done.returncode}: {tail[:200]}", "load_before": load}
    result = json.loads(lines[-1])
    result.update(system=system, load_before=load)
    return result


LABELS = {
    "xdl-ec": "xdl-ec job API, one process",
    "xdl-ec-ungrouped": "xdl-ec job API, one process, table_groups=False",
    "keras": "plain Keras",
    "tfra": "TFRA dynamic_embedding",
    "torchrec": "TorchRec DLRM (EBC, fbgemm CPU)",
    "tf-body": CEILING,
}


def labelled(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [dict(r, system=LABELS[r["system"]]) if r["system"] in LABELS else r for r in results]


def print_tables(results: List[Dict[str, Any]]) -> None:
    """One table per workload and batch size, with the goal line where the rounds were timed."""
    for workload, batch_size in dict.fromkeys((r["workload"], r["batch_size"]) for r in results):
        part = [r for r in results if r["workload"] == workload and r["batch_size"] == batch_size]
        rows = summarise(labelled(part), reference=LABELS["xdl-ec"])
        ok = [r for r in part if "error" not in r]
        if workload == "criteo-sample":
            print(f"## one epoch of the Criteo sample, batch {batch_size} (its last 10% held out)\n")
            print(format_table(rows) + "\n", flush=True)
            continue
        rounds = len({r["round"] for r in part})
        steps = f"{ok[0]['steps']} steps (first {ok[0]['steps'] - ok[0]['timed_steps']} untimed)" if ok else ""
        print(f"## {workload}, batch {batch_size}, {steps}, {rounds} rounds\n")
        print(format_table(rows))
        print("\n" + goal_line(rows, batch_size, reference=LABELS["xdl-ec"]) + "\n", flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.tables_from:
        with open(args.tables_from) as f:
            print_tables(json.load(f))
        return 0
    setup(args)
    everything: List[Dict[str, Any]] = []
    print(f"# command: python3 bench/peers/run.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"# machine: {os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}")
    for batch_size in args.batch_size:
        data = shared_file(args, args.workload, batch_size * args.steps)
        results: List[Dict[str, Any]] = []
        for rnd in range(args.rounds):
            order = args.systems[rnd % len(args.systems) :] + args.systems[: rnd % len(args.systems)]
            for system in order:
                started = time.perf_counter()
                result = run_one(system, args, data, batch_size, args.steps, args.skip)
                result.update(round=rnd, batch_size=batch_size, workload=args.workload)
                results.append(result)
                save(args, [*everything, *results])  # an interrupted run keeps what it measured
                shown = result.get("error") or (
                    f"{result['samples_per_sec']:,.0f} samples/s, {result['cpu_us_per_sample']:.1f} CPU us/sample, "
                    f"AUC {result['auc']:.4f}"
                )
                print(
                    f"  batch {batch_size} round {rnd + 1} {system:>8}: {shown} "
                    f"(load {result['load_before']:.1f}, {time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
        print()
        print_tables(results)
        everything += results
        if args.criteo and args.workload == "criteo-shaped":
            everything += criteo_epoch(args, batch_size)
        save(args, everything)
    return 0


def save(args: argparse.Namespace, results: List[Dict[str, Any]]) -> None:
    """Every result line so far to ``--json`` (rewritten whole, through a temporary file)."""
    if args.json:
        with open(f"{args.json}.tmp", "w") as f:
            json.dump(results, f, indent=1)
        os.replace(f"{args.json}.tmp", args.json)


def criteo_epoch(args: argparse.Namespace, batch_size: int) -> List[Dict[str, Any]]:
    """One epoch of the real Criteo sample per system (the first step untimed), or a line saying why not."""
    if not os.path.isfile(args.criteo):
        print(f"(Criteo sample skipped: no file at {args.criteo}; pass --criteo PATH)\n")
        return []
    data = shared_file(args, "criteo-sample", criteo=args.criteo)
    results = []
    for system in args.systems:
        result = run_one(system, args, data, batch_size, None, 1)
        result.update(round=0, batch_size=batch_size, workload="criteo-sample")
        results.append(result)
    print_tables(results)
    return results


if __name__ == "__main__":
    sys.exit(main())
