"""TrainedModel: a job's trained tables and dense model in this process, for prediction and evaluation.

Prediction never inserts rows: an id never trained reads the default row, all zeros (see
:mod:`xdl_ec.evaluation`).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Union

import numpy as np

from .dense_model import DenseModel
from .evaluation import evaluate_batches, found_rows
from .feature_batch import FeatureBatch
from .job_spec import JobSpec
from .local_tables import LocalTables
from .model_step import ModelStep
from .saved_run import SavedRun


class TrainedModel:
    """``tables`` (a LocalTables holding every trained row) and ``dense`` (the trained DenseModel) of ``job``."""

    def __init__(self, job: JobSpec, tables: LocalTables, dense: DenseModel, signature: Any) -> None:
        self.job, self.tables, self.dense, self.signature = job, tables, dense, signature
        self._step = ModelStep(dense.model, job.features, job.table_names, job.loss, signature)

    @classmethod
    def load(cls, directory: Union[str, os.PathLike], job: Any = None) -> "TrainedModel":
        """The model of the newest save under ``directory`` (a save root or one save); ``job``: the Job (or
        JobSpec) that saved it, needed when the save names no script or built-in job (see
        :mod:`xdl_ec.job_source`). Everything is verified before anything is built; a save of another job is a
        :class:`~xdl_ec.saved_run.SaveMismatch`."""
        from .job_source import job_of

        saved = SavedRun.open(directory)
        if job is None:
            job = job_of(saved.source, str(saved.directory))
        spec = getattr(job, "spec", job)
        if not isinstance(spec, JobSpec):
            raise TypeError(f"job: must be an xdl_ec.Job, got {type(job).__name__}")
        saved.check_job(spec)
        saved.verify()
        tables = LocalTables(spec.tables)
        try:
            for name, table in tables.tables.items():
                for rows in saved.rows(name):
                    table.load(rows["keys"], rows["values"], rows["state"])
            dense = DenseModel(spec.model_fn, spec.dense_optimizer, spec.dense_learning_rate, saved.signature,
                               spec.dims(), spec.combiners(), saved.seed)
            dense.load_state(*saved.dense_state())
            return cls(spec, tables, dense, saved.signature)
        except BaseException:
            tables.close()
            raise

    def predict(self, batch: Any) -> np.ndarray:
        """Probabilities [B] of one dict batch shaped like the job's input."""
        prepared = FeatureBatch.prepare(batch, self.job.features, "predict")
        return self._step.predict(prepared, found_rows(prepared, self.tables.find_rows))

    def evaluate(self, batches: Iterable[Any]) -> Dict[str, Any]:
        """``eval_samples``, ``auc`` and ``logloss`` over ``batches``."""
        return evaluate_batches(batches, self.job.features, self.tables.find_rows, self._step.predict)

    def export(self, directory: Union[str, os.PathLike]) -> str:
        """A TensorFlow SavedModel of this model for serving without xdl-ec (see :mod:`xdl_ec.serving_export`);
        returns its path."""
        from .serving_export import export_saved_model  # it imports this module

        return str(export_saved_model(self, directory))

    def exports(self) -> List[List[Dict[str, np.ndarray]]]:
        return self.tables.exports()

    def close(self) -> None:
        self.tables.close()
