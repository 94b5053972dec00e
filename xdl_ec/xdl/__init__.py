"""XDL-shaped API for scripts ported from Alibaba's XDL (``import xdl_ec.xdl as xdl``): ``xdl.embedding``, XDL's
optimizer and initializer names, layers, losses, ``tf_wrapper`` and ``xdl_job`` (see :mod:`xdl_ec.xdl.api`)."""

import importlib
import sys
from typing import Any

from xdl_ec.xdl.api import *  # noqa: F401,F403 - the port's names, listed in api.__all__
from xdl_ec.xdl.api import __all__, missing  # noqa: F401 - __all__: this package's names are api's
from xdl_ec.xdl.tf1_rnn_cells import restore_tf1_rnn_cells as _restore_tf1_rnn_cells

if "tensorflow" in sys.modules:  # a script that imported TF first may subclass tf.compat.v1.nn.rnn_cell.RNNCell
    _restore_tf1_rnn_cells()  # at its top level; without TF here, the model function's run restores them


def __getattr__(name: str) -> Any:
    """``rnn`` (TF 1's GRU cell and dynamic_rnn, imported on first use: it imports TensorFlow); XDL names the port
    has no counterpart for: an error that says what to do instead."""
    if name == "rnn":
        return importlib.import_module("xdl_ec.xdl.rnn")
    raise missing(name)
