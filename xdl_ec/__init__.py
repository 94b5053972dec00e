"""xdl-ec: a sparse CTR-model trainer whose fault tolerance comes from erasure codes."""

__version__ = "0.1.0"
from . import codec
from .table import EmbeddingTable
from . import optim, init
from .table_config import Table
from .feature import Feature
from .feature_batch import InputError
from .dense_model import ModelError
from .cluster import Cluster
from .job import Job
from .saved_run import SaveMismatch
from .trained_model import TrainedModel

#: ``xdl_ec.load(DIR, job=None)``: the model of the newest save under DIR (see :meth:`TrainedModel.load`).
load = TrainedModel.load


def save(job: Job, directory: str, keep: int = 2) -> str:
    """``job.save(directory, keep)``: the last fit's model as the newest save under ``directory``."""
    return job.save(directory, keep)


# XDL-shaped API: xdl_ec.embedding and the optimizers by XDL's names (TF is imported on first embedding()).
from .xdl import Adagrad, Adam, Ftrl, Momentum, SGD, embedding, set_sparse_optimizer

__all__ = ["Cluster", "EmbeddingTable", "Feature", "InputError", "Job", "ModelError", "SaveMismatch", "Table",
           "TrainedModel", "codec", "embedding", "init", "load", "optim", "save"]
