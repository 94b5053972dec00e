"""The lines ``xdl-ec train`` (and ``verify``) prints from a run's report: samples, steps and speed, saves, the
hold-out, failures, resizes, the digest, servers' traffic, exports and the step's stages."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional


def print_report(report: Dict[str, Any], model: Optional[str]) -> None:
    """Prints ``report``; ``model``: the built-in model's name (None: the run trained a --script job)."""
    print(
        f"trained {model or 'the job'}: {report['samples']:,} samples in {steps_text(report)}, "
        f"{report['samples_per_sec']:,.0f} samples/s, final loss {number_text(report['final_loss'])}"
    )
    saves_line = saves_text(report)
    if saves_line:
        print(saves_line)
    if "eval_samples" in report:
        print(
            f"eval on {report['eval_samples']:,} held-out rows: AUC {number_text(report['auc'])}, log loss "
            f"{number_text(report['logloss'])}"
        )
    if report.get("bad_lines"):
        print(f"skipped {report['bad_lines']:,} bad lines")
    for failure in report.get("failures", []):
        print(
            f"{report['ft']}: {failure['role']} {failure['index']} lost at step {failure['step']}, recovered in "
            f"{failure['rebuild_seconds']:.2f} s ({failure['lost_samples']:,} samples lost or re-trained)"
        )
        if failure.get("vulnerable_seconds"):  # ec: the window in which one more loss was fatal
            print(
                f"{report['ft']}: one more server loss was fatal for {failure['vulnerable_seconds']:.2f} s (bound "
                f"{report['rebuild_within']:g} s {'kept' if failure['vulnerable_within_bound'] else 'missed'}; "
                f"training held {failure['training_held_seconds']:.2f} s)"
            )
    if report.get("lost_updates"):
        print(f"{report['ft']}: {report['lost_updates']:,} row updates lost")
    for resize in report.get("resizes", []):
        print(
            f"resized at step {resize['step']}: {resize['servers_before']} -> {resize['servers_after']} servers, "
            f"{resize['rows_moved']:,} of {resize['rows']:,} rows to another server, {resize['bytes_copied']:,} "
            f"bytes copied in {resize['seconds']:.2f} s" + resize_tail(resize)
        )
    print(f"model_digest {report['model_digest']}")
    for server in report.get("servers", []):
        print(f"server {server['index']}: {server['bytes_in']:,} bytes in, {server['bytes_out']:,} bytes out")
    exports = report.get("exports")
    if exports is not None and exports["deltas"]:
        print(
            f"exports: a base and {exports['deltas']:,} deltas in {exports['directory']}; freshness median "
            f"{exports['freshness_s']['median']:.2f} s, p99 {exports['freshness_s']['p99']:.2f} s; a delta "
            f"{exports['delta_bytes']:,.0f} bytes (every row: {exports['full_bytes']:,} bytes)"
        )
    if "stages" in report:
        from xdl_ec.ps.step_stages import stages_text

        print(stages_text(report["stages"]))


def number_text(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def steps_text(report: Dict[str, Any]) -> str:
    """The steps this run trained: a resumed run's samples are this run's, so are the steps named with them."""
    resumed = report.get("resumed_from")
    if resumed is None:
        return f"{report['steps']:,} steps"
    first, last = resumed["step"] + 1, report["steps"]
    if last < first:
        return f"0 steps this run (the save was at step {resumed['step']:,} already)"
    return f"{last - first + 1:,} steps this run (steps {first:,}-{last:,})"


def saves_text(report: Dict[str, Any]) -> Optional[str]:
    """Which save the run resumed and where its saves went (None: neither)."""
    resumed, saves = report.get("resumed_from"), report.get("saves")
    parts = []
    if resumed is not None:
        parts.append(f"resumed the save of step {resumed['step']:,} in {Path(resumed['directory']).resolve()}")
    if saves is not None:
        newest = "" if saves.get("last_step") is None else f" (newest: step {saves['last_step']:,})"
        parts.append(f"saves go to {Path(saves['directory']).resolve()}{newest}")
    elif resumed is not None:
        parts.append("this run is not saved (add --save-dir DIR)")
    return "; ".join(parts) or None


def resize_tail(record: Dict[str, Any]) -> str:
    """A resize's line's tail: the servers it drained and its code change ("" for neither)."""
    drained = f" (drained server {', '.join(map(str, record['drained']))})" if record.get("drained") else ""
    return drained + code_change(record)


def code_change(record: Dict[str, Any]) -> str:
    """A resize's code change for its printed line ("" when the code was kept or there are no stripes)."""
    before, after = record.get("code_before"), record.get("code")
    if before is None or after is None or list(before) == list(after):
        return ""
    return f" (code {before[0]},{before[1]} -> {after[0]},{after[1]})"
