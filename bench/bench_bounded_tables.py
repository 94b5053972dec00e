"""Benchmark: bounded tables (admission, eviction, a row cap) on a drifting stream of ids. Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_bounded_tables.py [--days 12] [--steps-per-day 150]
        [--batch 512] [--fields 8] [--ids-per-day 40000] [--dim 8] [--cap 60000] [--rounds 40] [--out DIR]
        [--plot]

The stream: each "day" draws its ids from a pool of which 20-40% (uniform per day) were never seen before, the rest
carried over from the previous day's pool; within a day ids are Zipf-distributed (exponent 1.1) over the pool. A
sample has ``--fields`` ids (one per field, each field its own id space) and a label drawn from a planted logistic
model (every id has a hidden weight from its hash), so there is signal to learn.

The model: sparse logistic regression on the table (Adagrad): logit = sum over the sample's rows of their first
float (the other ``--dim - 1`` floats ride along, as a wider embedding's would, so records have a realistic size);
the gradient of the log loss goes back by ``push``. Progressive AUC: every batch is scored before training on it,
and the AUC of all those scores is reported (and per day).

1. Rows, table bytes and process RSS after every day, for: unbounded; --cap (max_rows, lfu, a pass every 100
   steps); ``ttlN`` (rows not updated for N steps go); admission min_count 2, 3, 5 with the exact counter
   (``admitN``) or the count-min sketch (``sketchN``: 2^20 x 4 cells a table, 8 MiB, halved every day's steps);
   each in its own process (RSS is the process's). The progressive AUC is counted in 2^20 score bins (fixed memory,
   so the RSS is the table's and the bench's constant part; ties within a bin count half).
2. Cost of the rules: the same batches pushed alternately (chunks of 25 steps, order alternating every round) into
   a table without rules and one with Evict(ttl_steps = a year, every_steps=100): every push counts uses and
   last_step, a pass scans the table every 100 steps but frees nothing, so the tables hold the same rows. Cost =
   median over rounds of (rules seconds / plain seconds) - 1, with the spread of an A/A run (both without rules).
3. With --dlrm-rounds R: the same cost on the built-in DLRM step, the figure users see: R rounds of
   `xdl-ec train --synthetic` runs (order rotated each round) without rules (twice: the A/A floor), with
   --admit-min-count 2 (every push counts) and with --max-rows (a pass every 100 steps that evicts); per round the
   ratio of steady samples/s to the first run without rules. With --dlrm-interleave STEPS the four runs live in
   this one process instead (a LocalRun each, the same synthetic batches) and train in turns of STEPS steps, the
   order rotating every round: the machine's drift between whole runs, which swamps a 2% cost, falls out.

Every ratio is given as its median over rounds with a 95% bootstrap interval of that median.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from xdl_ec.sparse.row_rules import Admit, Evict
from xdl_ec.sparse.table import EmbeddingTable

FIELD_SPACE = 1 << 40  # ids of field f are f * FIELD_SPACE + local id


def hidden_weight(ids: np.ndarray) -> np.ndarray:
    """The planted model's weight of each id: a deterministic function of the id, mean 0, sd 0.6."""
    x = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    return (x.astype(np.float64) / float(1 << 24) - 0.5) * 2.0


