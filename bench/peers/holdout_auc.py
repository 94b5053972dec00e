"""Hold-out AUC in plain numpy, the one every peer reports (so the figures differ only by the model, not by the
metric's code): the Mann-Whitney statistic with tied scores sharing their average rank."""

from __future__ import annotations

import numpy as np


def holdout_auc(labels: np.ndarray, probabilities: np.ndarray) -> float:
    """Area under the ROC curve of 0/1 ``labels`` [N] scored by ``probabilities`` [N]."""
    y = np.asarray(labels, dtype=np.float64).ravel()
    p = np.asarray(probabilities, dtype=np.float64).ravel()
    if y.shape != p.shape:
        raise ValueError(f"labels and probabilities: expected the same length, got {y.shape[0]} and {p.shape[0]}")
    positives = float(y.sum())
    negatives = float(y.size) - positives
    if positives == 0 or negatives == 0:
        raise ValueError("labels: AUC needs both classes in the hold-out split")
    order = np.argsort(p, kind="mergesort")
    sorted_p = p[order]
    ranks = np.empty(p.size, dtype=np.float64)
    # tied scores: every member of a run of equal scores gets the run's mean rank (1-based)
    starts = np.flatnonzero(np.r_[True, sorted_p[1:] != sorted_p[:-1]])
    ends = np.r_[starts[1:], p.size]
    mean_rank = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return float((ranks[y == 1].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))
