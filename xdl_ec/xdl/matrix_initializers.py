"""XDL's initializers of a whole dense variable: ``Orthogonal(shape, gain=1.0, seed=None)`` and ``Identity(value)``.

XDL's TF backend gives them to dense variables: ``Orthogonal`` draws an orthogonal matrix scaled by ``gain`` (TF's
``orthogonal_initializer``), ``Identity`` is the variable's whole initial value (XDL's TF backend makes it of a
``tf.constant_initializer`` holding an array). In a ported model function they are initializers of
``tf.compat.v1.get_variable`` and of ``xdl.layers.dense``'s kernel and bias, called with the variable's shape.
An embedding table has no such form: its rows are drawn one by one, from (table seed, id), when an id is first
looked up, so no set of rows is orthogonal and no whole value exists; ``xdl.embedding`` refuses them
(:attr:`MatrixInitializer.for_a_table` says why and what to use).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Sequence, Tuple

import numpy as np

ROW_INITIALIZERS = (
    "Zeros, Ones, Constant, RandomUniform, TruncatedNormal, RandomNormal, VarianceScaling, UniformUnitScaling"
)


class MatrixInitializer:
    """An initializer of a whole dense variable (Keras' and TF's calling form: ``init(shape, dtype=None)``)."""

    name = "MatrixInitializer"
    makes = "a whole matrix"

    @property
    def for_a_table(self) -> str:
        """Why a table refuses it, and what to use."""
        return (
            f"xdl.{self.name} makes {self.makes} of a dense variable, as in XDL's TF backend "
            f"(tf.compat.v1.get_variable(..., initializer=xdl.{self.name}(...)), xdl.layers.dense's "
            f"kernel_initializer); a table's rows are each drawn from (table seed, id) when the id is first "
            f"looked up, so a table has no whole matrix to make so: use a row initializer ({ROW_INITIALIZERS})"
        )

    def _shape(self, shape: Any) -> Tuple[int, ...]:
        try:
            return tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise ValueError(f"xdl.{self.name}: a variable's shape must be fully known, got {shape!r}") from None


class Orthogonal(MatrixInitializer):
    """XDL's ``Orthogonal(shape, gain=1.0, seed=None)``: TF's ``orthogonal_initializer(gain, seed)`` of a variable
    of ``shape`` (rank >= 2, as XDL requires); ``seed`` None draws from the job's seed, as TF's initializers do."""

    name = "Orthogonal"
    makes = "an orthogonal matrix (a property of the whole matrix)"

    def __init__(self, shape: Sequence[int], gain: float = 1.0, seed: Optional[int] = None) -> None:
        try:
            dims = tuple(shape)
        except TypeError:
            raise ValueError(f"xdl.Orthogonal: shape must be a list of ints, got {shape!r}") from None
        if len(dims) < 2 or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1 for d in dims):
            raise ValueError(
                f"xdl.Orthogonal: shape must be at least 2 positive ints (a matrix, as XDL requires), got {shape!r}"
            )
        if isinstance(gain, bool) or not isinstance(gain, numbers.Real) or not math.isfinite(gain):
            raise ValueError(f"xdl.Orthogonal: gain must be a finite number, got {gain!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
            raise ValueError(f"xdl.Orthogonal: seed must be an int or None, got {seed!r}")
        self.shape: Tuple[int, ...] = tuple(int(d) for d in dims)
        self.gain: float = float(gain)
        self.seed: Optional[int] = None if seed is None else int(seed)

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        import tensorflow as tf

        asked = self._shape(shape)
        if asked != self.shape:
            raise ValueError(
                f"xdl.Orthogonal: made for shape {list(self.shape)}, asked for a variable of shape {list(asked)}: "
                f"give Orthogonal the variable's shape"
            )
        return tf.compat.v1.orthogonal_initializer(gain=self.gain, seed=self.seed)(
            asked, dtype=tf.as_dtype(dtype or "float32")
        )

    def __repr__(self) -> str:
        return f"xdl.Orthogonal({list(self.shape)}, gain={self.gain}, seed={self.seed})"


class Identity(MatrixInitializer):
    """XDL's ``Identity(value)``: the variable starts as ``value`` (an array of the variable's shape)."""

    name = "Identity"
    makes = "the whole initial value"

    def __init__(self, value: Any) -> None:
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"xdl.Identity: value must be an array of numbers, got {type(value).__name__}") from None
        if not np.all(np.isfinite(array)):
            raise ValueError("xdl.Identity: value holds NaN or infinity")
        self.value: np.ndarray = array

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        import tensorflow as tf

        asked = self._shape(shape)
        if asked != self.value.shape:
            raise ValueError(
                f"xdl.Identity: its value is {list(self.value.shape)}, asked for a variable of shape {list(asked)}: "
                f"the value is the variable's whole initial value"
            )
        return tf.constant(self.value, dtype=tf.as_dtype(dtype or "float32"))

    def __repr__(self) -> str:
        return f"xdl.Identity(<{list(self.value.shape)} array>)"