class DriftingStream:
    """Batches (ids int64[batch, fields], labels float32[batch]) of the drifting stream described above."""

    def __init__(self, days: int, steps_per_day: int, batch: int, fields: int, ids_per_day: int, seed: int) -> None:
        self.days, self.steps_per_day, self.batch, self.fields = days, steps_per_day, batch, fields
        self.ids_per_day, self.seed = ids_per_day, seed

    def __iter__(self) -> Iterator[Tuple[int, np.ndarray, np.ndarray]]:
        rng = np.random.default_rng(self.seed)
        next_id = 0
        pool = np.arange(self.ids_per_day, dtype=np.int64)
        next_id = self.ids_per_day
        ranks = np.arange(1, self.ids_per_day + 1, dtype=np.float64) ** -1.1
        zipf = ranks / ranks.sum()
        for day in range(self.days):
            if day:
                fresh = int(self.ids_per_day * rng.uniform(0.2, 0.4))
                kept = rng.permutation(pool)[: self.ids_per_day - fresh]
                pool = np.concatenate([kept, np.arange(next_id, next_id + fresh, dtype=np.int64)])
                next_id += fresh
            order = rng.permutation(pool)  # which ids are popular today
            for _ in range(self.steps_per_day):
                local = order[rng.choice(self.ids_per_day, size=(self.batch, self.fields), p=zipf)]
                ids = local + np.arange(self.fields, dtype=np.int64) * FIELD_SPACE
                logit = hidden_weight(ids).sum(axis=1) * 0.8
                labels = (rng.random(self.batch) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
                yield day, ids, labels


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties averaged)."""
    order = np.argsort(scores, kind="mergesort")
    ranked = np.empty(scores.size)
    sorted_scores = scores[order]
    edges = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [scores.size]])
    for s, e in zip(starts, ends):
        ranked[order[s:e]] = (s + e + 1) / 2.0
    positive = labels > 0.5
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if not n_pos or not n_neg:
        return float("nan")
    return float((ranked[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


class StreamingAuc:
    """AUC of every score added so far in fixed memory: positives and negatives counted per score bin (``bins``
    equal bins of [0, 1]); pairs within one bin count half, as ties do."""

    def __init__(self, bins: int = 1 << 20) -> None:
        self.bins = bins
        self.positive = np.zeros(bins, dtype=np.int64)
        self.negative = np.zeros(bins, dtype=np.int64)

    def add(self, scores: np.ndarray, labels: np.ndarray) -> None:
        index = np.minimum((np.asarray(scores, dtype=np.float64) * self.bins).astype(np.int64), self.bins - 1)
        positive = np.asarray(labels) > 0.5
        self.positive += np.bincount(index[positive], minlength=self.bins)
        self.negative += np.bincount(index[~positive], minlength=self.bins)

    def auc(self) -> float:
        n_pos, n_neg = int(self.positive.sum()), int(self.negative.sum())
        below = np.cumsum(self.negative) - self.negative  # negatives in lower bins
        wins = (self.positive * (below + 0.5 * self.negative)).sum(dtype=np.float64)
        return float(wins / (n_pos * n_neg)) if n_pos and n_neg else float("nan")


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def make_table(kind: str, cap: int, dim: int, day_steps: int = 500) -> EmbeddingTable:
    rules: Dict[str, Any] = {}
    if kind == "cap":
        rules["evict"] = Evict(max_rows=cap, policy="lfu", every_steps=100)
    elif kind.startswith("ttl"):  # rows not updated for N steps go, a pass every 100 steps
        rules["evict"] = Evict(ttl_steps=int(kind[len("ttl") :]), every_steps=100)
    elif kind.startswith("admit"):
        rules["admit"] = Admit(min_count=int(kind[len("admit") :]))
    elif kind.startswith("sketch"):  # sized to a few times a day's distinct ids, halved daily
        rules["admit"] = Admit(
            min_count=int(kind[len("sketch") :]), counter="sketch", width=1 << 20, depth=4, decay_every_steps=day_steps
        )
    elif kind == "counting":  # words counted on every push, a (freeing nothing) pass every 100 steps
        rules["evict"] = Evict(ttl_steps=10**12, every_steps=100)
    elif kind == "counting-only":  # words counted on every push, no pass within the run
        rules["evict"] = Evict(ttl_steps=10**12, every_steps=10**9)
    elif kind != "plain":
        raise ValueError(f"unknown table kind {kind!r}")
    return EmbeddingTable("ids", dim, optimizer="adagrad", initializer="zeros", **rules)


def train_step(table: EmbeddingTable, ids: np.ndarray, labels: np.ndarray, step: int) -> np.ndarray:
    """Scores the batch (before training on it), then pushes the log-loss gradient; returns the scores."""
    flat = ids.reshape(-1)
    rows = table.pull(flat)
    logit = rows[:, 0].reshape(ids.shape).sum(axis=1)
    p = 1.0 / (1.0 + np.exp(-logit))
    grads = np.zeros_like(rows)
    grads[:, 0] = np.repeat((p - labels).astype(np.float32), ids.shape[1]) / ids.shape[0]
    table.push(flat, grads, step=step)
    return p


def run_kind(args: argparse.Namespace, kind: str) -> Dict[str, Any]:
    """One table kind over the whole stream: rows, bytes and RSS after each day, progressive AUC."""
    table = make_table(kind, args.cap, args.dim, args.steps_per_day)
    stream = DriftingStream(args.days, args.steps_per_day, args.batch, args.fields, args.ids_per_day, args.seed)
    days: List[Dict[str, Any]] = []
    progressive = StreamingAuc()
    day_scores: List[np.ndarray] = []
    day_labels: List[np.ndarray] = []
    current = 0
    start = time.perf_counter()

    def close_day(day: int) -> None:
        report = table.bounded_report() if table.config.bounded else None
        memory = table.memory_stats()
        days.append(
            {
                "day": day,
                "rows": int(report["rows"]) if report else len(table),
                "records": len(table),
                "bytes": int(memory["held_bytes"]),
                "rss": rss_bytes(),
                "auc_day": auc(np.concatenate(day_scores), np.concatenate(day_labels)),
                "report": report,
            }
        )

    for step, (day, ids, labels) in enumerate(stream, start=1):
        if day != current:
            close_day(current)
            day_scores.clear()
            day_labels.clear()
            current = day
        p = train_step(table, ids, labels, step)
        progressive.add(p, labels)
        day_scores.append(p)
        day_labels.append(labels)
    close_day(current)
    seconds = time.perf_counter() - start
    samples = args.days * args.steps_per_day * args.batch
    return {
        "kind": kind,
        "samples": samples,
        "seconds": seconds,
        "samples_per_sec": samples / seconds,
        "auc": progressive.auc(),
        "days": days,
    }


def run_cost(args: argparse.Namespace, rules_kind: str) -> Dict[str, Any]:
    """Interleaved chunks on the same batches: plain table vs ``rules_kind``; per-round time ratios."""
    plain, ruled = make_table("plain", args.cap, args.dim), make_table(rules_kind, args.cap, args.dim)
    stream = iter(DriftingStream(args.days, args.steps_per_day, args.batch, args.fields, args.ids_per_day, args.seed))
    ratios: List[float] = []
    step = 0
    for r in range(args.rounds):
        chunk = []
        for _ in range(args.chunk):
            try:
                chunk.append(next(stream))
            except StopIteration:
                break
        if len(chunk) < args.chunk:
            break
        timing = {}
        order = [("plain", plain), ("rules", ruled)]
        if r % 2:
            order.reverse()
        for name, table in order:
            t0 = time.perf_counter()
            for i, (_, ids, labels) in enumerate(chunk):
                train_step(table, ids, labels, step + i + 1)
            timing[name] = time.perf_counter() - t0
        step += len(chunk)
        ratios.append(timing["rules"] / timing["plain"])
    median, low, high = median_interval(ratios)
    ratios.sort()
    return {
        "rules": rules_kind,
        "rounds": len(ratios),
        "median_ratio": median,
        "ci95": [low, high],
        "p10": ratios[len(ratios) // 10],
        "p90": ratios[(9 * len(ratios)) // 10],
        "rows": [len(plain), len(ruled)],
    }


def summary(ratios: List[float], prefix: str = "") -> Dict[str, Any]:
    """``ratios`` with their median and its 95% interval, under keys ``{prefix}ratios / median / ci95``."""
    median, low, high = median_interval(ratios)
    return {f"{prefix}ratios": ratios, f"{prefix}median": median, f"{prefix}ci95": [low, high]}


def rotated(kinds: List[str], by: int) -> List[str]:
    """``kinds`` starting at index ``by`` (mod their count): each round's order of the interleaved runs."""
    by %= len(kinds)
    return kinds[by:] + kinds[:by]


