"""Criteo-shaped training data: the raw TSV reader and a seeded synthetic generator, same batch format."""

from .criteo import BadLineError, CriteoReader
from .schema import NUM_DENSE, NUM_SPARSE, Batch, categorical_keys
from .synthetic import CRITEO_KAGGLE_CARDINALITIES, SyntheticCriteo

__all__ = ["Batch", "BadLineError", "CriteoReader", "SyntheticCriteo", "CRITEO_KAGGLE_CARDINALITIES",
           "NUM_DENSE", "NUM_SPARSE", "categorical_keys"]
