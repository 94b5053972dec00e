"""BenchRunner: the ``xdl-ec bench`` matrix: one model, data set, seed and failure schedule trained under
every fault-tolerance strategy, each through the same code path (a :class:`Workload`: the built-in model or a
``--script`` job, a ClusterConfig, a strategy from :func:`strategy_for` and a
:class:`~xdl_ec.ft.failure_schedule.FailureSchedule`, trained by
:func:`train_once` on :class:`xdl_ec.ps.PSTrainer`).

Every strategy gets the same (step, server) kills, drawn from the failure-free ``none`` reference's timeline as
``--mtbf`` draws them, and a kill never lands inside an ``ec`` rebuild
(:class:`~xdl_ec.benchmark.after_rebuild_schedule.AfterRebuildSchedule`), so strategies are compared on the same
failures at the same points of training; :func:`summarize` measures each run. The schedule's rules and the
measures in full: docs/design/bench.md.

A strategy missing from this build, or a run that fails, gets a row saying so, never numbers.
"""

from __future__ import annotations

import dataclasses
import math
import os
import resource
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from xdl_ec.settings import checks

BACKENDS = ("local", "ray")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of the matrix: a label, the ``--ft`` strategy and its flags (``code``, ``cpr_mode``...)."""

    label: str
    ft: str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


MATRIX: Tuple[Variant, ...] = (
    Variant("none", "none"),
    Variant("ckpt", "ckpt", {"ckpt_interval": "auto"}),
    Variant("cpr-mfu", "cpr", {"cpr_mode": "mfu"}),
    Variant("cpr-ssu", "cpr", {"cpr_mode": "ssu"}),
    Variant("ec-2+1", "ec", {"code": "2,1"}),
    Variant("ec-4+1", "ec", {"code": "4,1"}),
    Variant("ec-4+2", "ec", {"code": "4,2"}),
)
REFERENCE = "none"


@dataclasses.dataclass(frozen=True)
class Preset:
    """Size of a bench run. ``servers`` is k + r of the widest code (every strategy runs on the same cluster)."""

    synthetic_rows: int
    batch_size: int
    epochs: int
    servers: int
    workers: int
    min_gap: int  # steps between two kills, at least


PRESETS: Dict[str, Preset] = {
    "quick": Preset(synthetic_rows=8_000, batch_size=128, epochs=1, servers=6, workers=1, min_gap=4),
    "default": Preset(synthetic_rows=120_000, batch_size=256, epochs=1, servers=6, workers=1, min_gap=10),
}


@dataclasses.dataclass
class BenchConfig:
    """The flags of ``xdl-ec bench``. ``data`` None: synthetic Criteo-shaped data of the preset's size;
    ``variants``: labels of :data:`MATRIX` to run (None: all; the reference always runs)."""

    quick: bool = False
    out: str = "bench-results"
    backend: str = "local"
    data: Optional[str] = None
    mtbf: Optional[float] = None
    seed: int = 0
    progress: bool = True
    variants: Optional[Sequence[str]] = None
    rebuild_share: Optional[float] = None  # ec rows: share of wall time a rebuild may take (None: the default)
    job: Any = None  # an xdl_ec.Job to bench instead of the built-in model (``xdl-ec bench --script``)
    sweep_mtbf: Optional[Sequence[float]] = None  # MTBFs in seconds: the sweep (xdl_ec.benchmark.mtbf_sweep)
    rounds: int = 3  # the sweep's rounds per MTBF and strategy

    @property
    def preset(self) -> Preset:
        return PRESETS["quick" if self.quick else "default"]

    def validate(self) -> None:
        """ValueError naming the first bad field and what to do."""
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.data is not None and not Path(self.data).is_file():
            raise ValueError(f"data: no such file: {self.data} (give a Criteo TSV file, or omit it for synthetic data)")
        if self.mtbf is not None and (
            isinstance(self.mtbf, bool)
            or not isinstance(self.mtbf, (int, float))
            or not math.isfinite(self.mtbf)
            or self.mtbf <= 0
        ):
            raise ValueError(f"mtbf: must be a positive number of seconds, got {self.mtbf!r}")
        if self.sweep_mtbf is not None:
            if self.mtbf is not None:
                raise ValueError("mtbf: a sweep draws its kills at each --sweep-mtbf value; drop --mtbf")
            bad = [
                m
                for m in self.sweep_mtbf
                if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m <= 0
            ]
            if bad or not self.sweep_mtbf:
                raise ValueError(
                    f"sweep_mtbf: give positive numbers of seconds like 10,30,120, got {list(self.sweep_mtbf)!r}"
                )
            if len(set(self.sweep_mtbf)) != len(self.sweep_mtbf):
                raise ValueError(f"sweep_mtbf: each MTBF once, got {list(self.sweep_mtbf)!r}")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise ValueError(f"rounds: must be a positive integer, got {self.rounds!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: must be a non-negative integer, got {self.seed!r}")
        out = Path(self.out)
        if out.exists() and not out.is_dir():
            raise ValueError(f"out: {self.out} exists and is not a directory; pick another --out")
        if self.rebuild_share is not None:
            checks.number("rebuild_share", self.rebuild_share, 0.0, 1.0, low_open=True)
        if self.variants is not None:
            known = [v.label for v in MATRIX]
            unknown = [v for v in self.variants if v not in known]
            if unknown:
                raise ValueError(f"variants: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(known)}")

    def workload(self) -> "Workload":
        """What every row trains: the job given, or the built-in model at the preset's size."""
        if self.job is not None:
            return Workload(self.job.spec, self.seed, {"job": self.job.spec.describe()})
        return Workload.built_in(self.train_config())

    def train_config(self) -> Any:
        from xdl_ec.builtin.criteo_job import TrainConfig

        p = self.preset
        return TrainConfig(
            data=self.data,
            synthetic=self.data is None,
            synthetic_rows=p.synthetic_rows,
            batch_size=p.batch_size,
            epochs=p.epochs,
            seed=self.seed,
            deterministic=True,
            on_bad_line="skip",
            progress=self.progress,
        )

    def cluster_config(self) -> Any:
        from xdl_ec.ps import ClusterConfig

        p = self.preset
        return ClusterConfig(servers=p.servers, workers=p.workers, backend=self.backend, mode="sync")


