"""Benchmark: fresh serving's cost and figures on a drifting synthetic stream (#36). Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_serving_delta.py [--seconds 100] [--rounds 3] [--export-every 60s]

Each round trains the same job twice in this process for ``--seconds`` of input each, once plain and once with
exports every ``--export-every`` and a TensorBoard log (the order alternating by round, so load drifts hit both
alike), and prints per run the samples/s and the process' CPU seconds per 1,000 samples (the training's: the base
export before the first step and the last delta after the last are outside, the cuts and the background writes
inside), the ratios on / off per round with their medians (on a shared machine the CPU ratio is the steadier), the
freshness (seconds from the step boundary to the delta's rename) median and p99 over every delta, the bytes of a delta
per exported minute against every row of the model (``full_bytes``: a delta of every row and the dense weights) and
a full ``xdl-ec export`` SavedModel of the last model. The runs with exports also write TensorBoard, which the bench
reads back for the progressive AUC curve (``--plot PNG``: progressive AUC and rows held over the stream's minutes).
The issue's figure is a 30-minute stream: ``--seconds 1800 --rounds 1`` (an hour of machine time).

The stream: users Zipf over 2M ids (a stable core), items drifting (each 10 s of input a new window of 200k ids
opens, so old item rows stop changing while new ones arrive), a planted logistic signal; an Embedding&MLP over
user and item rows (dim 16) and 4 dense features, batch 1024.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import numpy as np

BATCH, DIM, DRIFT_SECONDS, WINDOW = 1024, 16, 10.0, 200_000


def weight(ids: np.ndarray) -> np.ndarray:
    """The planted per-id logit: a fixed pseudo-random value in [-1, 1)."""
    return ((ids.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(1000)).astype(np.float32) / 500.0 - 1.0


def make_job(seconds: float) -> Any:
    import tensorflow as tf

    import xdl_ec

    def input_fn(worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        rng = np.random.default_rng(worker)
        start = None
        while True:
            now = time.perf_counter()
            start = now if start is None else start
            if now - start >= seconds:
                return
            users = rng.zipf(1.3, BATCH) % 2_000_000
            items = rng.integers(0, WINDOW, BATCH) + int((now - start) / DRIFT_SECONDS) * WINDOW // 2
            dense = rng.normal(size=(BATCH, 4)).astype(np.float32)
            logit = 2 * weight(users) + 2 * weight(items) + dense[:, 0]
            yield {
                "label": (rng.random(BATCH) < 1 / (1 + np.exp(-logit))).astype(np.float32),
                "user": users.astype(np.int64),
                "item": items.astype(np.int64),
                "dense": dense,
            }

    def model_fn() -> Any:
        class EmbeddingMlp(tf.keras.Model):
            def __init__(self) -> None:
                super().__init__()
                self.hidden = tf.keras.layers.Dense(64, activation="relu")
                self.out = tf.keras.layers.Dense(1)

            def call(self, embedded, dense, training=False):  # noqa: ANN001, ANN201 - the job API's call
                return self.out(self.hidden(tf.concat([embedded["user"], embedded["item"], dense], axis=1)))

        return EmbeddingMlp()

    users = xdl_ec.Table("users", dim=DIM, optimizer=xdl_ec.optim.Adagrad(0.05), seed=1)
    items = xdl_ec.Table("items", dim=DIM, optimizer=xdl_ec.optim.Adagrad(0.05), seed=2)
    return xdl_ec.Job(
        tables=[users, items],
        features=[xdl_ec.Feature("user", users), xdl_ec.Feature("item", items)],
        model_fn=model_fn,
        input_fn=input_fn,
        dense_learning_rate=0.01,
    )


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def train(seconds: float, seed: int, serving: Any, every: str, scratch: Path) -> Dict[str, Any]:
    """One run in this process (a LocalRun, as job.fit runs it), with exports and TensorBoard when ``serving`` is a
    directory: the base is written before the timed part and the last delta after it (as job.fit does), so the
    figures are the training's: wall samples/s, and this process' CPU seconds (every thread, the delta writer's
    included) per 1,000 samples, which other processes' load on a shared machine disturbs far less."""
    from xdl_ec.job.export_schedule import ExportSchedule
    from xdl_ec.job.local_run import LocalRun
    from xdl_ec.job.tensorboard_log import TensorBoardLog
    from xdl_ec.ps.worker import RunSettings

    job = make_job(seconds)
    run = LocalRun(job.spec, RunSettings(seed=seed))
    exporter = log = None
    try:
        if serving is not None:
            log = TensorBoardLog(serving.parent / f"tb-{serving.name}")
            exporter = ExportSchedule(serving, every, job.spec, log)
            exporter.start(run)
            log.start(run)
            run.hooks += [exporter, log]
        cpu = time.process_time()
        report = run.fit(None)
        cpu = time.process_time() - cpu
        out = {
            "round": seed,
            "exports_on": serving is not None,
            "samples": report["samples"],
            "samples_per_sec": report["samples_per_sec"],
            "cpu_s_per_1k_samples": cpu / report["samples"] * 1000,
            "rows": sum(run.rows_per_table().values()),
        }
        if exporter is not None:
            exporter.finish(run)
            exports = exporter.report()
            out["exports"] = {k: v for k, v in exports.items() if k != "records"}
            out["records"] = exports["records"]
            shutil.rmtree(scratch / "full", ignore_errors=True)  # the newest run's model, fully exported
            run.trained().export(scratch / "full")
        if log is not None:
            log.close()  # flushed: the curve is read back from the event files
            out["curve"] = tensorboard_curve(Path(log.logdir))
        return out
    finally:
        if log is not None:
            log.close()
        run.close()
        run.tables.close()


