"""AUC and log loss against brute-force references."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xdl_ec.model.metrics import auc, log_loss


def brute_force_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    pos = scores[labels == 1]
    neg = scores[labels == 0]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(5))
def test_auc_matches_pair_counting_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = (rng.random(300) < 0.3).astype(np.float32)
    scores = np.round(rng.random(300) + 0.3 * labels, 1)  # coarse rounding: many ties
    assert auc(labels, scores) == pytest.approx(brute_force_auc(labels, scores), abs=1e-12)


def test_auc_edge_cases() -> None:
    assert auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.2, 0.3, 0.4])) == 1.0
    assert auc(np.array([1, 1, 0, 0]), np.array([0.1, 0.2, 0.3, 0.4])) == 0.0
    assert auc(np.array([0, 1, 0, 1]), np.full(4, 0.5)) == 0.5
    assert math.isnan(auc(np.array([1, 1]), np.array([0.2, 0.3])))


def test_log_loss_matches_definition() -> None:
    rng = np.random.default_rng(0)
    labels = (rng.random(200) < 0.4).astype(np.float64)
    probs = rng.random(200)
    expected = -sum(math.log(p) if y else math.log(1 - p) for y, p in zip(labels, probs)) / 200
    assert log_loss(labels, probs) == pytest.approx(expected, rel=1e-12)
    assert log_loss(np.array([1.0, 0.0]), np.array([1.0, 0.0])) == pytest.approx(-math.log(1 - 1e-7))


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="lengths differ"):
        auc(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="0 or 1"):
        auc(np.array([0, 2]), np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="finite"):
        auc(np.array([0, 1]), np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        log_loss(np.array([0, 1]), np.array([0.1, 1.2]))
    with pytest.raises(TypeError, match="numeric"):
        log_loss(np.array(["a"]), np.array([0.1]))


def test_holdout_metrics_concatenates_batches() -> None:
    from xdl_ec.model.metrics import holdout_metrics

    labels = [np.array([0.0, 1.0]), np.array([1.0, 0.0, 0.0])]
    probs = [np.array([0.2, 0.7], np.float32), np.array([0.4, 0.3, 0.9], np.float32)]
    result = holdout_metrics(labels, probs)
    y, p = np.concatenate(labels), np.concatenate(probs)
    assert result == {"eval_samples": 5, "auc": auc(y, p), "logloss": log_loss(y, p)}
    assert holdout_metrics([np.ones(3)], [np.full(3, 0.5)])["auc"] is None
    assert holdout_metrics([], []) == {"eval_samples": 0, "auc": None, "logloss": None}
