"""xdl-ec: a sparse CTR-model trainer whose fault tolerance comes from erasure codes."""

__version__ = "0.1.0"
from . import codec
from .table import EmbeddingTable
from . import optim, init
from . import parity
