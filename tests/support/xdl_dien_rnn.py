# Copyright (C) 2016-2018 Alibaba Group Holding Limited
# Copyright 2015 The TensorFlow Authors. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""XDL's DIEN rnn.py (alibaba/x-deeplearning: xdl-algorithm-solution/DIEN/script/rnn.py): TF 1's ``dynamic_rnn``
with ``att_scores`` handed to the cell step by step, its while loop and TensorArrays as written, cut to what DIEN
calls and ported by the TF 1 -> TF 2 renames only (docs/porting-xdl.md):

- ``Dimension.value`` -> ``tensor_shape.dimension_value(...)`` (TF 2's shapes hold ints);
- ``nest.is_sequence`` -> ``nest.is_nested``; ``array_ops.stack`` -> ``array_ops_stack.stack``;
- ``control_flow_ops.while_loop`` / ``cond`` / ``Assert`` -> ``tf.compat.v1.while_loop`` / ``cond`` / ``Assert``;
- the scope's caching device and the check of ``sequence_length``'s shape only in graph mode, as TF 2's own
  ``dynamic_rnn`` guards them (the port also runs the model function eagerly, on the first batch: TF 2 refuses
  caching devices there and eager tensors have no names), and the TensorArrays' name prefix empty where the name
  scope has none (eagerly).

``rnn_cell_impl`` (``_concat``, ``assert_like_rnncell``) is imported as XDL wrote it: TF 2.21 still has it.
"""
# ruff: noqa: ANN001, ANN201, ANN202, E731 - XDL's code as written: untyped, lambdas

from __future__ import absolute_import, division, print_function

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import dtypes, ops, tensor_shape
from tensorflow.python.ops import array_ops, array_ops_stack, math_ops, rnn_cell_impl, tensor_array_ops
from tensorflow.python.ops import variable_scope as vs
from tensorflow.python.util import nest

# pylint: disable=protected-access
_concat = rnn_cell_impl._concat
assert_like_rnncell = rnn_cell_impl.assert_like_rnncell
# pylint: enable=protected-access


def _transpose_batch_time(x):
    """Transpose the batch and time dimensions of a Tensor, keeping its static shape."""
    x_static_shape = x.get_shape()
    if x_static_shape.ndims is not None and x_static_shape.ndims < 2:
        raise ValueError("Expected input tensor %s to have rank at least 2, but saw shape: %s" % (x, x_static_shape))
    x_rank = array_ops.rank(x)
    x_t = array_ops.transpose(x, array_ops.concat(([1, 0], math_ops.range(2, x_rank)), axis=0))
    x_t.set_shape(
        tensor_shape.TensorShape(
            [tensor_shape.dimension_value(x_static_shape[1]), tensor_shape.dimension_value(x_static_shape[0])]
        ).concatenate(x_static_shape[2:])
    )
    return x_t


def _best_effort_input_batch_size(flat_input):
    """The static batch size of time-major inputs if known, else the dynamic one."""
    for input_ in flat_input:
        shape = input_.shape
        if shape.ndims is None:
            continue
        if shape.ndims < 2:
            raise ValueError("Expected input tensor %s to have rank at least 2" % input_)
        batch_size = tensor_shape.dimension_value(shape[1])
        if batch_size is not None:
            return batch_size
    # Fallback to the dynamic batch size of the first input.
    return array_ops.shape(flat_input[0])[1]


def _infer_state_dtype(explicit_dtype, state):
    """The dtype of an RNN state."""
    if explicit_dtype is not None:
        return explicit_dtype
    elif nest.is_nested(state):
        inferred_dtypes = [element.dtype for element in nest.flatten(state)]
        if not inferred_dtypes:
            raise ValueError("Unable to infer dtype from empty state.")
        all_same = all([x == inferred_dtypes[0] for x in inferred_dtypes])
        if not all_same:
            raise ValueError(
                "State has tensors of different inferred_dtypes. Unable to infer a single representative dtype."
            )
        return inferred_dtypes[0]
    else:
        return state.dtype


# pylint: disable=unused-argument
def _rnn_step(
    time,
    sequence_length,
    min_sequence_length,
    max_sequence_length,
    zero_output,
    state,
    call_cell,
    state_size,
    skip_conditionals=False,
):
    """One step of a dynamic RNN minibatch: (output, state), past an example's length zeros and the state as it
    was."""
    # Convert state to a list for ease of use
    flat_state = nest.flatten(state)
    flat_zero_output = nest.flatten(zero_output)

    def _copy_one_through(output, new_output):
        # If the state contains a scalar value we simply pass it through.
        if output.shape.ndims == 0:
            return new_output
        copy_cond = time >= sequence_length
        with ops.colocate_with(new_output):
            return array_ops.where(copy_cond, output, new_output)

    def _copy_some_through(flat_new_output, flat_new_state):
        # Use broadcasting select to determine which values should get
        # the previous state & zero output, and which values should get
        # a calculated state & output.
        flat_new_output = [
            _copy_one_through(zero_output, new_output)
            for zero_output, new_output in zip(flat_zero_output, flat_new_output)
        ]
        flat_new_state = [_copy_one_through(state, new_state) for state, new_state in zip(flat_state, flat_new_state)]
        return flat_new_output + flat_new_state

    def _maybe_copy_some_through():
        """Run RNN step.  Pass through either no or some past state."""
        new_output, new_state = call_cell()

        nest.assert_same_structure(state, new_state)

        flat_new_state = nest.flatten(new_state)
        flat_new_output = nest.flatten(new_output)
        return tf.compat.v1.cond(
            # if t < min_seq_len: calculate and return everything
            time < min_sequence_length,
            lambda: flat_new_output + flat_new_state,
            # else copy some of it through
            lambda: _copy_some_through(flat_new_output, flat_new_state),
        )

    if skip_conditionals:
        # Instead of using conditionals, perform the selective copy at all time
        # steps.  This is faster when max_seq_len is equal to the number of unrolls
        # (which is typical for dynamic_rnn).
        new_output, new_state = call_cell()
        nest.assert_same_structure(state, new_state)
        new_state = nest.flatten(new_state)
        new_output = nest.flatten(new_output)
        final_output_and_state = _copy_some_through(new_output, new_state)
    else:
        empty_update = lambda: flat_zero_output + flat_state
        final_output_and_state = tf.compat.v1.cond(
            # if t >= max_seq_len: copy all state through, output zeros
            time >= max_sequence_length,
            empty_update,
            # otherwise calculation is required: copy some or all of it through
            _maybe_copy_some_through,
        )

    if len(final_output_and_state) != len(flat_zero_output) + len(flat_state):
        raise ValueError("Internal error: state and output were not concatenated correctly.")
    final_output = final_output_and_state[: len(flat_zero_output)]
    final_state = final_output_and_state[len(flat_zero_output) :]

    for output, flat_output in zip(final_output, flat_zero_output):
        output.set_shape(flat_output.get_shape())
    for substate, flat_substate in zip(final_state, flat_state):
        substate.set_shape(flat_substate.get_shape())

    final_output = nest.pack_sequence_as(structure=zero_output, flat_sequence=final_output)
    final_state = nest.pack_sequence_as(structure=state, flat_sequence=final_state)

    return final_output, final_state


def dynamic_rnn(
    cell,
    inputs,
    att_scores=None,
    sequence_length=None,
    initial_state=None,
    dtype=None,
    parallel_iterations=None,
    swap_memory=False,
    time_major=False,
    scope=None,
):
    """TF 1's ``tf.nn.dynamic_rnn`` of RNNCell ``cell`` over ``inputs``, with XDL's ``att_scores`` [B, T, 1]
    passed to the cell as its third argument at each step: (outputs, final state)."""
    assert_like_rnncell("cell", cell)

    # By default, time_major==False and inputs are batch-major: shaped
    #   [batch, time, depth]
    # For internal calculations, we transpose to [time, batch, depth]
    flat_input = nest.flatten(inputs)

    if not time_major:
        # (B,T,D) => (T,B,D)
        flat_input = [ops.convert_to_tensor(input_) for input_ in flat_input]
        flat_input = tuple(_transpose_batch_time(input_) for input_ in flat_input)

    parallel_iterations = parallel_iterations or 32
    if sequence_length is not None:
        sequence_length = math_ops.to_int32(sequence_length)
        if sequence_length.get_shape().ndims not in (None, 1):
            raise ValueError(
                "sequence_length must be a vector of length batch_size, but saw shape: %s" % sequence_length.get_shape()
            )
        sequence_length = array_ops.identity(  # Just to find it in the graph.
            sequence_length, name="sequence_length"
        )

    # Create a new scope in which the caching device is either
    # determined by the parent scope, or is set to place the cached
    # Variable using the same placement as for the rest of the RNN.
    with vs.variable_scope(scope or "rnn") as varscope:
        if not context.executing_eagerly() and varscope.caching_device is None:  # TF 2's own dynamic_rnn's guard
            varscope.set_caching_device(lambda op: op.device)
        batch_size = _best_effort_input_batch_size(flat_input)

        if initial_state is not None:
            state = initial_state
        else:
            if not dtype:
                raise ValueError("If there is no initial_state, you must give a dtype.")
            state = cell.zero_state(batch_size, dtype)

        def _assert_has_shape(x, shape):
            x_shape = array_ops.shape(x)
            packed_shape = array_ops_stack.stack(shape)
            return tf.compat.v1.Assert(
                math_ops.reduce_all(math_ops.equal(x_shape, packed_shape)),
                ["Expected shape for Tensor %s is " % x.name, packed_shape, " but saw shape: ", x_shape],
            )

        if not context.executing_eagerly() and sequence_length is not None:  # TF 2's own dynamic_rnn's guard
            # Perform some shape validation
            with ops.control_dependencies([_assert_has_shape(sequence_length, [batch_size])]):
                sequence_length = array_ops.identity(sequence_length, name="CheckSeqLen")

        inputs = nest.pack_sequence_as(structure=inputs, flat_sequence=flat_input)

        (outputs, final_state) = _dynamic_rnn_loop(
            cell,
            inputs,
            state,
            parallel_iterations=parallel_iterations,
            swap_memory=swap_memory,
            att_scores=att_scores,
            sequence_length=sequence_length,
            dtype=dtype,
        )

        # Outputs of _dynamic_rnn_loop are always shaped [time, batch, depth].
        # If we are performing batch-major calculations, transpose output back
        # to shape [batch, time, depth]
        if not time_major:
            # (T,B,D) => (B,T,D)
            outputs = nest.map_structure(_transpose_batch_time, outputs)

        return (outputs, final_state)


def _dynamic_rnn_loop(
    cell, inputs, initial_state, parallel_iterations, swap_memory, att_scores=None, sequence_length=None, dtype=None
):
    """The while loop of dynamic_rnn over time-major ``inputs``: (outputs [T, B, depth], final state)."""
    state = initial_state
    assert isinstance(parallel_iterations, int), "parallel_iterations must be int"

    state_size = cell.state_size

    flat_input = nest.flatten(inputs)
    flat_output_size = nest.flatten(cell.output_size)

    # Construct an initial output
    input_shape = array_ops.shape(flat_input[0])
    time_steps = input_shape[0]
    batch_size = _best_effort_input_batch_size(flat_input)

    inputs_got_shape = tuple(input_.get_shape().with_rank_at_least(3) for input_ in flat_input)

    const_time_steps, const_batch_size = inputs_got_shape[0].as_list()[:2]

    for shape in inputs_got_shape:
        if not shape[2:].is_fully_defined():
            raise ValueError("Input size (depth of inputs) must be accessible via shape inference, but saw value None.")
        got_time_steps = tensor_shape.dimension_value(shape[0])
        got_batch_size = tensor_shape.dimension_value(shape[1])
        if const_time_steps != got_time_steps:
            raise ValueError("Time steps is not the same for all the elements in the input in a batch.")
        if const_batch_size != got_batch_size:
            raise ValueError("Batch_size is not the same for all the elements in the input.")

    # Prepare dynamic conditional copying of state & output
    def _create_zero_arrays(size):
        size = _concat(batch_size, size)
        return array_ops.zeros(array_ops_stack.stack(size), _infer_state_dtype(dtype, state))

    flat_zero_output = tuple(_create_zero_arrays(output) for output in flat_output_size)
    zero_output = nest.pack_sequence_as(structure=cell.output_size, flat_sequence=flat_zero_output)

    if sequence_length is not None:
        min_sequence_length = math_ops.reduce_min(sequence_length)
        max_sequence_length = math_ops.reduce_max(sequence_length)

    time = array_ops.constant(0, dtype=dtypes.int32, name="time")

    with ops.name_scope("dynamic_rnn") as scope:
        base_name = scope or ""  # eagerly a name scope has no name (TF 2)

    def _create_ta(name, dtype):
        return tensor_array_ops.TensorArray(dtype=dtype, size=time_steps, tensor_array_name=base_name + name)

    output_ta = tuple(
        _create_ta("output_%d" % i, _infer_state_dtype(dtype, state)) for i in range(len(flat_output_size))
    )
    input_ta = tuple(_create_ta("input_%d" % i, flat_input[i].dtype) for i in range(len(flat_input)))

    input_ta = tuple(ta.unstack(input_) for ta, input_ in zip(input_ta, flat_input))

    def _time_step(time, output_ta_t, state, att_scores=None):
        """Take a time step of the dynamic RNN: (time + 1, output_ta_t with updated flow, new_state)."""
        input_t = tuple(ta.read(time) for ta in input_ta)
        # Restore some shape information
        for input_, shape in zip(input_t, inputs_got_shape):
            input_.set_shape(shape[1:])

        input_t = nest.pack_sequence_as(structure=inputs, flat_sequence=input_t)
        if att_scores is not None:
            att_score = att_scores[:, time, :]
            call_cell = lambda: cell(input_t, state, att_score)
        else:
            call_cell = lambda: cell(input_t, state)

        if sequence_length is not None:
            (output, new_state) = _rnn_step(
                time=time,
                sequence_length=sequence_length,
                min_sequence_length=min_sequence_length,
                max_sequence_length=max_sequence_length,
                zero_output=zero_output,
                state=state,
                call_cell=call_cell,
                state_size=state_size,
                skip_conditionals=True,
            )
        else:
            (output, new_state) = call_cell()

        # Pack state if using state tuples
        output = nest.flatten(output)

        output_ta_t = tuple(ta.write(time, out) for ta, out in zip(output_ta_t, output))
        if att_scores is not None:
            return (time + 1, output_ta_t, new_state, att_scores)
        else:
            return (time + 1, output_ta_t, new_state)

    if att_scores is not None:
        _, output_final_ta, final_state, _ = tf.compat.v1.while_loop(
            cond=lambda time, *_: time < time_steps,
            body=_time_step,
            loop_vars=(time, output_ta, state, att_scores),
            parallel_iterations=parallel_iterations,
            swap_memory=swap_memory,
        )
    else:
        _, output_final_ta, final_state = tf.compat.v1.while_loop(
            cond=lambda time, *_: time < time_steps,
            body=_time_step,
            loop_vars=(time, output_ta, state),
            parallel_iterations=parallel_iterations,
            swap_memory=swap_memory,
        )

    # Unpack final output if not using output tuples.
    final_outputs = tuple(ta.stack() for ta in output_final_ta)

    # Restore some shape information
    for output, output_size in zip(final_outputs, flat_output_size):
        shape = _concat([const_time_steps, const_batch_size], output_size, static=True)
        output.set_shape(shape)

    final_outputs = nest.pack_sequence_as(structure=cell.output_size, flat_sequence=final_outputs)

    return (final_outputs, final_state)
