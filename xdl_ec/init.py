"""``xdl_ec.init``: the row initialisers of embedding tables (implemented in :mod:`xdl_ec.sparse.init`)."""

from xdl_ec.sparse.init import NAMES, Constant, Initializer, RandomNormal, RandomUniform, TruncatedNormal, Zeros, get

__all__ = ["Initializer", "Zeros", "Constant", "RandomUniform", "TruncatedNormal", "RandomNormal", "get", "NAMES"]
