"""``xdl_ec.codec``: the erasure codec (implemented in :mod:`xdl_ec.sparse.codec`), at the path scripts import."""

from xdl_ec.sparse.codec import MATRICES, ErasureCode

__all__ = ["ErasureCode", "MATRICES"]
