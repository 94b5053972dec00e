"""``tf.compat.v1.nn.rnn_cell`` in a ported script: Keras 3 refuses TF 1's cells there; importing the port after
TensorFlow (as XDL's scripts import them) or running a model function makes it TensorFlow's own TF 1 cells, the ones
XDL's ``tensorflow.python.ops.rnn_cell_impl`` imports name."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import pytest

tf = pytest.importorskip("tensorflow")

from tensorflow.python.ops import rnn_cell_impl  # noqa: E402 - what XDL's DIEN utils.py imports its RNNCell from

from xdl_ec.xdl.tf1_rnn_cells import restore_tf1_rnn_cells  # noqa: E402

SCRIPT = textwrap.dedent("""
    import tensorflow as tf
    from tensorflow.python.ops import rnn_cell_impl
    try:
        tf.compat.v1.nn.rnn_cell.GRUCell
    except AttributeError as refused:
        print("before:", refused)
    import xdl_ec.xdl as xdl
    cells = tf.compat.v1.nn.rnn_cell
    print("after:", cells.GRUCell is rnn_cell_impl.GRUCell, cells.RNNCell is rnn_cell_impl.RNNCell)
""")


@pytest.mark.slow  # a fresh interpreter imports TensorFlow (tens of seconds on a loaded machine)
def test_a_script_importing_the_port_after_tensorflow_gets_tensorflows_own_tf1_cells() -> None:
    done = subprocess.run(
        [sys.executable, "-P", "-c", SCRIPT],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines == ["before: `GRUCell` is not available with Keras 3.", "after: True True"]


def keras3_loader() -> object:
    """What TensorFlow's tf.compat.v1 puts at nn.rnn_cell when it is imported (its __init__'s own call)."""
    from tensorflow.python.util.lazy_loader import KerasLazyLoader

    v1 = sys.modules["tensorflow._api.v2.compat.v1"]
    return KerasLazyLoader(vars(v1), submodule="__internal__.legacy.rnn_cell", name="rnn_cell", mode="v1")


def test_importing_the_port_after_tensorflow_replaces_the_loader_keras_3_refuses_cells_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tf.compat.v1.nn, "rnn_cell", keras3_loader())
    with pytest.raises(AttributeError, match="`GRUCell` is not available with Keras 3"):
        tf.compat.v1.nn.rnn_cell.GRUCell  # noqa: B018 - what a script meets without the port
    importlib.reload(importlib.import_module("xdl_ec.xdl"))  # the port's import, TensorFlow imported before it
    assert tf.compat.v1.nn.rnn_cell.GRUCell is rnn_cell_impl.GRUCell


def test_restoring_is_idempotent_and_gives_the_cells_xdl_imports() -> None:
    restore_tf1_rnn_cells()
    restore_tf1_rnn_cells()
    cells = tf.compat.v1.nn.rnn_cell
    assert (cells.GRUCell, cells.LSTMCell, cells.RNNCell) == (
        rnn_cell_impl.GRUCell,
        rnn_cell_impl.LSTMCell,
        rnn_cell_impl.RNNCell,
    )
