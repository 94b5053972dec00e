"""Benchmark (#37): the built-in DLRM job's step through the job API, the step before #37 against the default, in
one build, interleaved. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_step.py [--rounds 3] [--steps 150] [--batches 2048,256] [--split]
        [--pools] [--cluster] [--ray]

Every turn is a fresh process (TF's op pools are sized once per process): the built-in job on its synthetic
Criteo-shaped data (``TrainConfig(synthetic=True)``: Zipf 1.1, 26 categorical ids, 13 dense, dim 16, DLRM),
``job.fit(steps)`` timed from its first step's end (the report's steady samples/s), CPU seconds of the process per
sample over the fit's steps (``stages.cores_busy`` x the fit's seconds), and the report's ``stages``. Arms, one
turn each per round, in a rotating order:

- ``serial`` and ``serial'``: ``XDL_EC_SERIAL_STEP=1``, the step before #37 (deterministic: one thread per TF
  pool); the two give the A/A floor;
- ``default``: this build's default; ``default det`` / ``serial det``: the same with ``deterministic=True`` (the
  build's default runs two inter-op threads there, see ``xdl_ec.tf.determinism``). The fast mode's default is the
  serial step's (a push thread and a shorter GIL hand-over were tried and dropped: see
  docs/results/step-2026-11-28.md), so ``default`` is one more A/A arm until the step changes again;
- with ``--split`` the arms are instead ``one thread`` and ``one thread'`` (``XDL_EC_CORE_THREADS=1``: a shard's
  pulls and pushes on the calling thread, as before the core's ``TaskPool``; the two give the A/A floor),
  ``default`` (split over the cores), and both again with ``deterministic=True``;
- with ``--pools`` the arms are instead ``thread per core`` and ``thread per core'`` (TF's intra-op pool as TF
  sizes it, a thread per core, through ``TF_NUM_INTRAOP_THREADS``; the two give the A/A floor) and ``default`` (the
  pool sized by the step: ``xdl_ec.tf.determinism.op_threads``, the cores beside the step's thread below 2048
  samples);
- with ``--cluster``: the same job on ``Cluster(servers=2)`` (servers in this process's threads; its step was
  already pipelined: ``combine_calls``), and with ``--ray`` on Ray (2 servers): samples/s per core busy
  (``stages.cores_busy``; on Ray the driver's process only, so there it reads as samples/s alone).

Ratios are per round (the two arms ran a few seconds apart), medians and ranges over the rounds: they survive
the machine's load better than absolute figures, which are printed for reference with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

from xdl_ec.tf.determinism import usable_cores

HERE = os.path.dirname(os.path.abspath(__file__))


def child(spec: Dict[str, Any]) -> Dict[str, Any]:
    """One turn, in this process: fit the built-in job and return its figures."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import xdl_ec
    from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job

    config = TrainConfig(synthetic=True, batch_size=spec["batch"], steps=spec["steps"], eval_fraction=0.0)
    job = criteo_job(config)
    cluster = None
    if spec["cluster"] == "local":
        cluster = xdl_ec.Cluster(servers=2)
    elif spec["cluster"] == "ray":
        cluster = xdl_ec.Cluster(servers=2, backend="ray")
    report = job.fit(spec["steps"], cluster=cluster, deterministic=spec["deterministic"])
    # the fit's own CPU (stages.cores_busy: process CPU per wall second of the fit), not the process's start-up
    cpu = report["stages"]["cores_busy"] * report["train_seconds"]
    return {
        "samples_per_sec": report["steady_samples_per_sec"],
        "cpu_us_per_sample": cpu / report["samples"] * 1e6,
        "stages": report["stages"],
        "train_seconds": report["train_seconds"],
        "digest": report["model_digest"],
    }


Arm = Tuple[str, bool, Optional[str], str, str]
ARMS: Dict[str, Arm] = {
    # name: (XDL_EC_SERIAL_STEP, deterministic, cluster, XDL_EC_CORE_THREADS, TF_NUM_INTRAOP_THREADS: "" = default)
    "serial": ("1", False, None, "", ""),
    "serial'": ("1", False, None, "", ""),
    "default": ("0", False, None, "", ""),
    "serial det": ("1", True, None, "", ""),
    "default det": ("0", True, None, "", ""),
}
# --split: the shard's pulls and pushes split over the core's threads (the default) against one thread
SPLIT_ARMS: Dict[str, Arm] = {
    "one thread": ("0", False, None, "1", ""),
    "one thread'": ("0", False, None, "1", ""),
    "default": ("0", False, None, "", ""),
    "one thread det": ("0", True, None, "1", ""),
    "default det": ("0", True, None, "", ""),
}
# --pools: TF's intra-op pool sized by the step (the default) against TF's own sizing, a thread per core
_CORES = str(usable_cores())
POOL_ARMS: Dict[str, Arm] = {
    "thread per core": ("0", False, None, "", _CORES),
    "thread per core'": ("0", False, None, "", _CORES),
    "default": ("0", False, None, "", ""),
}
CLUSTER_ARMS: Dict[str, Arm] = {"servers": ("0", False, "local", "", "")}
RAY_ARMS: Dict[str, Arm] = {"ray": ("0", False, "ray", "", "")}


