"""Input: a side input of a job's batches, an entry that is neither ids nor labels (int or float, any rank: a
sequence's lengths, a position, a request context), passed to the model as it is.

A job that declares ``inputs=[xdl_ec.Input("position", "int64", ())]`` calls its model as ``model(embedded,
{"dense": dense_or_None, "position": tensor [B]})``; jobs without ``inputs=`` keep ``model(embedded, dense)``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import numpy as np

from xdl_ec.model.feature import RESERVED
from xdl_ec.settings import checks

DTYPES = ("int32", "int64", "float32", "float64", "bool")


@dataclasses.dataclass(frozen=True)
class Input:
    """Side input ``name`` of dtype ``dtype`` (one of DTYPES) and per-example ``shape`` (without the batch
    dimension; None for a dimension that may vary between batches, e.g. ``(None,)``)."""

    name: str
    dtype: str = "float32"
    shape: Tuple[Optional[int], ...] = ()

    def __post_init__(self) -> None:
        checks.non_empty_str("Input name", self.name)
        if self.name in RESERVED:
            raise ValueError(f"Input name {self.name!r} is reserved for the batch's {self.name} entry: rename it")
        dtype = np.dtype(self.dtype).name if isinstance(self.dtype, (type, np.dtype)) else self.dtype
        checks.one_of(f"input {self.name!r}: dtype", dtype, DTYPES)
        object.__setattr__(self, "dtype", dtype)
        shape = tuple(self.shape) if isinstance(self.shape, (tuple, list)) else self.shape
        if not isinstance(shape, tuple) or any(
            d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 1) for d in shape
        ):
            raise ValueError(
                f"input {self.name!r}: shape must be a tuple of positive ints or None (per example, "
                f"without the batch dimension), got {self.shape!r}"
            )
        object.__setattr__(self, "shape", shape)

    def describe(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}