# ---- failure schedule --------------------------------------------------------------------------------------------
def failure_steps(
    timeline: Sequence[Sequence[float]], mtbf: float, seed: int, servers: int, total_steps: int, min_gap: int
) -> List[Tuple[int, int, float]]:
    """(step, server, seconds) kills of the ``mtbf`` schedule over the reference ``timeline`` (see the module doc):
    seconds counted from the end of the first step; steps ascending, >= 2, at least ``min_gap`` apart, <= total."""
    import numpy as np

    if not timeline:
        return []
    start, end = timeline[0][1], timeline[-1][1]
    rng = np.random.default_rng(seed)
    kills: List[Any] = []
    t, last = 0.0, 1 - min_gap
    while True:
        t += float(rng.exponential(mtbf))
        server = int(rng.integers(servers))
        if start + t > end:
            return kills
        running = next(int(row[0]) for row in timeline if row[1] >= start + t)
        step = max(running + 1, last + min_gap, 2)
        if step > total_steps:
            return kills
        kills.append((step, server, t))
        last = step


# ---- peak memory -------------------------------------------------------------------------------------------------
def reset_peak_rss() -> bool:
    """Resets this process's peak RSS (Linux ``clear_refs`` 5); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """Peak RSS of this process since the last reset (VmHWM), else since it started (ru_maxrss)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---- one run -----------------------------------------------------------------------------------------------------
def strategy_for(
    variant: Variant,
    cluster: Any,
    mtbf: Optional[float],
    seed: int,
    rebuild_share: Optional[float] = None,
    rebuild: Optional[str] = None,
) -> Any:
    """The strategy of a matrix row (``mtbf`` feeds ckpt's and cpr's intervals; ``rebuild_share`` and ``rebuild``
    set ec's rebuild, None: its defaults)."""
    from xdl_ec.ft.factory import make_strategy
    from xdl_ec.job.cluster import Cluster

    options = dict(variant.options)
    if variant.ft == "ec":
        options.update({k: v for k, v in (("rebuild_share", rebuild_share), ("rebuild", rebuild)) if v is not None})
    config = Cluster(
        servers=cluster.servers,
        workers=cluster.workers,
        backend=cluster.backend,
        ft=variant.ft,
        mtbf=mtbf if variant.ft in ("ckpt", "cpr") else None,
        **options,
    ).strategy_config(seed)
    return make_strategy(config)


@dataclasses.dataclass(frozen=True)
class Workload:
    """What the bench trains: a job (its JobSpec), the seed, a description for the results, and for the built-in
    model its TrainConfig (None for a --script job)."""

    job: Any
    seed: int
    config: Dict[str, Any]
    train: Any = None

    @classmethod
    def built_in(cls, train: Any) -> "Workload":
        """The built-in model of a :class:`~xdl_ec.builtin.criteo_job.TrainConfig`."""
        from xdl_ec.builtin.criteo_job import criteo_job, open_training_data

        return cls(
            criteo_job(train).spec,
            train.seed,
            {**train.describe(), "data_source": open_training_data(train).description},
            train,
        )


