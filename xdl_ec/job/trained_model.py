"""TrainedModel: a job's trained tables and dense model in this process, for prediction and evaluation.

Prediction never inserts rows: an id never trained reads the default row, all zeros (see
:mod:`xdl_ec.model.evaluation`).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional, Union

import numpy as np

from xdl_ec.job.local_tables import LocalTables
from xdl_ec.job.serving_export import export_saved_model
from xdl_ec.model.dense_model import DenseModel, signature_extras
from xdl_ec.model.evaluation import evaluate_batches, found_rows
from xdl_ec.model.feature_batch import FeatureBatch
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.model.model_step import ModelStep


class TrainedModel:
    """``tables`` (a LocalTables holding every trained row: in RAM, or within a budget with the rest in a spill dir
    when the run was budgeted) and ``dense`` (the trained DenseModel) of ``job``."""

    def __init__(self, job: JobSpec, tables: LocalTables, dense: DenseModel, signature: Any) -> None:
        self.job, self.tables, self.dense, self.signature = job, tables, dense, signature
        self._step = ModelStep.of(job, dense, signature)

    def predict(self, batch: Any) -> Union[np.ndarray, Dict[str, np.ndarray]]:
        """Probabilities [B] of one dict batch shaped like the job's input (its labels, if any, are not read), or
        {head: probabilities [B]} for a model of several heads."""
        prepared = FeatureBatch.prepare(
            batch, self.job.features, "predict", self.job.inputs, signature_extras(self.signature)[0], labelled=False
        )
        return self._step.predict(prepared, found_rows(prepared, self.tables.find_rows))

    def evaluate(self, batches: Iterable[Any]) -> Dict[str, Any]:
        """``eval_samples``, ``auc`` and ``logloss`` over ``batches``."""
        return evaluate_batches(batches, self.job, self.tables.find_rows, self._step.predict)

    def export(self, directory: Union[str, os.PathLike], drop_rows_below_count: Optional[int] = None) -> str:
        """A TensorFlow SavedModel of this model for serving without xdl-ec (see :mod:`xdl_ec.job.serving_export`);
        returns its path. ``drop_rows_below_count`` N leaves out rows of ids seen fewer than N times (tables with
        admit / evict rules keep those counts)."""
        return str(export_saved_model(self, directory, drop_rows_below_count))

    def exports(self) -> List[List[Dict[str, np.ndarray]]]:
        return self.tables.exports()

    def close(self) -> None:
        self.tables.close()