def tensorboard_curve(logdir: Path) -> Dict[str, List[List[float]]]:
    """The run's progressive AUC, samples/s and rows as TensorBoard holds them: {tag: [[seconds from the first
    write, step, value], ...]}, read back from the event files."""
    import tensorflow as tf

    points: Dict[str, List[List[float]]] = {}
    for path in sorted(logdir.rglob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag in ("progressive/auc", "samples_per_sec") or value.tag.startswith("rows/"):
                    scalar = float(tf.make_ndarray(value.tensor))
                    points.setdefault(value.tag, []).append([event.wall_time, float(event.step), scalar])
    start = min((p[0] for series in points.values() for p in series), default=0.0)
    return {tag: [[t - start, step, v] for t, step, v in series] for tag, series in points.items()}


def plot(curve: Dict[str, List[List[float]]], path: str) -> None:
    """Progressive AUC (left axis) and rows held, summed over tables (right axis), against minutes of the stream."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, auc_axis = plt.subplots(figsize=(8, 4))
    auc = curve.get("progressive/auc", [])
    auc_axis.plot([p[0] / 60 for p in auc], [p[2] for p in auc], color="tab:blue")
    auc_axis.set_xlabel("minutes of the stream")
    auc_axis.set_ylabel("progressive AUC (last 100k samples)", color="tab:blue")
    rows_axis = auc_axis.twinx()
    tables = [tag for tag in curve if tag.startswith("rows/")]
    if tables:
        times = [p[0] / 60 for p in curve[tables[0]]]
        rows = [sum(curve[tag][i][2] for tag in tables) / 1e6 for i in range(len(times))]
        rows_axis.plot(times, rows, color="tab:gray", linestyle="--")
    rows_axis.set_ylabel("rows held (millions)", color="tab:gray")
    auc_axis.set_title("bench_serving_delta: a drifting stream with exports every minute")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def apply_times(serving: Path, full: Path) -> Dict[str, Any]:
    """Seconds to load the base and to apply each delta in order (what a serving process pays for freshness),
    against loading a full SavedModel of the same model."""
    import tensorflow as tf

    start = time.perf_counter()
    m = tf.saved_model.load(str(serving / "base"))
    load_base = time.perf_counter() - start
    applied = []
    for delta in sorted(p for p in serving.iterdir() if p.name.startswith("delta-")):
        start = time.perf_counter()
        m.apply_delta(tf.constant(str(delta)))
        applied.append(time.perf_counter() - start)
    start = time.perf_counter()
    tf.saved_model.load(str(full))
    return {"load_base_s": load_base, "apply_s": applied, "load_full_export_s": time.perf_counter() - start}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=100.0, help="input seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--export-every", default="60s")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--plot", help="write the last run's progressive AUC and rows over time here (PNG)")
    parser.add_argument(
        "--apply",
        action="store_true",
        help="also time plain TensorFlow serving the last run: loading its base and applying each delta, against "
        "loading a full export of the last model",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    scratch = Path(tempfile.mkdtemp(prefix="bench-serving-delta-"))
    runs: List[Dict[str, Any]] = []
    ratios, cpu_ratios = [], []
    try:
        for r in range(args.rounds):
            rates, cpu = {}, {}
            for on in [False, True] if r % 2 == 0 else [True, False]:
                run = train(args.seconds, r, scratch / f"serving-{r}" if on else None, args.export_every, scratch)
                rates[on] = run["samples_per_sec"]
                cpu[on] = run["cpu_s_per_1k_samples"]
                if on and r == args.rounds - 1:
                    run["full_export_bytes"] = tree_bytes(scratch / "full")
                    if args.apply:
                        run["apply"] = apply_times(scratch / f"serving-{r}", scratch / "full")
                runs.append(run)
                print(json.dumps({k: v for k, v in run.items() if k not in ("records", "curve")}), flush=True)
            ratios.append(rates[True] / rates[False])
            cpu_ratios.append(cpu[True] / cpu[False])
        fresh = [rec["freshness_s"] for run in runs for rec in run.get("records", [])]
        every_s = float(args.export_every[:-1]) if args.export_every.endswith("s") else None
        # a full interval's deltas (the last delta of a run covers what is left after the last interval)
        sizes = [rec["bytes"] for run in runs for rec in run.get("records", [])[:-1]]
        last = [run for run in runs if run["exports_on"]][-1]
        summary = {
            "seconds_per_run": args.seconds,
            "rounds": args.rounds,
            "export_every": args.export_every,
            "samples_per_sec_off": [run["samples_per_sec"] for run in runs if not run["exports_on"]],
            "samples_per_sec_on": [run["samples_per_sec"] for run in runs if run["exports_on"]],
            "ratio_on_off": ratios,
            "ratio_median": statistics.median(ratios),
            "cpu_per_sample_on_off": cpu_ratios,
            "cpu_ratio_median": statistics.median(cpu_ratios),
            "deltas": len(fresh),
            "freshness_s": {"median": float(np.median(fresh)), "p99": float(np.percentile(fresh, 99))}
            if fresh
            else None,
            "cut_s": [rec["cut_s"] for run in runs for rec in run.get("records", [])],
            "delta_bytes_per_interval": float(np.mean(sizes)) if sizes else None,
            "delta_bytes_per_minute": float(np.mean(sizes)) * 60.0 / every_s if sizes and every_s else None,
            "full_bytes": last["exports"]["full_bytes"],
            "full_export_bytes": last.get("full_export_bytes"),
            "rows_at_end": last["rows"],
            "apply": last.get("apply"),
        }
        auc = [p[2] for p in last.get("curve", {}).get("progressive/auc", [])]
        summary["progressive_auc"] = (
            {"first": auc[0], "last": auc[-1], "min": min(auc), "max": max(auc), "points": len(auc)} if auc else None
        )
        print(json.dumps(summary, indent=2))
        if args.plot and last.get("curve"):
            plot(last["curve"], args.plot)
        if args.json:
            Path(args.json).write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
