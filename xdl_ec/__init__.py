"""xdl-ec: a sparse CTR-model trainer whose fault tolerance comes from erasure codes."""

__version__ = "0.1.0"
from . import codec
from .table import EmbeddingTable
from . import optim, init
from .table_config import Table
from .feature import Feature
from .feature_batch import InputError
from .dense_model import ModelError
from .cache_config import Cache
from .cluster import Cluster
from .job import Job
from .saved_run import SaveMismatch
from .trained_model import TrainedModel

#: ``xdl_ec.load(DIR, job=None)``: the model of the newest save under DIR (see :meth:`TrainedModel.load`).
load = TrainedModel.load


def save(job: Job, directory: str, keep: int = 2) -> str:
    """``job.save(directory, keep)``: the last fit's model as the newest save under ``directory``."""
    return job.save(directory, keep)


# XDL-shaped API: xdl_ec.embedding, the optimizers and initializers by XDL's names, and what a script ported from
# XDL needs to run as a job (xdl_job, layers, losses, tf_wrapper); TF is imported on first embedding() or xdl_job().
from .xdl import (Adagrad, Adam, Constant, Ftrl, Momentum, Ones, RandomUniform, SGD, TruncatedNormal, VarType, Zeros,
                  embedding, layers, losses, set_sparse_optimizer, tf_wrapper, xdl_job)
from typing import NoReturn


def __getattr__(name: str) -> NoReturn:
    """XDL names the port has no counterpart for: an error that says what to do instead."""
    from .xdl import missing

    raise missing(name)


__all__ = ["Cache", "Cluster", "EmbeddingTable", "Feature", "InputError", "Job", "ModelError", "SaveMismatch", "Table",
           "TrainedModel", "codec", "embedding", "init", "load", "optim", "save"]
