"""TrainedModel: a job's trained tables and dense model in this process, for prediction and evaluation.

Prediction never inserts rows: an id never trained reads the default row, all zeros (see
:mod:`xdl_ec.evaluation`).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

import numpy as np

from .dense_model import DenseModel
from .evaluation import evaluate_batches, found_rows
from .feature_batch import FeatureBatch
from .job_spec import JobSpec
from .local_tables import LocalTables
from .model_step import ModelStep


class TrainedModel:
    """``tables`` (a LocalTables holding every trained row) and ``dense`` (the trained DenseModel) of ``job``."""

    def __init__(self, job: JobSpec, tables: LocalTables, dense: DenseModel, signature: Any) -> None:
        self.job, self.tables, self.dense = job, tables, dense
        self._step = ModelStep(dense.model, job.features, job.table_names, job.loss, signature)

    def predict(self, batch: Any) -> np.ndarray:
        """Probabilities [B] of one dict batch shaped like the job's input."""
        prepared = FeatureBatch.prepare(batch, self.job.features, "predict")
        return self._step.predict(prepared, found_rows(prepared, self.tables.find_rows))

    def evaluate(self, batches: Iterable[Any]) -> Dict[str, Any]:
        """``eval_samples``, ``auc`` and ``logloss`` over ``batches``."""
        return evaluate_batches(batches, self.job.features, self.tables.find_rows, self._step.predict)

    def exports(self) -> List[List[Dict[str, np.ndarray]]]:
        return self.tables.exports()

    def close(self) -> None:
        self.tables.close()
