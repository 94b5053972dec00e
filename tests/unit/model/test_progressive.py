"""Progressive validation's window: exact AUC and log loss over the last ``window`` samples, per head."""

from __future__ import annotations

import numpy as np
import pytest

from xdl_ec.model.metrics import auc, log_loss
from xdl_ec.model.progressive import ProgressiveWindow


def batches(n: int, size: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        y = (rng.random(size) < 0.3).astype(np.float32)
        p = np.clip(0.3 + 0.4 * (y - 0.3) + rng.normal(0, 0.2, size), 0.01, 0.99).astype(np.float32)
        out.append((y, p))
    return out


def test_the_figures_are_exact_over_the_last_window_samples() -> None:
    window = ProgressiveWindow(250)
    data = batches(7, 100)
    for y, p in data:
        window.add([y], [p])
    y = np.concatenate([b[0] for b in data])[-250:]
    p = np.concatenate([b[1] for b in data])[-250:]
    report = window.report()
    assert report == {"auc": auc(y, p), "logloss": log_loss(y, p), "samples": 250}
    assert window.auc() == report["auc"] and window.scored == 700
    assert sum(b[0].shape[1] for b in window._batches) <= 250 + 100  # older batches are dropped


def test_a_window_larger_than_the_run_covers_every_sample() -> None:
    window = ProgressiveWindow()
    data = batches(3, 50, seed=1)
    for y, p in data:
        window.add([y], [p])
    y, p = np.concatenate([b[0] for b in data]), np.concatenate([b[1] for b in data])
    assert window.report() == {"auc": auc(y, p), "logloss": log_loss(y, p), "samples": 150}


def test_several_heads_each_get_figures_and_the_first_by_name_leads() -> None:
    window = ProgressiveWindow(1000)
    a, b = batches(2, 80, seed=2), batches(2, 80, seed=3)
    for (ya, pa), (yb, pb) in zip(a, b, strict=True):
        window.add([ya, yb], [pa, pb], ("buy", "click"))
    report = window.report()
    ya, pa = np.concatenate([x[0] for x in a]), np.concatenate([x[1] for x in a])
    yb, pb = np.concatenate([x[0] for x in b]), np.concatenate([x[1] for x in b])
    assert report["heads"] == {
        "buy": {"auc": auc(ya, pa), "logloss": log_loss(ya, pa)},
        "click": {"auc": auc(yb, pb), "logloss": log_loss(yb, pb)},
    }
    assert report["auc"] == report["heads"]["buy"]["auc"] and report["samples"] == 160


def test_undefined_figures_are_none() -> None:
    window = ProgressiveWindow(10)
    assert window.report() == {"auc": None, "logloss": None, "samples": 0}
    window.add([np.zeros(4, np.float32)], [np.full(4, 0.2, np.float32)])
    report = window.report()
    assert report["auc"] is None and report["logloss"] == pytest.approx(-np.log(0.8), rel=1e-6)
    soft = ProgressiveWindow(10)
    soft.add([np.array([0.5, 1.0], np.float32)], [np.array([0.4, 0.6], np.float32)])
    assert soft.report() == {"auc": None, "logloss": None, "samples": 2}  # labels other than 0/1


def test_bad_settings_and_changing_heads_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="progressive window"):
        ProgressiveWindow(0)
    window = ProgressiveWindow(10)
    window.add([np.ones(2, np.float32)], [np.ones(2, np.float32)])
    with pytest.raises(ValueError, match=r"a batch of heads \('a', 'b'\) after batches of heads None"):
        window.add([np.ones(2, np.float32)] * 2, [np.ones(2, np.float32)] * 2, ("a", "b"))
