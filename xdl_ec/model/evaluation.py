"""Hold-out evaluation of a job: AUC and log loss of its predictions on batches shaped like its input.

Evaluation never inserts rows: each table is read with ``find``, and an id never trained reads the default row,
all zeros (the hold-out split of a time-ordered log is full of unseen values; a zero row adds nothing to a sum
combiner and is what a freshly initialised embedding averages to).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Sequence, Tuple

import numpy as np

from .feature import Feature
from .feature_batch import FeatureBatch
from .metrics import holdout_metrics

FindRows = Callable[[Dict[str, np.ndarray]], Dict[str, Tuple[np.ndarray, np.ndarray]]]


def found_rows(batch: FeatureBatch, find_rows: FindRows) -> Dict[str, np.ndarray]:
    """{table: rows} of ``batch``'s keys read by ``find_rows`` without inserting; ``find`` already gives the
    default row (zeros) for a key it does not hold."""
    return {t: rows for t, (rows, _) in find_rows(batch.keys).items()}


def evaluate_batches(batches: Iterable[Any], features: Sequence[Feature], find_rows: FindRows,
                     predict: Callable[[FeatureBatch, Dict[str, np.ndarray]], np.ndarray]) -> Dict[str, Any]:
    """``eval_samples``, ``auc`` and ``logloss`` of ``predict`` over ``batches`` (rows read by ``find_rows``
    {table: keys} -> {table: (rows, found)})."""
    labels, probs = [], []
    for n, batch in enumerate(batches, 1):
        prepared = FeatureBatch.prepare(batch, features, f"evaluation batch {n}")
        probs.append(np.asarray(predict(prepared, found_rows(prepared, find_rows))))
        labels.append(prepared.label)
    return holdout_metrics(labels, probs)
