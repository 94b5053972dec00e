"""Benchmark: parameter-server training samples/s for servers x workers on the one-process and the Ray backend,
batch 2048, synthetic data, measured in the same run, with the single-process trainer as reference. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_ps.py [--steps 20] [--servers 2,4,8] [--workers 1,2]
                                                        [--backends local,ray] [--mode sync] [--repeats 1]

Per configuration: steady samples/s (after the first step, which traces TF), bytes pulled and pushed per sample
(keys and rows, as the workers' clients counted them), and the Ray backend's rate over the one-process backend's
for the same servers x workers (ratio < 1: Ray's cost). Cluster start-up (Ray actors, TF in every worker) is not
timed. ``--steps`` counts batches of the run, shared by the workers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("RAY_AUTH_MODE", "token")

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.job.local_run import LocalRun  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def _local(config: TrainConfig) -> float:
    """Steady samples/s of the job trained in one process (no servers)."""
    run = LocalRun(criteo_job(config).spec)
    try:
        return run.fit()["steady_samples_per_sec"]
    finally:
        run.close()


def _run_once(config: TrainConfig, cluster: ClusterConfig) -> tuple[float, float, float, float]:
    """(steady samples/s, start-up seconds, bytes pulled per sample, bytes pushed per sample) of one run."""
    start = time.perf_counter()
    trainer = PSTrainer(criteo_job(config).spec, cluster, RunSettings(config.seed))
    started = time.perf_counter() - start
    try:
        report = trainer.fit()
        workers_stats = trainer.report()["workers"]
    finally:
        trainer.close()
    samples = report["samples"]
    pulled = sum(w["bytes_pulled"] + w["bytes_requested"] for w in workers_stats) / samples
    pushed = sum(w["bytes_pushed"] for w in workers_stats) / samples
    return report["steady_samples_per_sec"] or report["samples_per_sec"], started, pulled, pushed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="batches per configuration (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--servers", type=_ints, default=[2, 4, 8])
    parser.add_argument("--workers", type=_ints, default=[1, 2])
    parser.add_argument("--backends", default="local,ray")
    parser.add_argument("--mode", choices=("sync", "async"), default="sync")
    parser.add_argument("--emb-dim", type=int, default=16)
    parser.add_argument("--max-cardinality", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=1, help="runs per configuration; the median is reported")
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b]

    config = TrainConfig(
        synthetic=True,
        synthetic_rows=args.batch_size * (args.steps + 1),
        synthetic_max_cardinality=args.max_cardinality,
        emb_dim=args.emb_dim,
        batch_size=args.batch_size,
        steps=args.steps,
        eval_fraction=0.0,
        progress=False,
    )
    print(
        f"dlrm, emb_dim {args.emb_dim}, batch {args.batch_size} per worker step, {args.steps} batches per run, "
        f"synthetic data (cardinality cap {args.max_cardinality:,}), sparse Adagrad, mode {args.mode}, "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    reference = statistics.median(_local(config) for _ in range(args.repeats))
    print(f"single-process trainer: {reference:>10,.0f} samples/s steady", flush=True)
    if "ray" in backends:
        import ray

        from xdl_ec.ps.backend import ray_runtime_env

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, runtime_env=ray_runtime_env())

    rates: dict[tuple[str, int, int], float] = {}
    print(
        f"{'backend':>7} {'servers':>7} {'workers':>7} {'samples/s':>10} {'vs single':>9} {'pulled B/sample':>15} "
        f"{'pushed B/sample':>15} {'start s':>7}",
        flush=True,
    )
    for workers in args.workers:
        for servers in args.servers:
            for backend in backends:
                runs = [
                    _run_once(config, ClusterConfig(servers=servers, workers=workers, backend=backend, mode=args.mode))
                    for _ in range(args.repeats)
                ]
                rate = statistics.median(r[0] for r in runs)
                started, pulled, pushed = runs[0][1], runs[0][2], runs[0][3]
                rates[(backend, servers, workers)] = rate
                print(
                    f"{backend:>7} {servers:>7} {workers:>7} {rate:>10,.0f} "
                    f"{rate / reference:>8.2f}x {pulled:>15,.0f} {pushed:>15,.0f} "
                    f"{started:>7.1f}",
                    flush=True,
                )
    if "ray" in backends and "local" in backends:
        print("Ray backend over one-process backend (samples/s ratio, same servers x workers):")
        for workers in args.workers:
            cells = [
                f"{s} servers {rates[('ray', s, workers)] / rates[('local', s, workers)]:.2f}x" for s in args.servers
            ]
            print(f"  {workers} worker(s): " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
