"""Criteo-shaped training data: the raw TSV reader and a seeded synthetic generator (same batch format), the
train/eval view a trainer consumes, an endless stream of files (``stream``), and a background prefetcher."""

from xdl_ec.data.criteo import BadLineError, CriteoReader
from xdl_ec.data.file_stream import FileStream, StreamError, stream
from xdl_ec.data.prefetcher import Prefetcher
from xdl_ec.data.schema import NUM_DENSE, NUM_SPARSE, Batch, categorical_keys
from xdl_ec.data.source import TrainingData
from xdl_ec.data.synthetic import CRITEO_KAGGLE_CARDINALITIES, SyntheticCriteo

__all__ = [
    "Batch",
    "BadLineError",
    "CriteoReader",
    "SyntheticCriteo",
    "TrainingData",
    "Prefetcher",
    "CRITEO_KAGGLE_CARDINALITIES",
    "NUM_DENSE",
    "NUM_SPARSE",
    "categorical_keys",
    "FileStream",
    "StreamError",
    "stream",
]
