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
# XDL-shaped API: xdl_ec.embedding and the optimizers by XDL's names (TF is imported on first embedding()).
from .xdl import Adagrad, Adam, Ftrl, Momentum, SGD, embedding, set_sparse_optimizer

__all__ = ["Cluster", "EmbeddingTable", "Feature", "InputError", "Job", "ModelError", "Table", "codec", "embedding",
           "init", "optim"]