def train_once(
    workload: Workload, cluster: Any, strategy: Any = None, schedule: Any = None, steps: Optional[int] = None
) -> Dict[str, Any]:
    """``workload`` on ``cluster`` (deterministic) under ``strategy`` and the kills of ``schedule`` (a
    FailureSchedule), for at most ``steps`` steps: the run's report with its model_digest and cluster figures."""
    from xdl_ec.ft.failure_injector import FailureInjector
    from xdl_ec.ps import PSTrainer, RunSettings

    injector = None if schedule is None else FailureInjector(schedule)
    job = workload.job
    trainer = PSTrainer(job, cluster, RunSettings(workload.seed, True), strategy, injector)
    try:
        report = trainer.fit(steps)
        if job.eval_fn is not None:
            report.update(trainer.evaluate(job.eval_fn()))
        report["model_digest"] = trainer.digest()
        report.update(trainer.report())
    finally:
        trainer.close()
    report["config"] = workload.config
    return report


def run_variant(
    variant: Variant,
    workload: Workload,
    cluster: Any,
    kills: Sequence[Tuple[int, int, float]],
    mtbf: Optional[float],
    seed: int,
    rebuild_share: Optional[float] = None,
    steps: Optional[int] = None,
) -> Dict[str, Any]:
    """Trains ``variant`` with the kills: ``{"label", "ft", "status": "ok", "report", "peak_rss_bytes", ...}``, or
    status ``unavailable`` (the strategy is not in this build) or ``failed`` (the run raised) with the error.
    ``rebuild_share``: ec's rebuild rate limit (None: the strategy's default)."""
    from xdl_ec.benchmark.after_rebuild_schedule import AfterRebuildSchedule

    row: Dict[str, Any] = {"label": variant.label, "ft": variant.ft, "options": dict(variant.options)}
    try:
        strategy = strategy_for(variant, cluster, mtbf, seed, rebuild_share)
    except (ValueError, ImportError) as err:
        return {**row, "status": "unavailable", "error": str(err)}
    schedule = AfterRebuildSchedule(kills, seed, strategy)
    exact_rss = reset_peak_rss()
    started = time.perf_counter()
    try:
        report = train_once(workload, cluster, strategy, schedule, steps)
    except Exception as err:  # noqa: BLE001 - any failure of the run becomes its row, the matrix goes on
        return {
            **row,
            "status": "failed",
            "error": f"{type(err).__name__}: {err}",
            "seconds": time.perf_counter() - started,
        }
    return {
        **row,
        "status": "ok",
        "report": report,
        "seconds": time.perf_counter() - started,
        "kills_after_rebuild": list(schedule.waited),
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_rss_exact": exact_rss,
    }


# ---- measures ----------------------------------------------------------------------------------------------------
def _failure_windows(report: Mapping[str, Any]) -> List[Tuple[float, float]]:
    """(start, end) seconds of each failure: from its injected kill through detection and rebuild."""
    windows = []
    injected = list(report.get("injected", []))
    for failure in report.get("failures", []):
        kill = next((k for k in injected if k["step"] == failure["step"] and k["index"] == failure["index"]), None)
        if kill is None:
            continue
        injected.remove(kill)
        windows.append((kill["seconds"], kill["seconds"] + failure["detect_seconds"] + failure["rebuild_seconds"]))
    return windows


def normal_samples_per_sec(report: Mapping[str, Any]) -> Optional[float]:
    """Samples/s over the steps after the first that overlap no failure window (see :func:`_failure_windows`)."""
    timeline = report.get("timeline") or []
    windows = _failure_windows(report)
    samples = seconds = 0.0
    for prev, row in zip(timeline, timeline[1:]):
        t0, t1 = prev[1], row[1]
        if any(t0 < w1 and w0 < t1 for w0, w1 in windows):
            continue
        samples += row[2] - prev[2]
        seconds += t1 - t0
    return samples / seconds if seconds > 0 and samples > 0 else None


def steady_seconds(report: Mapping[str, Any]) -> Optional[float]:
    """Training seconds after the first step (which traces the model, the same work for every strategy)."""
    timeline = report.get("timeline") or []
    if not timeline:
        return None
    return report["train_seconds"] - timeline[0][1]


def stored_bytes(report: Mapping[str, Any]) -> Tuple[str, int]:
    """("parity" | "checkpoint" | "", bytes) a strategy keeps for recovery."""
    if report.get("parity_bytes"):
        return "parity", int(report["parity_bytes"])
    for key in ("checkpoint", "cpr"):
        if isinstance(report.get(key), dict) and report[key].get("bytes") is not None:
            return "checkpoint", int(report[key]["bytes"])
    return "", 0


