"""xdl-ec: a sparse CTR-model trainer whose fault tolerance comes from erasure codes.

The package's rooms, lowest first (each imports only rooms below it; docs/design/layers.md): settings, sparse, net,
data, tf, models, model, keep, ps, ft, job, builtin, xdl, benchmark; the root holds the public names, the CLI and
the public namespaces ``xdl_ec.optim``, ``xdl_ec.init`` and ``xdl_ec.keras``.
"""

from typing import NoReturn

from .tf.startup_log import quiet_tensorflow_startup

quiet_tensorflow_startup()  # before anything here imports TensorFlow (TF_CPP_MIN_LOG_LEVEL, its first import's lines)

from . import init, optim
from .job.cluster import Cluster
from .job.job import Job
from .job.loading import load
from .job.trained_model import TrainedModel
from .keep.saved_run import SaveMismatch
from .model.dense_model import ModelError
from .model.feature import Feature
from .model.feature_batch import InputError
from .model.side_input import Input
from .sparse import codec
from .sparse.cache_config import Cache
from .sparse.row_rules import Admit, Evict
from .sparse.table import EmbeddingTable
from .sparse.table_config import Table

# XDL-shaped API: xdl_ec.embedding, the optimizers and initializers by XDL's names, and what a script ported from
# XDL needs to run as a job (xdl_job, layers, losses, tf_wrapper); TF is imported on first embedding() or xdl_job().
from .xdl.api import (
    SGD,
    Adagrad,
    Adam,
    Constant,
    Ftrl,
    Momentum,
    Ones,
    RandomUniform,
    SparseTensor,
    TruncatedNormal,
    VarType,
    Zeros,
    embedding,
    layers,
    losses,
    missing,
    set_sparse_optimizer,
    tf_wrapper,
    xdl_job,
)

__version__ = "0.1.0"


def save(job: Job, directory: str, keep: int = 2) -> str:
    """``job.save(directory, keep)``: the last fit's model as the newest save under ``directory``."""
    return job.save(directory, keep)


def __getattr__(name: str) -> NoReturn:
    """XDL names the port has no counterpart for: an error that says what to do instead."""
    raise missing(name)


__all__ = [
    "Cache",
    "Cluster",
    "EmbeddingTable",
    "Feature",
    "Input",
    "InputError",
    "Job",
    "ModelError",
    "SaveMismatch",
    "Table",
    "TrainedModel",
    "codec",
    "embedding",
    "init",
    "load",
    "optim",
    "save",
    # the XDL port's names (xdl_ec.xdl)
    "SGD",
    "Adagrad",
    "Adam",
    "Constant",
    "Ftrl",
    "Momentum",
    "Ones",
    "RandomUniform",
    "SparseTensor",
    "TruncatedNormal",
    "VarType",
    "Zeros",
    "layers",
    "losses",
    "set_sparse_optimizer",
    "tf_wrapper",
    "xdl_job",
]
__all__ += ["Admit", "Evict"]  # bounded tables (xdl_ec.sparse.row_rules)
