"""``tf.compat.v1.nn.rnn_cell`` for ported XDL scripts under Keras 3: TensorFlow's own TF 1 RNN cells.

TensorFlow 2.21 still ships TF 1's cells (``GRUCell``, ``LSTMCell``, ``RNNCell``, ... in
``tensorflow.python.keras.layers.legacy_rnn``: the module ``tensorflow.compat.v1.nn.rnn_cell`` and XDL's own
``from tensorflow.python.ops.rnn_cell_impl import *`` import them from there), but its ``tf.compat.v1`` replaces the
attribute ``nn.rnn_cell`` by a loader of Keras' copy of them: tf_keras's when ``TF_USE_LEGACY_KERAS=1`` (which makes
``tf.keras`` tf_keras too, and the job's models are Keras 3's: every job is then refused), Keras 3's otherwise, which
has none ("`GRUCell` is not available with Keras 3"). Installing tf_keras without that variable changes nothing.
So the port puts TensorFlow's own module back under that name where Keras 3's loader stands; in a model function
the cells' variables are ``tf.compat.v1.get_variable``'s, the model's by full scope name, as in XDL's TF backend.
"""

from __future__ import annotations

import importlib

#: where TensorFlow's generated API keeps its TF 1 ``nn.rnn_cell`` module (the legacy cells, whatever Keras is)
TF1_RNN_CELL_MODULE = "tensorflow._api.v2.compat.v1.nn.rnn_cell"


def restore_tf1_rnn_cells() -> None:
    """Make ``tf.compat.v1.nn.rnn_cell`` TensorFlow's own TF 1 cells if Keras 3's loader refuses them; where it
    serves cells (tf_keras under TF_USE_LEGACY_KERAS=1) it is left alone. Idempotent."""
    import tensorflow as tf

    v1_nn = tf.compat.v1.nn
    try:
        getattr(v1_nn.rnn_cell, "GRUCell")  # noqa: B009 - the loader resolves (or refuses) on this read
    except AttributeError:  # Keras 3's "not available with Keras 3": nothing else reads the name then
        v1_nn.rnn_cell = importlib.import_module(TF1_RNN_CELL_MODULE)
