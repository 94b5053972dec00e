"""Progressive validation: the AUC and log loss of each training batch scored by the step's own forward pass before
its update (every sample is unseen when scored), over a window of the last ``window`` samples.

Adding a batch only keeps its arrays (O(1) a step); the figures are computed when asked for (a progress line, a
report), exact over the window (:func:`~xdl_ec.model.metrics.auc`).
"""

from __future__ import annotations

import collections
import math
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.model.metrics import auc, class_metrics, log_loss, one_hot
from xdl_ec.settings import checks

DEFAULT_WINDOW = 100_000


class ProgressiveWindow:
    """The last ``window`` samples' labels and pre-update probabilities, per head (``heads``: None for a model of one
    output)."""

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self.window = checks.positive_int("progressive window", window)
        self.heads: Optional[Tuple[str, ...]] = None
        self._batches: Deque[Tuple[np.ndarray, List[np.ndarray]]] = collections.deque()
        self._held = 0  # samples in _batches (at most one batch more than the window)
        self.scored = 0  # samples ever added

    def add(
        self, labels: Sequence[np.ndarray], probabilities: Sequence[np.ndarray], heads: Optional[Sequence[str]] = None
    ) -> None:
        """One batch: ``labels`` and ``probabilities`` one [B] array each per head (``heads`` order)."""
        heads_t = None if heads is None else tuple(heads)
        if self.scored and heads_t != self.heads:
            raise ValueError(f"progressive validation: a batch of heads {heads_t} after batches of heads {self.heads}")
        self.heads = heads_t
        if len(labels) != len(probabilities) or len(labels) != len(heads_t or (None,)):
            raise ValueError(
                f"progressive validation: {len(labels)} label and {len(probabilities)} probability "
                f"arrays for heads {heads_t}"
            )
        size = int(np.shape(labels[0])[0])
        stacked = np.stack([np.asarray(y, dtype=np.float32) for y in labels])
        self._batches.append((stacked, [np.asarray(p, dtype=np.float32) for p in probabilities]))
        self._held += size
        self.scored += size
        while self._held - self._batches[0][0].shape[1] >= self.window:
            self._held -= self._batches.popleft()[0].shape[1]

    def _arrays(self) -> Tuple[np.ndarray, List[np.ndarray]]:
        labels = np.concatenate([y for y, _ in self._batches], axis=1)[:, -self.window :]
        probs = [np.concatenate([p[h] for _, p in self._batches])[-self.window :] for h in range(labels.shape[0])]
        return labels, probs

    def report(self) -> Dict[str, Any]:
        """``{"auc", "logloss", "samples"}`` over the window (``samples``: how many the figures are over; AUC None
        while one class only, both None before a batch or with labels other than 0/1); a model of several heads adds
        ``heads``: {head: {"auc", "logloss"}}, its ``auc`` and ``logloss`` being its first head's (by name), as in
        a hold-out evaluation."""
        if not self._batches:
            return {"auc": None, "logloss": None, "samples": 0}
        labels, probs = self._arrays()
        per_head = [_figures(labels[h], probs[h]) for h in range(labels.shape[0])]
        out: Dict[str, Any] = {**per_head[0], "samples": int(labels.shape[1])}
        if self.heads is not None:
            out["heads"] = {head: figures for head, figures in zip(self.heads, per_head)}
        return out

    def auc(self) -> Optional[float]:
        """The window's AUC (its first head's for several heads): the progress line's figure."""
        return self.report()["auc"]


def _figures(labels: np.ndarray, probs: np.ndarray) -> Dict[str, Optional[float]]:
    if probs.ndim == 2 and labels.ndim == 1:  # class ids beside probabilities [B, C]
        try:
            labels = one_hot(labels, probs.shape[1])
        except ValueError:
            return {"auc": None, "logloss": None}
    if not np.all((labels == 0) | (labels == 1)) or not np.all(np.isfinite(probs)):
        return {"auc": None, "logloss": None}
    if labels.ndim == 2:  # C classes: one-vs-rest AUC, categorical log loss, accuracy
        return class_metrics(labels, np.clip(probs, 0.0, 1.0))
    a = auc(labels, probs)
    return {"auc": None if math.isnan(a) else a, "logloss": log_loss(labels, probs)}
