"""Evaluation metrics of a CTR model: exact AUC and log loss (numpy, no TensorFlow)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def _labels_and_scores(labels: np.ndarray, scores: np.ndarray, scores_name: str) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels)
    s = np.asarray(scores)
    if y.ndim != 1 or s.ndim != 1:
        raise ValueError(f"labels and {scores_name}: expected 1-D arrays, got shapes {y.shape} and {s.shape}")
    if y.shape != s.shape:
        raise ValueError(f"labels and {scores_name}: lengths differ ({y.shape[0]} vs {s.shape[0]})")
    if y.dtype.kind not in "biuf" or s.dtype.kind not in "biuf":
        raise TypeError(f"labels and {scores_name}: expected numeric arrays, got {y.dtype} and {s.dtype}")
    y = y.astype(np.float64)
    s = s.astype(np.float64)
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels: every label must be 0 or 1")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{scores_name}: must be finite")
    return y, s


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve, exact: the Mann-Whitney U statistic with average ranks for tied scores.

    Equals P(score of a random positive > score of a random negative) + 0.5 P(tie). NaN when only one class
    is present (the AUC is undefined there).
    """
    y, s = _labels_and_scores(labels, scores, "scores")
    n_pos = float(y.sum())
    n_neg = float(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="stable")
    sorted_s = s[order]
    # Average 1-based rank of each run of equal scores.
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], s.size]
    run_rank = (starts + ends + 1) / 2.0
    ranks = np.empty(s.size, dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    u = ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def log_loss(labels: np.ndarray, probabilities: np.ndarray, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy of probabilities (clipped to [eps, 1 - eps]) against 0/1 labels."""
    y, p = _labels_and_scores(labels, probabilities, "probabilities")
    if y.size == 0:
        raise ValueError("labels: empty, log loss is undefined")
    if np.any((p < 0) | (p > 1)):
        raise ValueError("probabilities: must lie in [0, 1]")
    p = np.clip(p, eps, 1.0 - eps)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def holdout_metrics(labels: Sequence[np.ndarray], probabilities: Sequence[np.ndarray]) -> dict:
    """``eval_samples``, ``auc`` and ``logloss`` of per-batch labels and predicted probabilities; AUC is None when
    undefined (one class only), and both are None for an empty hold-out."""
    if not labels:
        return {"eval_samples": 0, "auc": None, "logloss": None}
    y = np.concatenate(labels)
    p = np.concatenate(probabilities).astype(np.float64)
    a = auc(y, p)
    return {"eval_samples": int(y.size), "auc": None if math.isnan(a) else a, "logloss": log_loss(y, p)}
