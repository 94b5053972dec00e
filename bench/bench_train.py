"""Benchmark: training samples/s of the xdl-ec trainer vs the plain-Keras peer (bench/keras_peer.py), same model,
same synthetic data, batch 2048, measured in the same run (alternating, best of --repeats for each). Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_train.py [--steps 60] [--model dlrm] [--repeats 2]

Rates are steady-state (after the first step, which traces the tf.function); the whole-loop rates are printed
too. Goal: ratio >= 1.0x.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from keras_peer import KerasPeer  # noqa: E402

from xdl_ec.trainer import TrainConfig, Trainer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--model", choices=("dlrm", "mlp"), default="dlrm")
    parser.add_argument("--emb-dim", type=int, default=16)
    parser.add_argument("--max-cardinality", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--table-optimizer", choices=("tf_sparse", "keras"), default="tf_sparse",
                        help="the peer's embedding optimizer (see keras_peer.py)")
    args = parser.parse_args()

    config = TrainConfig(synthetic=True, synthetic_rows=args.batch_size * (args.steps + 1),
                         synthetic_max_cardinality=args.max_cardinality, model=args.model, emb_dim=args.emb_dim,
                         batch_size=args.batch_size, steps=args.steps, eval_fraction=0.0, progress=False)
    print(f"model {args.model}, emb_dim {args.emb_dim}, batch {args.batch_size}, {args.steps} steps, synthetic data "
          f"(cardinality cap {args.max_cardinality:,}), sparse Adagrad; peer table optimizer: {args.table_optimizer}")
    runs: dict[str, list[dict]] = {"xdl-ec": [], "keras": []}
    for repeat in range(args.repeats):
        for name in runs:
            trainer = Trainer(config) if name == "xdl-ec" else KerasPeer(config, table_optimizer=args.table_optimizer)
            result = trainer.fit()
            runs[name].append(result)
            print(f"  run {repeat + 1} {name:>6}: {result['steady_samples_per_sec']:>10,.0f} samples/s steady, "
                  f"{result['samples_per_sec']:>10,.0f} whole loop, final loss {result['final_loss']:.4f}", flush=True)
    best = {name: max(r["steady_samples_per_sec"] for r in results) for name, results in runs.items()}
    whole = {name: max(r["samples_per_sec"] for r in results) for name, results in runs.items()}
    print(f"xdl-ec {best['xdl-ec']:,.0f} samples/s vs plain Keras {best['keras']:,.0f} samples/s: "
          f"ratio {best['xdl-ec'] / best['keras']:.2f}x steady, {whole['xdl-ec'] / whole['keras']:.2f}x whole loop "
          f"(goal >= 1.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
