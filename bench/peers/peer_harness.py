"""What every peer's process shares: its command line, the timed loop and the one JSON line it prints.

A peer gives ``train(n)`` (trains its next ``n`` steps on the shared batches, returns their losses) and
``predict(dense, sparse)`` (probabilities); :func:`run_peer` trains ``--skip`` steps untimed (tracing, warm-up), then
the rest timed for wall and process CPU time (all threads), evaluates the hold-out with the shared AUC, and prints
``{"system": ..., "samples_per_sec": ..., "cpu_us_per_sample": ..., "peak_rss_mb": ..., "auc": ...}``. Needs
numpy only (it runs in every peer's environment).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np
from holdout_auc import holdout_auc
from shared_batches import Arrays, SharedBatches


def parse_args(description: str, argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True, help="a file of shared_batches.py")
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--steps", type=int, help="steps to train (default: one epoch of the file)")
    parser.add_argument("--skip", type=int, default=20, help="first steps left out of the timing")
    args = parser.parse_args(argv)
    for name in ("batch_size", "steps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')}: must be a positive integer, got {value}")
    if args.skip < 0:
        parser.error(f"--skip: must be >= 0, got {args.skip}")
    return args


def stepper(
    step: Callable[[np.ndarray, np.ndarray, np.ndarray], float], batches: Iterator[Arrays]
) -> Callable[[int], List[float]]:
    """``train(n)`` of a peer that trains one batch per ``step(dense, sparse, label) -> loss`` call."""

    def train(n: int) -> List[float]:
        losses = []
        for _ in range(n):
            batch = next(batches, None)
            if batch is None:
                break
            losses.append(float(step(*batch)))
        return losses

    return train


def num_steps(data: SharedBatches, args: argparse.Namespace) -> int:
    """Steps of the run: ``--steps``, else one epoch (the last batch possibly short)."""
    return args.steps if args.steps is not None else -(-data.train[2].shape[0] // args.batch_size)


def run_peer(
    system: str,
    data: SharedBatches,
    args: argparse.Namespace,
    train: Callable[[int], List[float]],
    predict: Callable[[np.ndarray, np.ndarray], np.ndarray],
    details: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Times ``train`` over the run's steps after ``--skip``, evaluates, prints and returns the result line."""
    steps = num_steps(data, args)
    skip = min(args.skip, steps - 1)  # at least one timed step
    losses = train(skip)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    timed = train(steps - skip)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    losses += timed
    rows = data.train[2].shape[0]
    # samples of the timed steps: full batches, the epoch's last one possibly short
    timed_samples = sum(
        min(args.batch_size, rows - (i * args.batch_size) % rows) for i in range(skip, skip + len(timed))
    )
    labels, probabilities = [], []
    for dense, sparse, label in data.eval_batches():
        probabilities.append(np.asarray(predict(dense, sparse), dtype=np.float64).ravel())
        labels.append(label)
    y, p = np.concatenate(labels), np.clip(np.concatenate(probabilities), 1e-7, 1 - 1e-7)
    result = {
        "system": system,
        "workload": data.workload,
        "batch_size": args.batch_size,
        "steps": len(losses),
        "timed_steps": len(timed),
        "timed_samples": timed_samples,
        "seconds": wall,
        "samples_per_sec": timed_samples / wall,
        "cpu_seconds": cpu,
        "cpu_us_per_sample": cpu / timed_samples * 1e6,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "auc": holdout_auc(y, p),
        "logloss": float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))),
        "final_loss": float(np.mean(losses[-20:])) if losses else math.nan,
        **(details or {}),
    }
    print(json.dumps(result), flush=True)
    return result