def summarize(row: Mapping[str, Any], reference: Mapping[str, Any]) -> Dict[str, Any]:
    """The table's measures of one successful row against the reference row's report."""
    rep, ref = row["report"], reference["report"]
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    failures = [f for f in rep.get("failures", []) if f.get("role") == "server"]
    during = [
        f["samples_per_sec_during_rebuild"] for f in failures if f.get("samples_per_sec_during_rebuild") is not None
    ]
    mine, theirs = steady_seconds(rep), steady_seconds(ref)
    kind, nbytes = stored_bytes(rep)
    return {
        "samples_per_sec_normal": normal_samples_per_sec(rep),
        "overhead": mine / theirs - 1.0 if mine is not None and theirs else None,
        "failures": len(failures),
        "detect_seconds_mean": mean([f["detect_seconds"] for f in failures]),
        "rebuild_seconds_mean": mean([f["rebuild_seconds"] for f in failures]),
        # None when the strategy recovers inside the step loop: training waits for it (0 samples/s meanwhile)
        "samples_per_sec_during_rebuild": mean(during),
        "training_paused_during_rebuild": bool(failures) and not during,
        "lost_samples": int(rep.get("lost_samples", 0)),
        "logloss": rep.get("logloss"),
        "auc": rep.get("auc"),
        "stored_kind": kind,
        "stored_bytes": nbytes,
        "peak_rss_bytes": row.get("peak_rss_bytes"),
        "same_model_as_reference": rep.get("model_digest") == ref.get("model_digest"),
    }


# ---- the matrix --------------------------------------------------------------------------------------------------
def run_bench(config: BenchConfig, log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Runs the matrix, writes results.json, results.md and the PNG plots into ``config.out``; returns the results.
    ValueError names a bad config field (nothing is run or written then)."""
    from tqdm import tqdm

    from xdl_ec.benchmark import plots, table

    config.validate()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    workload, cluster = config.workload(), config.cluster_config()
    variants = [v for v in MATRIX if config.variants is None or v.label == REFERENCE or v.label in config.variants]
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: List[Dict[str, Any]] = []
    quiet_tensorflow()
    bar = tqdm(total=len(variants) + 1, unit="run", disable=not config.progress, dynamic_ncols=True)
    try:
        # A short unreported run first: the first run in a process pays one-time costs (imports, allocator
        # growth, graph caches) that would otherwise count against the reference alone
        bar.set_description("warm-up")
        run_variant(
            variants[0],
            workload,
            cluster,
            (),
            config.mtbf,
            config.seed,
            steps=min(20, max(2, config.preset.min_gap * 3)),
        )
        bar.update(1)
        bar.set_description(REFERENCE)
        reference = run_variant(variants[0], workload, cluster, (), config.mtbf, config.seed)
        bar.update(1)
        if reference["status"] != "ok":
            raise RuntimeError(f"the reference run ({REFERENCE}, no failures) failed: {reference.get('error')}")
        ref_report = reference["report"]
        timeline = ref_report["timeline"]
        after_first = timeline[-1][1] - timeline[0][1] if timeline else 0.0
        mtbf = config.mtbf if config.mtbf is not None else max(after_first / 3.0, 1e-3)
        kills = failure_steps(timeline, mtbf, config.seed, cluster.servers, ref_report["steps"], config.preset.min_gap)
        log(
            f"xdl-ec bench: reference ({REFERENCE}) trained {ref_report['samples']:,} samples in "
            f"{ref_report['train_seconds']:.2f} s; MTBF {mtbf:.2f} s{'' if config.mtbf else ' (auto)'} -> "
            f"{len(kills)} server kills at steps {', '.join(f'{s}:{i}' for s, i, _ in kills) or '(none)'}"
        )
        rows.append(reference)
        for variant in variants[1:]:
            bar.set_description(variant.label)
            row = run_variant(variant, workload, cluster, kills, mtbf, config.seed, config.rebuild_share)
            bar.update(1)
            if row["status"] != "ok":
                log(f"xdl-ec bench: {variant.label}: {row['status']}: {row['error']}")
            rows.append(row)
    finally:
        bar.close()
    for row in rows:
        if row["status"] == "ok":
            row["summary"] = summarize(row, reference)
    results = {
        "preset": "quick" if config.quick else "default",
        "backend": config.backend,
        "data": ref_report["config"].get("data_source", "the job's input_fn"),
        "seed": config.seed,
        "mtbf_seconds": mtbf,
        "mtbf_auto": config.mtbf is None,
        "rebuild_share": config.rebuild_share,
        "failure_schedule": [{"step": s, "server": i, "seconds_after_first_step": t} for s, i, t in kills],
        "train": workload.config,
        "cluster": dataclasses.asdict(cluster),
        "machine": machine(),
        "reference": REFERENCE,
        "rows": rows,
    }
    table.write_results(results, out)
    plots.plot_throughput(results, out / "throughput.png")
    plots.plot_losses(results, out / "loss.png")
    return results


def quiet_tensorflow() -> None:
    """Every run builds and traces a fresh model: TF's retracing warnings say nothing about the bench."""
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")


def machine() -> Dict[str, Any]:
    """Where the bench ran (for the README's table)."""
    import platform

    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
    }
