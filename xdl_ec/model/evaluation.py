"""Hold-out evaluation of a job: AUC and log loss of its predictions on batches shaped like its input.

Evaluation never inserts rows: each table is read with ``find``, and an id never trained reads the default row,
all zeros (the hold-out split of a time-ordered log is full of unseen values; a zero row adds nothing to a sum
combiner and is what a freshly initialised embedding averages to).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Tuple

import numpy as np

from xdl_ec.model.feature_batch import FeatureBatch
from xdl_ec.model.metrics import holdout_metrics

FindRows = Callable[[Dict[str, np.ndarray]], Dict[str, Tuple[np.ndarray, np.ndarray]]]


def found_rows(batch: FeatureBatch, find_rows: FindRows) -> Dict[str, np.ndarray]:
    """{table: rows} of ``batch``'s keys read by ``find_rows`` without inserting; ``find`` already gives the
    default row (zeros) for a key it does not hold."""
    return {t: rows for t, (rows, _) in find_rows(batch.keys).items()}


def evaluate_batches(
    batches: Iterable[Any], job: Any, find_rows: FindRows, predict: Callable[[FeatureBatch, Dict[str, np.ndarray]], Any]
) -> Dict[str, Any]:
    """``eval_samples``, ``auc`` and ``logloss`` of ``predict`` over ``batches`` of ``job`` (a JobSpec; rows read by
    ``find_rows`` {table: keys} -> {table: (rows, found)}). A model of several heads adds ``heads``: {head: {"auc",
    "logloss"}}, and its ``auc`` and ``logloss`` are its first head's (by name)."""
    labels: Dict[Any, List[np.ndarray]] = {}
    probs: Dict[Any, List[np.ndarray]] = {}
    heads = None
    for n, batch in enumerate(batches, 1):
        prepared = FeatureBatch.prepare(batch, job.features, f"evaluation batch {n}", job.inputs, job.heads)
        out = predict(prepared, found_rows(prepared, find_rows))
        heads = prepared.heads
        if heads is None:
            labels.setdefault(None, []).append(prepared.labels_of(None))
            probs.setdefault(None, []).append(np.asarray(out))
        else:
            for head in heads:
                labels.setdefault(head, []).append(prepared.labels_of(head))
                probs.setdefault(head, []).append(np.asarray(out[head]))
    if heads is None:
        return holdout_metrics(labels.get(None, []), probs.get(None, []))
    per_head = {head: holdout_metrics(labels[head], probs[head]) for head in heads}
    first = per_head[heads[0]]
    return {
        "eval_samples": first["eval_samples"],
        "auc": first["auc"],
        "logloss": first["logloss"],
        "heads": {head: {"auc": m["auc"], "logloss": m["logloss"]} for head, m in per_head.items()},
    }
