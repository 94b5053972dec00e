"""TrainedModel: a job's trained tables and dense model in this process, for prediction and evaluation.

Prediction never inserts rows: an id never trained reads the default row, all zeros (see
:mod:`xdl_ec.evaluation`).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

import numpy as np

from .dense_model import DenseModel
from .evaluation import evaluate_batches
from .feature_batch import FeatureBatch
from .job_spec import JobSpec
from .local_tables import LocalTables
from .model_step import ModelStep


class TrainedModel:
    """``tables`` (a LocalTables holding every trained row) and ``dense`` (the trained DenseModel) of ``job``."""

    def __init__(self, job: JobSpec, tables: LocalTables, dense: DenseModel, signature: Any) -> None:
        self.job, self.tables, self.dense = job, tables, dense
        self._step = ModelStep(dense.model, job.features, job.table_names, job.loss, signature)

    def _rows(self, batch: FeatureBatch) -> Dict[str, np.ndarray]:
        found = self.tables.find_rows(batch.keys)
        return {t: np.where(np.asarray(f, dtype=bool)[:, None], r, np.float32(0)) for t, (r, f) in found.items()}

    def predict(self, batch: Any) -> np.ndarray:
        """Probabilities [B] of one dict batch shaped like the job's input."""
        prepared = FeatureBatch.prepare(batch, self.job.features, "predict")
        return self._step.predict(prepared, self._rows(prepared))

    def evaluate(self, batches: Iterable[Any]) -> Dict[str, Any]:
        """``eval_samples``, ``auc`` and ``logloss`` over ``batches``."""
        return evaluate_batches(batches, self.job.features, self.tables.find_rows, self._step.predict)

    def exports(self) -> List[List[Dict[str, np.ndarray]]]:
        return self.tables.exports()

    def close(self) -> None:
        self.tables.close()
