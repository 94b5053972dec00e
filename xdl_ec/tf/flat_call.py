"""FlatCall: a traced TF function called with numpy arrays, without tf.function's per-call work.

A ``ConcreteFunction`` called as ``f(*tensors)`` binds its arguments to the structured signature, checks and casts
each against its ``TensorSpec`` and flattens the result again: as much Python per call as a small batch's pull
(docs/results/step-2026-11-28.md). A step calls the same function with arrays of the
same dtypes and ranks every time, already checked by :class:`~xdl_ec.model.model_step.ModelStep`, so FlatCall makes
eager tensors straight from the arrays and calls the function's flat form (``_call_flat``, what ``__call__`` ends
in). That form is TensorFlow's private API: where this TF release has no such method, or its first call fails,
FlatCall keeps the public call, so the values are the same either way.
"""

from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np


class FlatCall:
    """``FlatCall(concrete)(arrays)`` -> what ``concrete(*arrays)`` returns (its structured outputs)."""

    def __init__(self, concrete: Any) -> None:
        import tensorflow as tf
        from tensorflow.python.eager import context

        self._concrete = concrete
        self._tf = tf
        specs = concrete.structured_input_signature[0]
        self._dtypes = [spec.dtype.as_datatype_enum for spec in specs]
        self._kinds = [(np.dtype(spec.dtype.as_numpy_dtype), spec.shape.rank) for spec in specs]
        self._context = context.context()
        self._eager: Any = getattr(tf.__internal__, "EagerTensor", None) if hasattr(tf, "__internal__") else None
        if self._eager is None:
            from tensorflow.python.framework import ops

            self._eager = getattr(ops, "EagerTensor", None)
        self._flat: Any = getattr(concrete, "_call_flat", None) if self._eager is not None else None
        self._checked = False

    @property
    def direct(self) -> bool:
        """Whether calls go to the flat form (False: the public call, in a TF release without it)."""
        return self._flat is not None

    def _tensors(self, arrays: Sequence[np.ndarray]) -> List[Any]:
        self._context.ensure_initialized()
        device = self._context.device_name
        return [self._eager(a, device, d) for a, d in zip(arrays, self._dtypes)]

    def __call__(self, arrays: Sequence[np.ndarray]) -> Any:
        # another count of arrays, or an array of another dtype or rank, goes the public way, whose signature check
        # refuses it (the flat form checks none of them: it would cast)
        flat = (
            self._flat is not None
            and len(arrays) == len(self._kinds)
            and all(type(a) is np.ndarray and a.dtype == d and a.ndim == r for a, (d, r) in zip(arrays, self._kinds))
        )
        if flat:
            # captured_inputs asked each call: a variable captured lazily is resolved when the call is made
            if self._checked:
                return self._flat(self._tensors(arrays), self._concrete.captured_inputs)
            try:
                out = self._flat(self._tensors(arrays), self._concrete.captured_inputs)
                self._checked = True
                return out
            except (AttributeError, TypeError):  # a TF whose private form differs: the public call from now on
                self._flat = None
        return self._concrete(*[self._tf.convert_to_tensor(a) for a in arrays])


def as_array(tensor: Any) -> np.ndarray:
    """An eager tensor's values as a numpy array over its own buffer (``.numpy()`` copies them; the array keeps the
    tensor alive, and nothing writes to it)."""
    get = getattr(tensor, "_numpy", None)
    return np.asarray(get()) if get is not None else tensor.numpy()
