"""MtbfSweep: ``xdl-ec bench --sweep-mtbf S1,S2,...``: every strategy at every mean time between failures, over
``rounds`` rounds, each point against a failure-free run of the same round.

One failure-free run first places the kills (drawn as the bench draws them, with a seed of each round and MTBF).
Then for each round and MTBF, in an order that rotates from one to the next: the failure-free ``none`` reference,
each strategy under that round's kills, and a second failure-free ``none`` run, whose "overhead" against the
reference is the method's noise floor (A/A) at that point. A run's overhead is its training time after the first
step over the reference's, minus one (:func:`~xdl_ec.benchmark.runner.summarize`); its CPU overhead the same for
this process's CPU seconds over the run (servers included on the local backend), steadier on a loaded machine.

Written into --out: ``results.json`` (``"sweep"``: one entry per MTBF and strategy; ``"runs"``: every run;
``"fleet"``: the extrapolation), ``results.md``, ``mtbf.png`` and ``plan-constants.json`` (what ``xdl-ec plan``
reads: the fitted cost of each strategy and the row memory measured before training)."""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple

from xdl_ec.benchmark.runner import (
    MATRIX,
    REFERENCE,
    BenchConfig,
    Variant,
    failure_steps,
    machine,
    quiet_tensorflow,
    run_variant,
    steady_seconds,
    summarize,
)

# The default rows of a sweep: one of each strategy (the widest ec code would need more servers per failure)
SWEEP_LABELS = ("ckpt", "cpr-mfu", "ec-2+1")
AA_LABEL = "none (A/A)"
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def interval(values: Sequence[float]) -> Tuple[float, float]:
    """The 95% t-interval of the mean of ``values`` ((v, v) for one value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / len(values) ** 0.5
    return mean - half, mean + half


def sweep_labels(config: BenchConfig) -> List[str]:
    """The strategies a sweep runs: ``--only``'s (the reference left out), else :data:`SWEEP_LABELS`."""
    if config.variants:
        return [v for v in config.variants if v != REFERENCE]
    return list(SWEEP_LABELS)


def _run_record(
    row: Mapping[str, Any], reference: Mapping[str, Any], label: str, mtbf: float, rnd: int
) -> Dict[str, Any]:
    """One run of the sweep, measured against its round's reference."""
    record: Dict[str, Any] = {"round": rnd, "mtbf_s": mtbf, "strategy": label, "status": row["status"]}
    if row["status"] != "ok":
        return {**record, "error": row.get("error")}
    s = summarize(row, reference)
    ref_auc, auc = reference["report"].get("auc"), s["auc"]
    ref_seconds = steady_seconds(reference["report"]) or 0.0
    return {
        **record,
        "overhead": s["overhead"],
        "cpu_overhead": row["cpu_seconds"] / reference["cpu_seconds"] - 1.0,
        "failures": s["failures"],
        "failures_per_second": s["failures"] / ref_seconds if ref_seconds > 0 else 0.0,
        "reference_seconds": ref_seconds,
        "lost_samples": s["lost_samples"],
        "auc_delta": auc - ref_auc if auc is not None and ref_auc is not None else None,
        "model_equal": s["same_model_as_reference"],
        "rebuild_seconds_mean": s["rebuild_seconds_mean"],
        "save_seconds": (row["report"].get("checkpoint") or {}).get("save_seconds"),
        "samples_per_sec_normal": s["samples_per_sec_normal"],
        "peak_rss_bytes": s["peak_rss_bytes"],
    }


def aggregate(runs: Sequence[Mapping[str, Any]], mtbfs: Sequence[float], labels: Sequence[str]) -> List[Dict[str, Any]]:
    """The results' ``sweep``: per MTBF and strategy, the mean overhead over rounds with its 95% interval, mean
    lost samples and AUC delta, and whether every round's model equalled its reference's."""
    out = []
    for mtbf in mtbfs:
        for label in labels:
            mine = [r for r in runs if r["mtbf_s"] == mtbf and r["strategy"] == label]
            ok = [r for r in mine if r["status"] == "ok" and r["overhead"] is not None]
            entry: Dict[str, Any] = {"mtbf_s": mtbf, "strategy": label, "rounds": len(ok)}
            if not ok:
                errors = sorted({str(r.get("error")) for r in mine})
                out.append(
                    {
                        **entry,
                        "overhead": None,
                        "overhead_ci": None,
                        "lost_samples": None,
                        "auc_delta": None,
                        "model_equal": None,
                        "error": "; ".join(errors),
                    }
                )
                continue
            deltas = [r["auc_delta"] for r in ok if r["auc_delta"] is not None]
            out.append(
                {
                    **entry,
                    "overhead": statistics.fmean(r["overhead"] for r in ok),
                    "overhead_ci": list(interval([r["overhead"] for r in ok])),
                    "cpu_overhead": statistics.fmean(r["cpu_overhead"] for r in ok),
                    "lost_samples": statistics.fmean(r["lost_samples"] for r in ok),
                    "auc_delta": statistics.fmean(deltas) if deltas else None,
                    "model_equal": all(r["model_equal"] for r in ok),
                    "failures": statistics.fmean(r["failures"] for r in ok),
                }
            )
    return out


