"""``xdl_ec.load(DIR, job=None)``: the model of the newest save under DIR, as a :class:`TrainedModel`."""

from __future__ import annotations

import os
from typing import Any, Union

from xdl_ec.job.job_source import job_of
from xdl_ec.job.local_tables import LocalTables
from xdl_ec.job.trained_model import TrainedModel
from xdl_ec.keep.saved_run import SavedRun
from xdl_ec.model.dense_model import DenseModel
from xdl_ec.model.job_spec import JobSpec


def load(directory: Union[str, os.PathLike], job: Any = None) -> TrainedModel:
    """The model of the newest save under ``directory`` (a save root or one save); ``job``: the Job (or JobSpec)
    that saved it, needed when the save names no script or built-in job (see :mod:`xdl_ec.job.job_source`).
    Everything is verified before anything is built; a save of another job is a
    :class:`~xdl_ec.keep.saved_run.SaveMismatch`."""
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
                table.load_rows(rows)  # a bounded table's eviction words and pending ids too
        dense = DenseModel(
            spec.model_fn,
            spec.dense_optimizer,
            spec.dense_learning_rate,
            saved.signature,
            spec.dims(),
            spec.combiners(),
            saved.seed,
        )
        dense.load_state(*saved.dense_state())
        return TrainedModel(spec, tables, dense, saved.signature)
    except BaseException:
        tables.close()
        raise
