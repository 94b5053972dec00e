"""``xdl_ec.optim``: the sparse optimizers of embedding tables (implemented in :mod:`xdl_ec.sparse.optim`)."""

from xdl_ec.sparse.optim import NAMES, SGD, Adagrad, Adam, Ftrl, Momentum, Optimizer, get

__all__ = ["Optimizer", "SGD", "Momentum", "Adagrad", "Adam", "Ftrl", "get", "NAMES"]