def run_sweep(config: BenchConfig, log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Runs the sweep (see the module doc), writes its files into ``config.out``; returns the results."""
    from xdl_ec.benchmark import plots
    from xdl_ec.benchmark.fleet_extrapolation import fleet_extrapolation
    from xdl_ec.benchmark.row_memory_probe import measure_row_memory
    from xdl_ec.benchmark.sweep_constants import sweep_constants
    from xdl_ec.benchmark.sweep_report import write_sweep

    config.validate()
    if not config.sweep_mtbf:
        raise ValueError("sweep_mtbf: give at least one MTBF in seconds")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    labels = sweep_labels(config)
    by_label: Dict[str, Variant] = {v.label: v for v in MATRIX}
    none = by_label[REFERENCE]
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    row_memory = measure_row_memory()  # before any training: the process holds no tables yet
    workload, cluster = config.workload(), config.cluster_config()
    quiet_tensorflow()
    started = time.perf_counter()
    # an unreported run first, as run_bench does: one-time costs must not land on the first reference
    run_variant(none, workload, cluster, (), None, config.seed, steps=min(20, max(2, config.preset.min_gap * 3)))
    # the kills of every round come from one failure-free timeline, so the reference itself can take its turn
    # at every position of a round: no run is always first after another round's last
    schedule = run_variant(none, workload, cluster, (), None, config.seed)
    if schedule["status"] != "ok":
        raise RuntimeError(f"the reference run ({REFERENCE}, no failures) failed: {schedule.get('error')}")
    timeline, total = schedule["report"]["timeline"], schedule["report"]["steps"]
    runs: List[Dict[str, Any]] = []
    references: List[Dict[str, Any]] = []
    for rnd in range(config.rounds):
        for m, mtbf in enumerate(config.sweep_mtbf):
            kills = failure_steps(
                timeline, mtbf, config.seed + 1000 * rnd + m, cluster.servers, total, config.preset.min_gap
            )
            order = [REFERENCE] + labels + [AA_LABEL]
            shift = (rnd * len(config.sweep_mtbf) + m) % len(order)
            rows: Dict[str, Dict[str, Any]] = {}
            for label in order[shift:] + order[:shift]:
                cpu = time.process_time()
                if label in (REFERENCE, AA_LABEL):
                    rows[label] = run_variant(none, workload, cluster, (), mtbf, config.seed)
                else:
                    variant = by_label[label]
                    rows[label] = run_variant(
                        variant, workload, cluster, kills, mtbf, config.seed, config.rebuild_share
                    )
                rows[label]["cpu_seconds"] = time.process_time() - cpu
            reference = rows[REFERENCE]
            if reference["status"] != "ok":
                raise RuntimeError(f"the reference run ({REFERENCE}, no failures) failed: {reference.get('error')}")
            references.append(reference)
            group = [_run_record(rows[label], reference, label, mtbf, rnd) for label in labels + [AA_LABEL]]
            runs.extend(group)
            for record in group:
                if record["status"] != "ok":
                    log(f"xdl-ec bench: round {rnd + 1} MTBF {mtbf:g} s {record['strategy']}: {record['error']}")
            log(
                f"xdl-ec bench: round {rnd + 1}/{config.rounds}, MTBF {mtbf:g} s: {len(kills)} kills; "
                + ", ".join(
                    f"{r['strategy']} {100 * r['overhead']:+.1f}% (CPU {100 * r['cpu_overhead']:+.1f}%)"
                    for r in group
                    if r["status"] == "ok" and r["overhead"] is not None
                )
            )
    constants = sweep_constants(config, workload, runs, references, labels, row_memory, load_start)
    constants.write(out / "plan-constants.json")
    results = {
        "preset": "quick" if config.quick else "default",
        "backend": config.backend,
        "seed": config.seed,
        "rounds": config.rounds,
        "mtbf_s": list(config.sweep_mtbf),
        "strategies": labels,
        "train": workload.config,
        "cluster": dataclasses.asdict(cluster),
        "machine": machine(),
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "seconds": time.perf_counter() - started,
        "sweep": aggregate(runs, config.sweep_mtbf, labels + [AA_LABEL]),
        "runs": runs,
        "constants": constants.to_json(),
        "fleet": fleet_extrapolation(constants),
    }
    write_sweep(results, out)
    plots.plot_mtbf(results, out / "mtbf.png")
    return results
