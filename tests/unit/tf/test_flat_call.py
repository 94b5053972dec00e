"""FlatCall: a concrete function called in its flat form gives what its public call gives, refuses what that call
refuses, and keeps the public call where the flat form is missing."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from xdl_ec.tf.flat_call import FlatCall, as_array  # noqa: E402


def _concrete() -> tuple:
    weight = tf.Variable([[1.0], [2.0]])
    specs = [tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None], tf.int32)]

    def step(x, index):  # noqa: ANN001, ANN202
        y = tf.matmul(x, weight)[:, 0]
        weight.assign_add(tf.ones_like(weight))  # stateful: the call must run exactly once
        return {"y": tf.gather(y, index), "sum": tf.reduce_sum(y)}

    return tf.function(step, input_signature=specs).get_concrete_function(), weight


def test_flat_call_gives_the_public_calls_values_and_runs_once() -> None:
    concrete, weight = _concrete()
    call = FlatCall(concrete)
    x = np.array([[1.0, 1.0], [0.5, 2.0]], np.float32)
    index = np.array([1, 0, 1], np.int32)
    flat = call([x, index])
    assert call.direct
    np.testing.assert_array_equal(as_array(flat["y"]), [4.5, 3.0, 4.5])
    np.testing.assert_array_equal(weight.numpy(), [[2.0], [3.0]])  # one update per call
    public = concrete(tf.constant(x), tf.constant(index))
    np.testing.assert_array_equal(public["y"].numpy(), [7.0, 5.0, 7.0])  # weights after the flat call's update
    x[0, 0] = 100.0  # the caller's array may change after the call: the tensors held their own values
    np.testing.assert_array_equal(as_array(flat["y"]), [4.5, 3.0, 4.5])


@pytest.mark.parametrize(
    "x, index",
    [
        (np.ones((2, 2), np.float64), np.zeros(1, np.int32)),  # another dtype: the flat form would cast it
        (np.ones((2, 2), np.float32), np.zeros(1, np.int64)),
    ],
)
def test_flat_call_refuses_another_dtype_as_the_public_call_does(x: np.ndarray, index: np.ndarray) -> None:
    concrete, weight = _concrete()
    with pytest.raises(tf.errors.InvalidArgumentError, match="expected to be a"):
        FlatCall(concrete)([x, index])
    np.testing.assert_array_equal(weight.numpy(), [[1.0], [2.0]])  # nothing ran


def test_flat_call_refuses_another_count_of_arrays() -> None:
    concrete, weight = _concrete()
    with pytest.raises(TypeError):
        FlatCall(concrete)([np.ones((2, 2), np.float32)])
    np.testing.assert_array_equal(weight.numpy(), [[1.0], [2.0]])


def test_flat_call_leaves_another_rank_to_the_public_call() -> None:
    concrete, _ = _concrete()
    call = FlatCall(concrete)
    with pytest.raises(tf.errors.InvalidArgumentError, match="ndims"):  # TF's own refusal of a [2] matrix
        call([np.ones(2, np.float32), np.zeros(1, np.int32)])
    assert call.direct  # a refused input does not give up the flat form for the calls after it


def test_flat_call_keeps_the_public_call_without_the_flat_form() -> None:
    concrete, _ = _concrete()

    class Public:  # a TF release whose concrete functions have no _call_flat
        structured_input_signature = concrete.structured_input_signature

        def __call__(self, *args):  # noqa: ANN002, ANN204
            return concrete(*args)

    call = FlatCall(Public())
    assert not call.direct
    out = call([np.ones((1, 2), np.float32), np.zeros(1, np.int32)])
    np.testing.assert_array_equal(as_array(out["y"]), [3.0])


def test_as_array_shares_no_writes_back() -> None:
    tensor = tf.constant([1.0, 2.0])
    array = as_array(tensor)
    assert isinstance(array, np.ndarray) and array.dtype == np.float32
    np.testing.assert_array_equal(array, [1.0, 2.0])
