"""The bench's PNG plots (matplotlib, Agg backend: no display needed).

- :func:`plot_throughput`: samples/s over training time for every strategy on one chart, each failure marked where
  its kill landed (the first step, which traces the model, is left out);
- :func:`plot_losses`: the training loss by step, one panel per strategy side by side, the reference's in grey
  behind it and the failures as vertical lines.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, List, Mapping, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)


def _ok_rows(results: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    return [r for r in results["rows"] if r["status"] == "ok" and r["report"].get("timeline")]


def throughput_series(timeline: Sequence[Sequence[float]], window: int) -> Tuple[List[float], List[float]]:
    """(seconds after the first step, samples/s) over sliding windows of ``window`` steps, from the second step
    on (the first step's length is tf.function tracing, which differs from run to run)."""
    xs, ys = [], []
    origin = timeline[0][1] if timeline else 0.0
    for i in range(1, len(timeline)):
        j = max(0, i - window)
        dt = timeline[i][1] - timeline[j][1]
        if dt > 0:
            xs.append(timeline[i][1] - origin)
            ys.append((timeline[i][2] - timeline[j][2]) / dt)
    return xs, ys


def _smooth(values: Sequence[float], window: int) -> List[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _loss_series(timeline: Sequence[Sequence[float]], window: int) -> Tuple[List[float], List[float]]:
    """(step, smoothed loss) with a break (NaN) where a rollback sends the step back (ckpt replays)."""
    xs: List[float] = []
    ys: List[float] = []
    smooth = _smooth([p[3] for p in timeline], window)
    for n, (point, loss) in enumerate(zip(timeline, smooth)):
        if n and point[0] <= timeline[n - 1][0]:
            xs.append(float("nan"))
            ys.append(float("nan"))
        xs.append(point[0])
        ys.append(loss)
    return xs, ys


def _window(results: Mapping[str, Any]) -> int:
    steps = max((len(r["report"]["timeline"]) for r in _ok_rows(results)), default=1)
    return max(1, steps // 40)


def _color(i: int) -> Any:
    return plt.get_cmap("tab10")(i % 10)


def plot_throughput(results: Mapping[str, Any], path: Path) -> Path:
    """Writes the samples/s-over-time chart to ``path``."""
    rows, window = _ok_rows(results), _window(results)
    fig, ax = plt.subplots(figsize=(11, 5.5))
    for i, row in enumerate(rows):
        timeline = row["report"]["timeline"]
        xs, ys = throughput_series(timeline, window)
        is_ref = row["label"] == results["reference"]
        ax.plot(
            xs,
            ys,
            color="black" if is_ref else _color(i),
            lw=2.2 if is_ref else 1.3,
            label=row["label"] + (" (reference, no failures)" if is_ref else ""),
        )
        for k, kill in enumerate(row["report"].get("injected", [])):
            at = kill["seconds"] - timeline[0][1]
            ax.axvline(at, color=_color(i), lw=0.8, ls=":", alpha=0.8)
            ax.plot(
                [at],
                [0],
                marker="v",
                ms=8,
                color=_color(i),
                clip_on=False,
                label="failure (kill)" if i == 1 and k == 0 else None,
            )
    ax.set_xlabel("training time after the first step (s)")
    ax.set_ylabel(f"samples/s (window of {window} steps)")
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"Throughput with injected server failures ({results['backend']} backend, MTBF {results['mtbf_seconds']:.2f} s)"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_losses(results: Mapping[str, Any], path: Path) -> Path:
    """Writes the per-strategy loss panels to ``path``."""
    rows, window = _ok_rows(results), _window(results)
    ref = next((r for r in rows if r["label"] == results["reference"]), None)
    others = [r for r in rows if r is not ref] or rows
    cols = min(4, len(others))
    lines = math.ceil(len(others) / cols)
    fig, axes = plt.subplots(lines, cols, figsize=(3.6 * cols, 3.0 * lines), sharex=True, sharey=True, squeeze=False)
    for n, ax in enumerate(axes.flat):
        if n >= len(others):
            ax.set_visible(False)
            continue
        row = others[n]
        if ref is not None:
            ax.plot(*_loss_series(ref["report"]["timeline"], window), color="0.6", lw=2.0, label="none")
        ax.plot(
            *_loss_series(row["report"]["timeline"], window), color=_color(rows.index(row)), lw=1.2, label=row["label"]
        )
        for kill in row["report"].get("injected", []):
            ax.axvline(kill["step"], color="red", lw=0.8, ls=":")
        s = row.get("summary", {})
        ax.set_title(
            f"{row['label']}  (eval log loss {s.get('logloss', float('nan')) or float('nan'):.4f})", fontsize=9
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        if n % cols == 0:
            ax.set_ylabel(f"training loss ({window}-step mean)")
        if n >= (lines - 1) * cols:
            ax.set_xlabel("step")
    fig.suptitle("Loss curves (red dotted: server killed before that step)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_mtbf(results: Mapping[str, Any], path: Path) -> Path:
    """Writes the sweep's chart to ``path``: overhead against injected failures per hour (3600 / MTBF, log x), a
    line per strategy with its 95% interval as error bars (the A/A line is the noise floor)."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    labels = list(dict.fromkeys(e["strategy"] for e in results["sweep"]))
    for i, label in enumerate(labels):
        points = sorted(
            (3600.0 / e["mtbf_s"], e["overhead"], e["overhead_ci"])
            for e in results["sweep"]
            if e["strategy"] == label and e["overhead"] is not None
        )
        if not points:
            continue
        xs = [p[0] for p in points]
        ys = [100 * p[1] for p in points]
        err = [[100 * (p[1] - p[2][0]) for p in points], [100 * (p[2][1] - p[1]) for p in points]]
        aa = label.startswith("none")
        ax.errorbar(
            xs,
            ys,
            yerr=err,
            marker="o",
            capsize=3,
            color="0.5" if aa else _color(i),
            ls="--" if aa else "-",
            label=label + (" (noise floor)" if aa else ""),
        )
    ax.set_xscale("log")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xlabel("failures per hour of training (3600 / MTBF s, log scale)")
    ax.set_ylabel("overhead vs the failure-free run (%)")
    ax.set_title(f"Overhead against failure rate ({results['rounds']} rounds, mean and 95% interval)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
