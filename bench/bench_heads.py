"""Benchmark: what the production-model contract (several heads, sequences, side inputs, non-trainable state)
costs a model that uses none of it, and what a second head costs. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_heads.py --baseline-path OLD_STAGE [--rounds 6] [--batches 150]
    PYTHONPATH=build/stage python3 -P bench/bench_heads.py --baseline-path OLD_STAGE --calls   # Python calls a step

OLD_STAGE is a staged xdl_ec of the code before the contract (e.g. ``git worktree add /tmp/base a53fd88`` then
``scripts/dev-build`` there, or its Python linked beside this build's compiled modules). Each measurement is one
fresh process training examples/user_item_tags.py's model in one process (batch --batch-size, --batches steps,
steady samples/s after the first 10 steps). Per round, in an order that alternates: the baseline code, this code
(single head), this code again (A/A: the noise floor), and this code with a second head on the same model (the
labels {"click", "like"}, a loss per head). Prints each ratio's median and its range over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List


def child(heads: int, batches: int, batch_size: int) -> None:
    """Trains the job once in this process and prints its steady samples/s as JSON."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # example_jobs, beside this file (python -P too)
    import numpy as np
    import tensorflow as tf
    from example_jobs import load_example

    import xdl_ec

    example = load_example("user_item_tags")
    log = example.ClickLog(batch_size=batch_size, batches=batches, eval_batches=0)
    times: List[float] = []

    def train(worker: int, count: int) -> Any:
        for b in log.train(worker, count):
            times.append(time.perf_counter())
            if heads == 2:
                b = dict(b)
                label = b.pop("label")
                b["labels"] = {"click": label, "like": np.roll(label, 1)}
            yield b

    def model() -> Any:
        inner = example.make_model()
        if heads == 1:
            return inner

        class TwoHeads(tf.keras.Model):
            def __init__(self) -> None:
                super().__init__()
                self.inner, self.like = inner, tf.keras.layers.Dense(1)

            def call(self, embedded, dense, training=False):  # noqa: ANN001, ANN201
                return {
                    "click": self.inner(embedded, dense, training=training),
                    "like": self.like(tf.concat([embedded["user"], embedded["item"]], axis=1)),
                }

        return TwoHeads()

    base = example.make_job(log)
    loss: Any = {"click": "binary_crossentropy", "like": "binary_crossentropy"} if heads == 2 else "binary_crossentropy"
    job = xdl_ec.Job(base.tables, base.features, model, train, loss=loss, dense_learning_rate=0.003)
    job.fit(deterministic=False)
    steady = times[10:]
    print(json.dumps({"samples_per_sec": (len(steady) - 1) * batch_size / (steady[-1] - steady[0])}))


def count_calls() -> None:
    """Prints the Python calls a training step makes (cProfile): a load-independent count, fits of 30 and 80 batches
    after a warm-up fit, the difference over 50 steps."""
    import contextlib
    import cProfile
    import io
    import pstats

    def calls(batches: int) -> int:
        profile = cProfile.Profile()
        with contextlib.redirect_stdout(io.StringIO()):
            profile.enable()
            child(1, batches, 256)
            profile.disable()
        return pstats.Stats(profile).total_calls

    calls(20)
    print(json.dumps({"calls_per_step": (calls(80) - calls(30)) / 50}))


def measure(pythonpath: str, heads: int, args: argparse.Namespace) -> float:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    done = subprocess.run(
        [
            sys.executable,
            "-P",
            os.path.abspath(__file__),
            "--child",
            str(heads),
            "--batches",
            str(args.batches),
            "--batch-size",
            str(args.batch_size),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"a measurement failed:\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["samples_per_sec"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-path", help="PYTHONPATH of the code before the contract")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument(
        "--calls",
        action="store_true",
        help="count the Python calls a step makes in each code instead (load-independent)",
    )
    parser.add_argument("--child", type=int, choices=(1, 2), help=argparse.SUPPRESS)
    parser.add_argument("--count-calls", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count_calls:
        count_calls()
        return
    if args.child:
        child(args.child, args.batches, args.batch_size)
        return
    if not args.baseline_path:
        parser.error("--baseline-path is required (see the module docstring)")
    here = os.environ.get("PYTHONPATH", "")
    if args.calls:
        for name, path in (("baseline", args.baseline_path), ("this", here)):
            done = subprocess.run(
                [sys.executable, "-P", os.path.abspath(__file__), "--count-calls"],
                env=dict(os.environ, PYTHONPATH=path),
                capture_output=True,
                text=True,
                timeout=900,
            )
            if done.returncode != 0:
                raise RuntimeError(f"counting calls failed:\n{done.stderr[-3000:]}")
            count = json.loads(done.stdout.strip().splitlines()[-1])["calls_per_step"]
            print(f"{name}: {count:,.0f} Python calls per step (batch 256)")
        return
    sides = [("baseline", args.baseline_path, 1), ("this", here, 1), ("this (A/A)", here, 1), ("two heads", here, 2)]
    rates: Dict[str, List[float]] = {name: [] for name, _, _ in sides}
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else list(reversed(sides))
        for name, path, heads in order:
            rates[name].append(measure(path, heads, args))
        print(f"round {r + 1}: " + ", ".join(f"{n} {rates[n][-1]:,.0f}" for n, _, _ in sides), flush=True)

    def ratio(a: str, b: str) -> str:
        values = [x / y for x, y in zip(rates[a], rates[b])]
        return f"{statistics.median(values):.3f}x (range {min(values):.3f}-{max(values):.3f})"

    print(f"\nsamples/s, medians over {args.rounds} rounds, batch {args.batch_size}:")
    for name, _, _ in sides:
        print(f"  {name:>12}: {statistics.median(rates[name]):,.0f}")
    print(f"this / baseline (single head): {ratio('this', 'baseline')}")
    print(f"A/A noise floor (this / this): {ratio('this (A/A)', 'this')}")
    print(f"two heads / one head:          {ratio('two heads', 'this')}")


if __name__ == "__main__":
    main()