def median_interval(ratios: List[float], seed: int = 0) -> Tuple[float, float, float]:
    """The median of ``ratios`` and a 95% bootstrap interval of it (2,000 resamples)."""
    values = np.asarray(ratios, dtype=np.float64)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(values, size=(2000, len(values))), axis=1)
    return float(np.median(values)), float(np.quantile(medians, 0.025)), float(np.quantile(medians, 0.975))


DLRM_RULES: Dict[str, Dict[str, Any]] = {  # TrainConfig fields; the runs in processes pass them as flags
    "plain": {},
    "plain-again": {},  # the A/A floor
    "counting": {"admit_min_count": 2},
    "sketch": {"admit_min_count": 2, "admit_counter": "sketch"},
    "cap": {"max_rows": "{cap}", "evict_every_steps": 100},
}
DLRM_KINDS: Dict[str, List[str]] = {
    kind: [a for field, value in rules.items() for a in ("--" + field.replace("_", "-"), str(value))]
    for kind, rules in DLRM_RULES.items()
}


def run_dlrm_cost(args: argparse.Namespace, out: Path) -> Dict[str, Any]:
    """Interleaved `xdl-ec train --synthetic` runs: each kind's steady samples/s over the round's plain run, and
    the seconds of the stages the rules touch (pull + push, from the report's stages) over the plain run's, and the
    run's CPU seconds (user + system, all of it: a loaded machine stretches wall time but less so CPU time)."""
    per_round: Dict[str, List[float]] = {k: [] for k in DLRM_KINDS if k != "plain"}
    stage_round: Dict[str, List[float]] = {k: [] for k in DLRM_KINDS if k != "plain"}
    cpu_round: Dict[str, List[float]] = {k: [] for k in DLRM_KINDS if k != "plain"}
    kinds = list(DLRM_KINDS)
    for r in range(args.dlrm_rounds):
        order = rotated(kinds, r)
        speed: Dict[str, float] = {}
        sparse: Dict[str, float] = {}
        cpu: Dict[str, float] = {}
        for kind in order:
            report = out / f"dlrm_{kind}.json"
            extra = [a.format(cap=args.dlrm_cap) for a in DLRM_KINDS[kind]]
            cmd = [sys.executable, "-P", "-m", "xdl_ec.cli", "train", "--synthetic", "--steps", str(args.dlrm_steps)]
            cmd += ["--batch-size", str(args.dlrm_batch), "--report", str(report), *extra]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(cmd, check=True, capture_output=True, env=os.environ.copy())
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[kind] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            done = json.loads(report.read_text())
            speed[kind] = float(done["steady_samples_per_sec"])
            sparse[kind] = float(done["stages"]["pull_s"] + done["stages"]["push_s"])
        for kind in per_round:
            per_round[kind].append(speed[kind] / speed["plain"])
            stage_round[kind].append(sparse[kind] / sparse["plain"])
            cpu_round[kind].append(cpu[kind] / cpu["plain"])
        print(
            f"dlrm round {r + 1}: samples/s, pull+push s, CPU s ratios "
            + ", ".join(
                f"{k} {v[-1]:.4f} {stage_round[k][-1]:.4f} {cpu_round[k][-1]:.4f}" for k, v in per_round.items()
            ),
            flush=True,
        )
    result: Dict[str, Any] = {"rounds": args.dlrm_rounds, "steps": args.dlrm_steps, "batch": args.dlrm_batch}
    for kind, ratios in per_round.items():
        result[kind] = {
            **summary(ratios),
            **summary(stage_round[kind], "pull_push_"),
            **summary(cpu_round[kind], "cpu_"),
        }
    return result


