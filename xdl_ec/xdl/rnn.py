"""TF 1's GRU cell and ``dynamic_rnn`` for ported XDL scripts (DIEN's interest extractor and evolution layers),
unrolled in Python, and TF 1's ``_Linear`` for a script's own cells.

A ported script may keep TensorFlow's own TF 1 cells (``tf.compat.v1.nn.rnn_cell.GRUCell``, its ``RNNCell`` to
subclass, ``tf.compat.v1.nn.dynamic_rnn`` or XDL's own rnn.py: see :mod:`xdl_ec.xdl.tf1_rnn_cells`) or use these:
``GRUCell`` -> ``xdl.rnn.GRUCell``, XDL's ``rnn.dynamic_rnn`` (TF's with ``att_scores``) -> ``xdl.rnn.dynamic_rnn``
and DIEN's ``VecAttGRUCell`` (the AUGRU of its utils.py) -> ``xdl.rnn.VecAttGRUCell``. The arithmetic is TF 1's
GRUCell's; its variables are ``tf.compat.v1.get_variable``'s, by TF 1's names (``<scope>/gru_cell/gates/kernel``,
``.../gates/bias``, ``.../candidate/kernel``, ``.../candidate/bias``), so in a model function they are the model's,
made once and shared by name. ``dynamic_rnn`` unrolls over the batch's time steps (fixed per model: a padded
history), with TF 1's ``sequence_length`` semantics: past an example's length its outputs are zeros and its state
is carried unchanged. :class:`Linear` is TF 1's ``_Linear`` (from ``tensorflow.contrib``, gone in TF 2), which
DIEN's utils.py builds its cells' gates with.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import tensorflow as tf


class Linear:
    """TF 1's ``_Linear`` (``tensorflow.contrib.rnn.python.ops.core_rnn_cell._Linear``, which XDL's DIEN cells build
    their gates with; TF 2 has none): ``Linear(args, output_size, build_bias, bias_initializer=None,
    kernel_initializer=None)`` makes ``kernel`` [sum of the args' depths, output_size] and ``bias`` [output_size]
    (zeros by default) by ``tf.compat.v1.get_variable`` in the current variable scope; ``linear(args)`` is
    ``concat(args, 1) @ kernel + bias``. ``args``: a [B, depth] tensor or a list of them, depths known."""

    def __init__(
        self,
        args: Any,
        output_size: int,
        build_bias: bool,
        bias_initializer: Any = None,
        kernel_initializer: Any = None,
    ) -> None:
        self._is_sequence = isinstance(args, (list, tuple))
        flat = list(args) if self._is_sequence else [args]
        if not flat:
            raise ValueError("Linear: `args` must be specified (a [B, depth] tensor or a list of them)")
        depth = 0
        for arg in flat:
            shape = arg.shape
            if shape.rank != 2 or shape[1] is None:
                raise ValueError(
                    f"Linear: each arg must be [B, depth] with its depth known, got shapes {[a.shape for a in flat]}"
                )
            depth += int(shape[1])
        dtype = flat[0].dtype
        self._build_bias = build_bias
        self._weights = tf.compat.v1.get_variable(
            "kernel", [depth, output_size], dtype=dtype, initializer=kernel_initializer
        )
        self._biases = (
            tf.compat.v1.get_variable(
                "bias",
                [output_size],
                dtype=dtype,
                initializer=bias_initializer or tf.compat.v1.constant_initializer(0.0),
            )
            if build_bias
            else None
        )

    def __call__(self, args: Any) -> Any:
        flat = list(args) if self._is_sequence else [args]
        res = tf.matmul(flat[0] if len(flat) == 1 else tf.concat(flat, 1), self._weights)
        return tf.nn.bias_add(res, self._biases) if self._build_bias else res


class GRUArithmetic:
    """TF 1's GRU cell's settings, variables and gates, shared by :class:`GRUCell` and :class:`VecAttGRUCell`."""

    def __init__(
        self,
        num_units: int,
        activation: Any = None,
        reuse: Any = None,
        kernel_initializer: Any = None,
        bias_initializer: Any = None,
        name: Optional[str] = None,
    ) -> None:
        if isinstance(num_units, bool) or not isinstance(num_units, int) or num_units < 1:
            raise ValueError(f"GRUCell: num_units must be a positive int, got {num_units!r}")
        self.num_units = num_units
        self.activation = activation or tf.tanh
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.name = name or "gru_cell"

    @property
    def state_size(self) -> int:
        return self.num_units

    @property
    def output_size(self) -> int:
        return self.num_units

    def _linear(self, scope: str, inputs: Any, units: int, bias: Any) -> Any:
        with tf.compat.v1.variable_scope(scope):
            kernel = tf.compat.v1.get_variable(
                "kernel", [int(inputs.shape[-1]), units], initializer=self.kernel_initializer
            )
            offset = tf.compat.v1.get_variable("bias", [units], initializer=self.bias_initializer or bias)
        return tf.matmul(inputs, kernel) + offset

    def gates(self, inputs: Any, state: Any) -> Tuple[Any, Any]:
        """(reset r, update u) of TF 1's GRU: sigmoid of one linear map of [inputs, state] (bias 1.0 by default)."""
        value = tf.sigmoid(
            self._linear(
                "gates", tf.concat([inputs, state], 1), 2 * self.num_units, tf.compat.v1.constant_initializer(1.0)
            )
        )
        reset, update = tf.split(value, 2, axis=1)
        return reset, update

    def candidate(self, inputs: Any, reset_state: Any) -> Any:
        return self.activation(
            self._linear(
                "candidate", tf.concat([inputs, reset_state], 1), self.num_units, tf.compat.v1.zeros_initializer()
            )
        )


class GRUCell(GRUArithmetic):
    """TF 1's ``tf.nn.rnn_cell.GRUCell(num_units, activation=None, reuse=None, kernel_initializer=None,
    bias_initializer=None, name=None)``: ``cell(inputs, state)`` -> ``(output, new_state)``, both [B, num_units]."""

    def __call__(self, inputs: Any, state: Any, scope: Any = None) -> Tuple[Any, Any]:
        with tf.compat.v1.variable_scope(scope or self.name):
            reset, update = self.gates(inputs, state)
            c = self.candidate(inputs, reset * state)
            new_h = update * state + (1.0 - update) * c
        return new_h, new_h


class VecAttGRUCell(GRUArithmetic):
    """DIEN's AUGRU (XDL's ``VecAttGRUCell``): a GRU whose update gate is scaled by the attention score of the
    step, ``cell(inputs, state, att_score)`` with ``att_score`` [B, 1]."""

    def __call__(self, inputs: Any, state: Any, att_score: Any = None, scope: Any = None) -> Tuple[Any, Any]:
        if att_score is None:
            raise ValueError("VecAttGRUCell: att_score is required (dynamic_rnn(..., att_scores=[B, T, 1]))")
        with tf.compat.v1.variable_scope(scope or self.name):
            reset, update = self.gates(inputs, state)
            c = self.candidate(inputs, reset * state)
            update = (1.0 - att_score) * update
            new_h = update * state + (1.0 - update) * c
        return new_h, new_h


def dynamic_rnn(
    cell: Any,
    inputs: Any,
    att_scores: Any = None,
    sequence_length: Any = None,
    initial_state: Any = None,
    dtype: Any = None,
    parallel_iterations: Any = None,
    swap_memory: bool = False,
    time_major: bool = False,
    scope: Any = None,
) -> Tuple[Any, Any]:
    """XDL's ``dynamic_rnn`` (TF 1's, with ``att_scores`` [B, T, 1] passed to the cell step by step): ``(outputs
    [B, T, units], final state [B, units])`` of ``inputs`` [B, T, depth] (T known: a padded history).
    ``parallel_iterations`` and ``swap_memory`` tune TF 1's loop; there is no loop to tune here."""
    if time_major:
        raise ValueError("dynamic_rnn: time_major=True is not supported: give inputs [B, T, depth]")
    steps = inputs.shape[1]
    if steps is None:
        raise ValueError("dynamic_rnn: inputs [B, T, depth] need a known T (pad the reader's sequences)")
    with tf.compat.v1.variable_scope(scope or "rnn"):
        state = (
            initial_state
            if initial_state is not None
            else tf.zeros([tf.shape(inputs)[0], cell.state_size], dtype or inputs.dtype)
        )
        outputs = []
        for t in range(int(steps)):
            if att_scores is None:
                out, new_state = cell(inputs[:, t, :], state)
            else:
                out, new_state = cell(inputs[:, t, :], state, att_scores[:, t, :])
            if sequence_length is not None:  # past its length an example outputs zeros and keeps its state
                inside = tf.expand_dims(t < tf.cast(sequence_length, tf.int32), 1)
                out = tf.where(inside, out, tf.zeros_like(out))
                new_state = tf.where(inside, new_state, state)
            outputs.append(out)
            state = new_state
    return tf.stack(outputs, 1), state
