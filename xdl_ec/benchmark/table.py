"""The bench's written results: ``results.json`` (everything, reports included) and ``results.md`` (the Markdown
table of :func:`markdown_table`, with the run's setup and a line per strategy that did not run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

COLUMNS = (
    "strategy",
    "samples/s (normal)",
    "vs none",
    "overhead",
    "failures",
    "detect s",
    "rebuild s",
    "samples/s in rebuild",
    "lost samples",
    "log loss",
    "AUC",
    "stored bytes",
    "peak RSS MB",
    "model = none's",
)


def _num(value: Optional[float], fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _row_cells(row: Mapping[str, Any], reference: Optional[Mapping[str, Any]]) -> List[str]:
    s = row["summary"]
    ref_rate = reference["summary"]["samples_per_sec_normal"] if reference else None
    rate = s["samples_per_sec_normal"]
    ratio = rate / ref_rate if rate and ref_rate else None
    if s["failures"] == 0:
        during = "-"
    elif s["training_paused_during_rebuild"]:
        during = "0 (paused)"
    else:
        during = _num(s["samples_per_sec_during_rebuild"], ",.0f")
    held = {"parity": "parity held", "checkpoint": "checkpoints written"}
    stored = f"{s['stored_bytes'] / 1e6:.2f} MB {held[s['stored_kind']]}" if s["stored_kind"] else "0"
    peak = s["peak_rss_bytes"]
    return [
        row["label"],
        _num(rate, ",.0f"),
        _num(ratio, ".3f"),
        _num(None if s["overhead"] is None else 100 * s["overhead"], "+.1f") + "%",
        str(s["failures"]),
        _num(s["detect_seconds_mean"], ".3f") if s["failures"] else "-",
        _num(s["rebuild_seconds_mean"], ".3f") if s["failures"] else "-",
        during,
        f"{s['lost_samples']:,}",
        _num(s["logloss"], ".4f"),
        _num(s["auc"], ".4f"),
        stored,
        "n/a" if peak is None else f"{peak / 2**20:,.0f}",
        "yes" if s["same_model_as_reference"] else "no",
    ]


def markdown_table(results: Mapping[str, Any]) -> str:
    """The Markdown table of the successful rows, then one line per strategy that is unavailable or failed."""
    rows = results["rows"]
    reference = next((r for r in rows if r["label"] == results["reference"] and r["status"] == "ok"), None)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join(["---"] + ["---:"] * (len(COLUMNS) - 1)) + "|"]
    for row in rows:
        if row["status"] == "ok":
            lines.append("| " + " | ".join(_row_cells(row, reference)) + " |")
    missing = [r for r in rows if r["status"] != "ok"]
    if missing:
        lines.append("")
        for row in missing:
            what = "not available in this build" if row["status"] == "unavailable" else "run failed"
            lines.append(f"- **{row['label']}**: {what}: {row['error']}")
    return "\n".join(lines) + "\n"


def data_text(source: Any) -> str:
    """The report's ``data_source`` in words (a file's description, or the synthetic generator's parameters)."""
    if isinstance(source, Mapping) and source.get("source") == "synthetic":
        return (
            f"synthetic Criteo-shaped data ({source.get('rows', 0):,} rows, columns of up to "
            f"{source.get('max_cardinality')} values, Zipf exponent {source.get('zipf_exponent')})"
        )
    if isinstance(source, Mapping):
        return ", ".join(f"{k} {v}" for k, v in source.items())
    return str(source)


def _model_text(train: Mapping[str, Any]) -> str:
    """The built-in model's size, or a --script job's tables."""
    if "job" in train:
        return (
            "a script's job (tables " + ", ".join(f"{t['name']} dim {t['dim']}" for t in train["job"]["tables"]) + ")"
        )
    return f"{train['model']} with batch {train['batch_size']}, {train['epochs']} epoch(s)"


def setup_text(results: Mapping[str, Any]) -> str:
    """One paragraph: data, cluster, preset, failure schedule, machine."""
    t, c, m = results["train"], results["cluster"], results["machine"]
    kills = ", ".join(f"step {k['step']} server {k['server']}" for k in results["failure_schedule"]) or "none"
    return (
        f"Preset `{results['preset']}` on the `{results['backend']}` backend: {data_text(results['data'])}, "
        f"{_model_text(t)}, seed {results['seed']}, "
        f"deterministic; {c['servers']} servers, {c['workers']} worker(s), {c['mode']} mode. "
        f"MTBF {results['mtbf_seconds']:.2f} s{' (auto: a third of the reference run)' if results['mtbf_auto'] else ''}"
        f" -> kills: {kills}. Machine: {m['cpus']} CPUs, {m['platform']}, Python {m['python']}."
    )


NOTES = (
    "samples/s (normal): steps overlapping no failure (first step excluded); vs none: its ratio to the "
    "reference's; overhead: training time after the first step over the reference's, minus one; detect and "
    "rebuild s: means over the failures; samples/s in rebuild: as the strategy measured it, 0 (paused) when "
    "training waits for the recovery; lost samples: dropped (cpr) or re-trained (ckpt); stored bytes: parity "
    "blocks held by the servers at the end (ec), or checkpoint bytes written over the run (ckpt, cpr); peak "
    "RSS: of the bench process during the run (servers included on the local backend; it also holds what "
    "earlier runs left, so read differences, not levels); model = none's: the "
    "final model_digest equals the failure-free reference's."
)


def write_results(results: Mapping[str, Any], out: Path) -> Dict[str, Path]:
    """Writes ``results.json`` and ``results.md`` into ``out``; returns their paths."""
    out = Path(out)
    paths = {"json": out / "results.json", "markdown": out / "results.md"}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, sort_keys=True, default=str)
        f.write("\n")
    text = (
        f"# xdl-ec bench\n\n{setup_text(results)}\n\n{markdown_table(results)}\n{NOTES}\n\n"
        "![samples/s over time](throughput.png)\n\n![loss curves](loss.png)\n"
    )
    paths["markdown"].write_text(text, encoding="utf-8")
    return paths