def run_dlrm_interleaved(args: argparse.Namespace) -> Dict[str, Any]:
    """The built-in DLRM step of every kind in this one process (a LocalRun each, the same synthetic batches),
    trained in turns of ``--dlrm-interleave`` steps, the order rotating every round: the kinds share the machine's
    state within a round (a few seconds), so its drift between whole runs falls out. Per round: each kind's
    samples/s over the plain run's, and its process CPU seconds over the plain run's (both over the same steps)."""
    from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job
    from xdl_ec.job.local_run import LocalRun
    from xdl_ec.ps.worker import RunSettings

    runs: Dict[str, Any] = {}
    speed: Dict[str, List[float]] = {k: [] for k in DLRM_RULES if k != "plain"}
    cpu: Dict[str, List[float]] = {k: [] for k in DLRM_RULES if k != "plain"}
    kinds = list(DLRM_RULES)
    try:  # the runs started so far are closed whatever fails
        for kind, rules in DLRM_RULES.items():
            config = TrainConfig(
                synthetic=True,
                synthetic_rows=args.dlrm_rows,
                batch_size=args.dlrm_batch,
                seed=args.seed,
                progress=False,
                **{k: args.dlrm_cap if v == "{cap}" else v for k, v in rules.items()},
            )
            runs[kind] = LocalRun(criteo_job(config).spec, RunSettings(seed=args.seed))
            runs[kind].fit(args.dlrm_interleave)  # warm: TF traces, first allocations
        for r in range(args.dlrm_rounds):
            order = rotated(kinds, r)
            wall: Dict[str, float] = {}
            used: Dict[str, float] = {}
            for kind in order:
                c0, t0 = time.process_time(), time.perf_counter()
                runs[kind].fit(args.dlrm_interleave)
                wall[kind], used[kind] = time.perf_counter() - t0, time.process_time() - c0
            for kind in speed:
                speed[kind].append(wall["plain"] / wall[kind])
                cpu[kind].append(used[kind] / used["plain"])
            if (r + 1) % 10 == 0:
                print(f"dlrm interleaved round {r + 1}/{args.dlrm_rounds}", flush=True)
        rows = {kind: run.rows_per_table() for kind, run in runs.items()}
    finally:
        for run in runs.values():
            run.close()
    result: Dict[str, Any] = {
        "rounds": args.dlrm_rounds,
        "steps_per_turn": args.dlrm_interleave,
        "batch": args.dlrm_batch,
        "rows": rows,
    }
    for kind in speed:
        result[kind] = {**summary(speed[kind]), **summary(cpu[kind], "cpu_")}
    return result


