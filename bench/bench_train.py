"""Benchmark: training samples/s of the built-in job trained in one process (the job API) vs the plain-Keras peer
(bench/keras_peer.py), same model, same synthetic data, batch 2048, measured in the same run (alternating, medians over
--repeats). Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_train.py [--steps 60] [--model dlrm] [--repeats 2]

Rates: steady-state (after the first step, which traces the tf.function), whole loop, and samples per CPU second
of the process (all threads; steadier than wall time on a shared machine); medians over the repeats. Goal: ratio
>= 1.0x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from keras_peer import KerasPeer  # noqa: E402

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.job.local_run import LocalRun  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--model", choices=("dlrm", "mlp"), default="dlrm")
    parser.add_argument("--emb-dim", type=int, default=16)
    parser.add_argument("--max-cardinality", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--table-optimizer",
        choices=("tf_sparse", "keras"),
        default="tf_sparse",
        help="the peer's embedding optimizer (see keras_peer.py)",
    )
    args = parser.parse_args()

    config = TrainConfig(
        synthetic=True,
        synthetic_rows=args.batch_size * (args.steps + 1),
        synthetic_max_cardinality=args.max_cardinality,
        model=args.model,
        emb_dim=args.emb_dim,
        batch_size=args.batch_size,
        steps=args.steps,
        eval_fraction=0.0,
        progress=False,
    )
    print(
        f"model {args.model}, emb_dim {args.emb_dim}, batch {args.batch_size}, {args.steps} steps, synthetic data "
        f"(cardinality cap {args.max_cardinality:,}), sparse Adagrad; peer table optimizer: {args.table_optimizer}"
    )
    runs: dict[str, list[dict]] = {"xdl-ec": [], "keras": []}
    for repeat in range(args.repeats):
        for name in runs:
            trainer = (
                LocalRun(criteo_job(config).spec)
                if name == "xdl-ec"
                else KerasPeer(config, table_optimizer=args.table_optimizer)
            )
            cpu_start = time.process_time()
            result = trainer.fit()
            if name == "xdl-ec":
                trainer.close()
            result["samples_per_cpu_sec"] = result["samples"] / (time.process_time() - cpu_start)
            runs[name].append(result)
            print(
                f"  run {repeat + 1} {name:>6}: {result['steady_samples_per_sec']:>10,.0f} samples/s steady, "
                f"{result['samples_per_sec']:>10,.0f} whole loop, {result['samples_per_cpu_sec']:>10,.0f} per CPU "
                f"second (all threads), final loss {result['final_loss']:.4f}",
                flush=True,
            )
    # Medians: on a shared machine single runs swing; CPU time is the steadier measure of the work per sample.
    for field, label in (
        ("steady_samples_per_sec", "steady samples/s"),
        ("samples_per_sec", "whole-loop samples/s"),
        ("samples_per_cpu_sec", "samples per CPU second"),
    ):
        ours = statistics.median(r[field] for r in runs["xdl-ec"])
        theirs = statistics.median(r[field] for r in runs["keras"])
        print(f"{label:>24} (median): xdl-ec {ours:>10,.0f}  plain Keras {theirs:>10,.0f}  ratio {ours / theirs:.2f}x")
    print("goal: ratio >= 1.0x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