def turn(arm: tuple, batch: int, steps: int) -> Dict[str, Any]:
    serial, deterministic, cluster, core_threads, tf_intra = arm
    spec = {"batch": batch, "steps": steps, "deterministic": deterministic, "cluster": cluster}
    env = {**os.environ, "XDL_EC_SERIAL_STEP": serial, "TF_CPP_MIN_LOG_LEVEL": "2"}
    for name, value in (("XDL_EC_CORE_THREADS", core_threads), ("TF_NUM_INTRAOP_THREADS", tf_intra)):
        env.pop(name, None)
        if value:
            env[name] = value
    out = subprocess.run(
        [sys.executable, "-P", os.path.abspath(__file__), "--child", json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"turn {spec} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ratios(results: Dict[str, List[Dict[str, Any]]], a: str, b: str, key: str) -> List[float]:
    return [rb[key] / ra[key] for ra, rb in zip(results[a], results[b])]


def spread(values: List[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def run(batch: int, arms: Dict[str, tuple], rounds: int, steps: int) -> Dict[str, List[Dict[str, Any]]]:
    names = list(arms)
    results: Dict[str, List[Dict[str, Any]]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate: no arm always first after a pause
        for name in order:
            results[name].append(turn(arms[name], batch, steps))
            got = results[name][-1]
            print(
                f"  batch {batch} round {r + 1} {name}: {got['samples_per_sec']:,.0f} samples/s, "
                f"{got['cpu_us_per_sample']:.2f} CPU us/sample, {got['stages']['cores_busy']:.2f} cores",
                file=sys.stderr,
                flush=True,
            )
    return results


def table(batch: int, results: Dict[str, List[Dict[str, Any]]], base: str) -> List[str]:
    lines = [
        f"### batch {batch}",
        "",
        "| arm | samples/s | CPU us/sample | cores busy | samples/s per core | input_s | pull_s | tf_s | push_s | "
        f"wait_s | samples/s vs {base} (median [min, max] of rounds) | CPU/sample vs {base} |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for name, turns in results.items():
        med = {k: statistics.median(t[k] for t in turns) for k in ("samples_per_sec", "cpu_us_per_sample")}
        stages = {k: statistics.median(t["stages"][k] for t in turns) for k in turns[0]["stages"]}
        per_core = statistics.median(t["samples_per_sec"] / max(t["stages"]["cores_busy"], 1e-9) for t in turns)
        vs = spread(ratios(results, base, name, "samples_per_sec")) if name != base else "1"
        cpu_vs = spread(ratios(results, base, name, "cpu_us_per_sample")) if name != base else "1"
        lines.append(
            f"| {name} | {med['samples_per_sec']:,.0f} | {med['cpu_us_per_sample']:.2f} | "
            f"{stages['cores_busy']:.2f} | {per_core:,.0f} | {stages['input_s']:.2f} | {stages['pull_s']:.2f} | "
            f"{stages['tf_s']:.2f} | {stages['push_s']:.2f} | {stages['wait_s']:.2f} | {vs} | {cpu_vs} |"
        )
    digests = {name: {t["digest"] for t in turns} for name, turns in results.items() if "det" in name}
    if digests:
        lines += ["", "deterministic digests: " + "; ".join(f"{n}: {sorted(d)}" for n, d in digests.items())]
    if "default det" in results:
        det_base = "serial det" if "serial det" in results else "one thread det"
        for a, b in ((det_base, "default det"), ("default", "default det")):
            lines.append(f"{b} vs {a} (samples/s): " + spread(ratios(results, a, b, "samples_per_sec")))
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batches", default="2048,256")
    p.add_argument("--split", action="store_true", help="the core's split pulls and pushes against one thread")
    p.add_argument("--pools", action="store_true", help="TF intra-op pool by the step vs a thread per core")
    p.add_argument("--cluster", action="store_true", help="also 2 servers in this process")
    p.add_argument("--ray", action="store_true", help="also 2 servers on Ray")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return
    lines = [f"load average at start: {os.getloadavg()}", ""]
    for batch in (int(b) for b in args.batches.split(",")):
        arms = dict(SPLIT_ARMS if args.split else POOL_ARMS if args.pools else ARMS)
        if args.cluster:
            arms.update(CLUSTER_ARMS)
        if args.ray:
            arms.update(RAY_ARMS)
        steps = args.steps if batch >= 1024 else args.steps * 4
        results = run(batch, arms, args.rounds, steps)
        base = "one thread" if args.split else "thread per core" if args.pools else "serial"
        lines += table(batch, results, base) + [""]
    lines.append(f"load average at end: {os.getloadavg()}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
