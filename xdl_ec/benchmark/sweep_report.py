"""The MTBF sweep's written results: ``results.json`` (everything) and ``results.md`` (the sweep's table, the fitted
cost of each strategy and the fleet extrapolation, labelled as one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Mapping, Optional


def _pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def sweep_table(results: Mapping[str, Any]) -> str:
    """The Markdown table of the sweep entries."""
    lines = [
        "| MTBF s | strategy | overhead | 95% CI | failures | lost samples | AUC delta | model equal |",
        "|---:|---|---:|---|---:|---:|---:|---|",
    ]
    for e in results["sweep"]:
        ci = e["overhead_ci"]
        lines.append(
            f"| {e['mtbf_s']:g} | {e['strategy']} | {_pct(e['overhead'])} | "
            + ("n/a" if ci is None else f"{_pct(ci[0])} .. {_pct(ci[1])}")
            + f" | {e.get('failures', 0):.1f} | "
            + ("n/a" if e["lost_samples"] is None else f"{e['lost_samples']:,.0f}")
            + " | "
            + ("n/a" if e["auc_delta"] is None else f"{e['auc_delta']:+.4f}")
            + f" | {'n/a' if e['model_equal'] is None else ('yes' if e['model_equal'] else 'no')} |"
        )
    return "\n".join(lines) + "\n"


def cost_table(results: Mapping[str, Any]) -> str:
    """The fitted line of each strategy: steady overhead and seconds per failure."""
    c = results["constants"]
    lines = [
        "| strategy | measured as | steady overhead | seconds per failure | save s (Young term) | runs |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for ft, cost in sorted(c["costs"].items()):
        lines.append(
            f"| {ft} | {c['labels'][ft]} | {_pct(cost['steady'])} | {cost['seconds_per_failure']:.3f} | "
            f"{cost['save_seconds']:.3f} | {cost['points']} |"
        )
    return "\n".join(lines) + "\n"


def fleet_table(results: Mapping[str, Any]) -> str:
    """The extrapolation's table, its note first."""
    fleet = results["fleet"]
    kinds: List[str] = sorted(fleet["labels"])
    lines = [
        f"Extrapolation ({fleet['note']}):",
        "",
        "| MTBF per server | servers | failures per hour | " + " | ".join(kinds) + " |",
        "|---:|---:|---:|" + "---:|" * len(kinds),
    ]
    for row in fleet["rows"]:
        cells = " | ".join(_pct(row[k]) for k in kinds)
        lines.append(f"| {row['mtbf_h']:g} h | {row['servers']:,} | {row['failures_per_hour']:.2f} | {cells} |")
    return "\n".join(lines) + "\n"


def write_sweep(results: Mapping[str, Any], out: Path) -> None:
    """Writes ``results.json`` and ``results.md`` into ``out``."""
    out = Path(out)
    with open(out / "results.json", "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, sort_keys=True, default=str)
        f.write("\n")
    load = results["load_average"]
    text = (
        f"# xdl-ec bench --sweep-mtbf\n\n`{results['constants']['provenance']['command']}`: "
        f"{results['rounds']} round(s), preset `{results['preset']}`, {results['cluster']['servers']} servers; "
        f"load average {load['start'][0]:.1f} at start, {load['end'][0]:.1f} at end; "
        f"{results['seconds']:.0f} s.\n\n{sweep_table(results)}\n"
        "Overhead: training time after the first step over the same round's failure-free run, minus one (mean "
        "over rounds, 95% t-interval); `none (A/A)` is a second failure-free run: the noise floor.\n\n"
        f"## Fitted cost per strategy\n\n{cost_table(results)}\n## Fleet\n\n{fleet_table(results)}\n"
        "![overhead against failures per hour](mtbf.png)\n"
    )
    (out / "results.md").write_text(text, encoding="utf-8")
