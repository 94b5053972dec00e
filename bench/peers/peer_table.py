"""The report of bench/peers/run.py: medians over interleaved rounds, each system's ratio to xdl-ec in the same
round, the goal line, as a Markdown table. Pure Python (no numpy), so it is tested without any peer installed.

A result is one peer process's JSON line (peer_harness.run_peer) plus ``round``; a failed run has ``error``.
"""

from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional, Sequence

REFERENCE = "xdl-ec"
# not a peer: TF's DLRM body alone with no tables (ceiling_tf_body.py), the most a TF-bodied step reaches
CEILING = "TF DLRM body alone (ceiling)"
# issue #37: xdl-ec's samples/s against the best peer's, same run, medians of interleaved rounds
GOALS = {2048: 1.3, 256: 1.2}


def round_ratios(results: Sequence[Dict[str, Any]], system: str, field: str, reference: str = REFERENCE) -> List[float]:
    """``system``'s ``field`` over ``reference``'s in each round where both ran."""
    ours = {r["round"]: r[field] for r in results if r["system"] == reference and "error" not in r}
    return [
        r[field] / ours[r["round"]]
        for r in results
        if r["system"] == system and "error" not in r and r["round"] in ours and ours[r["round"]] > 0
    ]


def _median(values: Sequence[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def summarise(results: Sequence[Dict[str, Any]], reference: str = REFERENCE) -> List[Dict[str, Any]]:
    """One row per system, in the order systems first appear: medians over its rounds, ratios to ``reference``."""
    systems = list(dict.fromkeys(r["system"] for r in results))
    rows = []
    for system in systems:
        ok = [r for r in results if r["system"] == system and "error" not in r]
        failed = [r for r in results if r["system"] == system and "error" in r]
        row: Dict[str, Any] = {"system": system, "rounds": len(ok), "failed": len(failed)}
        if failed:
            row["error"] = failed[-1]["error"]
        for field in ("samples_per_sec", "cpu_us_per_sample", "peak_rss_mb", "auc"):
            row[field] = _median([r[field] for r in ok])
        row["speed_ratio"] = _median(round_ratios(results, system, "samples_per_sec", reference))
        row["cpu_ratio"] = _median(round_ratios(results, system, "cpu_us_per_sample", reference))
        row["version"] = ok[-1].get("version", "") if ok else ""
        rows.append(row)
    return rows


def _num(value: Optional[float], fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _rate(value: Optional[float]) -> str:
    return "-" if value is None else f"{value / 1000:.1f}k"


def format_table(rows: Sequence[Dict[str, Any]]) -> str:
    """The Markdown table of :func:`summarise`'s rows."""
    lines = [
        "| system | samples/s | ratio to xdl-ec in the same round: samples/s, CPU per sample | CPU us/sample | "
        "peak RSS MB | hold-out AUC | rounds | version |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        rounds = str(row["rounds"]) + (f" ({row['failed']} failed: {row['error']})" if row["failed"] else "")
        lines.append(
            f"| {row['system']} | {_rate(row['samples_per_sec'])} | "
            f"{_num(row['speed_ratio'], '.2f')}x, {_num(row['cpu_ratio'], '.2f')}x | "
            f"{_num(row['cpu_us_per_sample'], '.1f')} | {_num(row['peak_rss_mb'], ',.0f')} | "
            f"{_num(row['auc'], '.4f')} | {rounds} | {row['version']} |"
        )
    return "\n".join(lines)


def goal_line(rows: Sequence[Dict[str, Any]], batch_size: int, reference: str = REFERENCE) -> str:
    """xdl-ec's samples/s over the best peer's, against the issue's goal at this batch size. From the per-round
    ratios (the best peer is the one with the highest median ratio to xdl-ec): a round's systems ran minutes apart,
    the rounds possibly an hour apart under another load. With the ceiling in the rows, also the ceiling over the
    best peer: no step whose model body is TF's goes past it, so a goal above it is out of reach on these cores."""
    # xdl-ec's own variants (its label and more) are no peers
    peers = [r for r in rows if not r["system"].startswith(reference) and r["system"] != CEILING and r["speed_ratio"]]
    if not any(r["system"] == reference and r["samples_per_sec"] for r in rows) or not peers:
        return "goal: needs xdl-ec and at least one peer that ran in the same round"
    best = max(peers, key=lambda r: r["speed_ratio"])
    ratio = 1.0 / best["speed_ratio"]
    goal = GOALS.get(batch_size)
    verdict = "" if goal is None else f" (goal >= {goal}x: {'met' if ratio >= goal else 'not met'})"
    line = f"xdl-ec / best peer ({best['system']}), median of the rounds' ratios: {ratio:.2f}x{verdict}"
    ceiling = next((r for r in rows if r["system"] == CEILING and r["speed_ratio"]), None)
    if ceiling is not None:
        line += f"; ceiling / best peer: {ceiling['speed_ratio'] / best['speed_ratio']:.2f}x"
    return line
