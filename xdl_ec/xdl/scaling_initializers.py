"""XDL's initializers whose scale follows the variable's shape (``VarianceScaling``, ``UniformUnitScaling``), for an
embedding table: its shape is [feature_dim, emb_dim], known when ``xdl_ec.xdl.embedding`` is called, which turns
them into the row initializer they stand for (:meth:`ShapeScaled.rows`).

TF 1's arithmetic: VarianceScaling's n is fan_in (feature_dim), fan_out (emb_dim) or their mean; its
"normal" (TF 1's name for the truncated normal) and "truncated_normal" draw a truncated normal of stddev
sqrt(scale / n) / 0.87962566103423978 (the truncation's own shrinkage undone), "untruncated_normal" a normal of
stddev sqrt(scale / n), "uniform" a uniform in
[-sqrt(3 scale / n), sqrt(3 scale / n)]. UniformUnitScaling(factor) is a uniform in [-m, m], m = factor * sqrt(3 /
feature_dim). A row's values are drawn by the table's own initializer from (table seed, id): ``seed`` has no meaning.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Optional

from xdl_ec.sparse import init as _init

MODES = ("fan_in", "fan_out", "fan_avg")
DISTRIBUTIONS = ("normal", "truncated_normal", "untruncated_normal", "uniform")
TRUNCATION = 0.87962566103423978  # the stddev of a unit normal truncated at 2 stddev


class ShapeScaled(abc.ABC):
    """An initializer that becomes a row initializer once the table's shape is known."""

    @abc.abstractmethod
    def rows(self, feature_dim: int, emb_dim: int) -> _init.Initializer:
        """The row initializer of a table [feature_dim, emb_dim]."""


def _seedless(owner: str, seed: Optional[int]) -> None:
    if seed is not None:
        raise ValueError(
            f"{owner}: seed={seed!r}: a row's initial value is drawn from (table seed, id), so seed the table "
            f"instead: xdl_ec.xdl.embedding(..., seed=N)"
        )


@dataclasses.dataclass(frozen=True)
class VarianceScaling(ShapeScaled):
    """XDL's ``VarianceScaling(scale=1.0, mode='fan_in', distribution='normal')``."""

    scale: float = 1.0
    mode: str = "fan_in"
    distribution: str = "normal"
    seed: Optional[int] = None

    def __post_init__(self) -> None:
        if not (isinstance(self.scale, (int, float)) and self.scale > 0):
            raise ValueError(f"VarianceScaling: scale must be a positive number, got {self.scale!r}")
        if self.mode not in MODES:
            raise ValueError(f"VarianceScaling: mode must be one of {MODES}, got {self.mode!r}")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"VarianceScaling: distribution must be one of {DISTRIBUTIONS}, got {self.distribution!r}")
        _seedless("VarianceScaling", self.seed)

    def rows(self, feature_dim: int, emb_dim: int) -> _init.Initializer:
        n = {"fan_in": feature_dim, "fan_out": emb_dim, "fan_avg": (feature_dim + emb_dim) / 2.0}[self.mode]
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * self.scale / n)
            return _init.RandomUniform(-limit, limit)
        if self.distribution == "untruncated_normal":
            return _init.RandomNormal(0.0, math.sqrt(self.scale / n))
        return _init.TruncatedNormal(0.0, math.sqrt(self.scale / n) / TRUNCATION)


@dataclasses.dataclass(frozen=True)
class UniformUnitScaling(ShapeScaled):
    """XDL's ``UniformUnitScaling(factor=1.0)``."""

    factor: float = 1.0
    seed: Optional[int] = None

    def __post_init__(self) -> None:
        if not (isinstance(self.factor, (int, float)) and self.factor > 0):
            raise ValueError(f"UniformUnitScaling: factor must be a positive number, got {self.factor!r}")
        _seedless("UniformUnitScaling", self.seed)

    def rows(self, feature_dim: int, emb_dim: int) -> _init.Initializer:
        limit = self.factor * math.sqrt(3.0 / feature_dim)
        return _init.RandomUniform(-limit, limit)
