"""Evaluation metrics of a CTR model: exact AUC and log loss (numpy, no TensorFlow); of a model of C classes
(labels and probabilities [N, C]), one-vs-rest AUC, categorical log loss and accuracy."""

from __future__ import annotations

import math
from typing import Dict, Optional, Sequence

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


def class_metrics(labels: np.ndarray, probabilities: np.ndarray, eps: float = 1e-7) -> Dict[str, Optional[float]]:
    """``auc`` (the mean of each class's one-vs-rest AUC over the classes both present and absent; None if none
    is), ``logloss`` (the mean categorical cross-entropy, probabilities clipped to [eps, 1]) and ``accuracy`` (the
    share whose most probable class is the labelled one) of 0/1 labels [N, C] and probabilities [N, C]."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    if y.ndim != 2 or y.shape != p.shape or y.shape[0] == 0:
        raise ValueError(f"labels and probabilities: expected equal non-empty [N, C], got {y.shape} and {p.shape}")
    per_class = [auc(y[:, c], p[:, c]) for c in range(y.shape[1])]
    defined = [a for a in per_class if not math.isnan(a)]
    if not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("probabilities: must lie in [0, 1]")
    return {
        "auc": float(np.mean(defined)) if defined else None,
        "logloss": float(-np.mean(np.sum(y * np.log(np.clip(p, eps, 1.0)), axis=1))),
        "accuracy": float(np.mean(np.argmax(p, axis=1) == np.argmax(y, axis=1))),
    }


def one_hot(labels: np.ndarray, classes: int) -> np.ndarray:
    """Class ids [N] (0 .. classes - 1, as floats or ints; XDL's mnist labels) as 0/1 labels [N, classes]."""
    y = np.asarray(labels)
    if y.ndim != 1 or not np.all((y >= 0) & (y < classes) & (np.floor(y) == y)):
        raise ValueError(f"labels: class ids in [0, {classes}) expected beside probabilities of {classes} classes")
    return np.eye(classes, dtype=np.float64)[y.astype(np.int64)]


def holdout_metrics(labels: Sequence[np.ndarray], probabilities: Sequence[np.ndarray]) -> dict:
    """``eval_samples``, ``auc`` and ``logloss`` of per-batch labels and predicted probabilities; AUC is None when
    undefined (one class only), and both are None for an empty hold-out. Labels [B, C] of C classes: their
    :func:`class_metrics` (``accuracy`` too)."""
    if not labels:
        return {"eval_samples": 0, "auc": None, "logloss": None}
    y = np.concatenate(labels)
    p = np.concatenate(probabilities).astype(np.float64)
    if p.ndim == 2 and y.ndim == 1:  # class ids beside probabilities [N, C]
        y = one_hot(y, p.shape[1])
    if y.ndim == 2:
        return {"eval_samples": int(y.shape[0]), **class_metrics(y, p)}
    a = auc(y, p)
    return {"eval_samples": int(y.size), "auc": None if math.isnan(a) else a, "logloss": log_loss(y, p)}