def plot(results: List[Dict[str, Any]], path: Path) -> Optional[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for r in results:
        days = [d["day"] for d in r["days"]]
        axes[0].plot(days, [d["rows"] for d in r["days"]], marker="o", label=r["kind"])
        axes[1].plot(days, [d["bytes"] / 2**20 for d in r["days"]], marker="o", label=r["kind"])
        axes[2].plot(days, [d["rss"] / 2**20 for d in r["days"]], marker="o", label=r["kind"])
    axes[0].set(xlabel="day", ylabel="rows", title="rows after each day")
    axes[1].set(xlabel="day", ylabel="MiB", title="table bytes held after each day")
    axes[2].set(xlabel="day", ylabel="RSS (MiB)", title="process RSS after each day")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path)
    return str(path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--days", type=int, default=12)
    p.add_argument("--steps-per-day", type=int, default=150)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--fields", type=int, default=8)
    p.add_argument("--ids-per-day", type=int, default=40000)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--cap", type=int, default=60000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--chunk", type=int, default=25)
    p.add_argument("--kinds", default="plain,cap,admit2,admit3,admit5")
    p.add_argument("--out", default="bench-results/bounded_tables")
    p.add_argument("--plot", action="store_true")
    p.add_argument("--cost-only", action="store_true", help="only the interleaved cost runs")
    p.add_argument("--dlrm-rounds", type=int, default=0, help="rounds of the DLRM cost runs (0: none)")
    p.add_argument("--dlrm-steps", type=int, default=600)
    p.add_argument("--dlrm-batch", type=int, default=256)
    p.add_argument("--dlrm-cap", type=int, default=60000, help="--max-rows of the DLRM cap runs")
    p.add_argument("--dlrm-only", action="store_true", help="only the DLRM cost runs")
    p.add_argument(
        "--dlrm-interleave",
        type=int,
        default=0,
        metavar="STEPS",
        help="run the DLRM kinds in this one process, in turns of STEPS steps (0: a process per run)",
    )
    p.add_argument("--dlrm-rows", type=int, default=400_000, help="synthetic rows of the interleaved DLRM runs")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one kind in this process, print its JSON
    args = p.parse_args()
    if args.one:
        print(json.dumps(run_kind(args, args.one)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = [a for a in sys.argv[1:] if a != "--plot"]
    results = []
    for kind in [] if args.cost_only or args.dlrm_only else args.kinds.split(","):
        done = subprocess.run(
            [sys.executable, "-P", __file__, *base, "--one", kind],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ.copy(),
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        results.append(result)
        last = result["days"][-1]
        print(
            f"{kind:8s} rows {last['rows']:>9,} records {last['records']:>9,} bytes {last['bytes'] / 2**20:7.1f} MiB "
            f"RSS {last['rss'] / 2**20:7.1f} MiB  progressive AUC {result['auc']:.4f}  "
            f"{result['samples_per_sec']:,.0f} samples/s",
            flush=True,
        )
    costs = {} if args.dlrm_only else {kind: run_cost(args, kind) for kind in ("counting", "counting-only", "plain")}
    for kind, what in (
        []
        if args.dlrm_only
        else (
            ("counting", "counting + a pass every 100 steps"),
            ("counting-only", "counting alone"),
            ("plain", "A/A (both without rules)"),
        )
    ):
        c = costs[kind]
        print(
            f"{what}: median time ratio {c['median_ratio']:.4f} (95% CI {c['ci95'][0]:.4f}-{c['ci95'][1]:.4f}, "
            f"p10 {c['p10']:.4f}, p90 {c['p90']:.4f}, {c['rounds']} rounds)"
        )
    dlrm = None
    if args.dlrm_rounds:
        dlrm = run_dlrm_interleaved(args) if args.dlrm_interleave else run_dlrm_cost(args, out)
    if dlrm:
        for kind in [k for k in DLRM_RULES if k != "plain"]:
            d = dlrm[kind]
            stages = (
                f"pull+push seconds ratio {d['pull_push_median']:.4f} (95% CI {d['pull_push_ci95'][0]:.4f}-"
                f"{d['pull_push_ci95'][1]:.4f}), "
                if "pull_push_median" in d
                else ""
            )
            print(
                f"DLRM {kind}: median samples/s ratio {d['median']:.4f} "
                f"(95% CI {d['ci95'][0]:.4f}-{d['ci95'][1]:.4f}), {stages}CPU seconds ratio {d['cpu_median']:.4f} "
                f"(95% CI {d['cpu_ci95'][0]:.4f}-{d['cpu_ci95'][1]:.4f}), {dlrm['rounds']} rounds"
            )
    report = {"args": vars(args), "runs": results, "cost": costs, "dlrm_cost": dlrm}
    (out / "bounded_tables.json").write_text(json.dumps(report, indent=1))
    if args.plot:
        drawn = plot(results, out / "bounded_tables.png")
        if drawn:
            print(f"plot: {drawn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
