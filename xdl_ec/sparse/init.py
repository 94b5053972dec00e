"""Row initialisers for embedding tables.

A row's initial value is a function of (table seed, key) alone, computed in the C++ core from
counter-based random bits, so the same key gets the same bytes whatever shard, slot or order it
lands in (exact replay, resharding, recovery).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Union

from xdl_ec import _core
from xdl_ec.settings.checks import real
from xdl_ec.settings.hyperparameter import HyperParameters

__all__ = ["Initializer", "Zeros", "Constant", "RandomUniform", "TruncatedNormal", "RandomNormal", "get", "NAMES"]


class Initializer(HyperParameters):
    """Base of the row initialisers: validated settings convertible to the core's config."""

    def to_config(self) -> "_core.InitializerConfig":
        """The ``_core.InitializerConfig`` for a shard."""
        return self._fill(_core.InitializerConfig())


@dataclasses.dataclass(frozen=True)
class Zeros(Initializer):
    """All rows start at 0."""

    kind = _core.InitializerKind.ZEROS


@dataclasses.dataclass(frozen=True)
class Constant(Initializer):
    """All rows start at ``value``."""

    value: float = 0.0
    kind = _core.InitializerKind.CONSTANT

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", real("Constant", "value", self.value))


@dataclasses.dataclass(frozen=True)
class RandomUniform(Initializer):
    """Uniform in [minval, maxval)."""

    minval: float = -0.05
    maxval: float = 0.05
    kind = _core.InitializerKind.UNIFORM

    def __post_init__(self) -> None:
        lo = real("RandomUniform", "minval", self.minval)
        hi = real("RandomUniform", "maxval", self.maxval)
        if not lo < hi:
            raise ValueError(f"RandomUniform: minval must be < maxval, got minval={lo}, maxval={hi}")
        object.__setattr__(self, "minval", lo)
        object.__setattr__(self, "maxval", hi)


@dataclasses.dataclass(frozen=True)
class _Normal(Initializer):
    """A normal's settings, checked alike by each kind of normal (the messages name the kind)."""

    mean: float = 0.0
    stddev: float = 0.05

    def __post_init__(self) -> None:
        name = type(self).__name__
        object.__setattr__(self, "mean", real(name, "mean", self.mean))
        stddev = real(name, "stddev", self.stddev)
        if stddev <= 0.0:
            raise ValueError(f"{name}: stddev must be > 0, got {stddev}")
        object.__setattr__(self, "stddev", stddev)


@dataclasses.dataclass(frozen=True)
class TruncatedNormal(_Normal):
    """Normal(mean, stddev) redrawn beyond 2 stddev, as TensorFlow's truncated normal."""

    kind = _core.InitializerKind.TRUNCATED_NORMAL


@dataclasses.dataclass(frozen=True)
class RandomNormal(_Normal):
    """Normal(mean, stddev), untruncated, as TensorFlow's random normal (XDL's ``RandomNormal``)."""

    kind = _core.InitializerKind.NORMAL


NAMES = {
    "zeros": Zeros,
    "constant": Constant,
    "uniform": RandomUniform,
    "random_uniform": RandomUniform,
    "truncated_normal": TruncatedNormal,
    "normal": RandomNormal,
    "random_normal": RandomNormal,
}


def get(identifier: Union[str, Initializer], **kwargs: Any) -> Initializer:
    """An initialiser from a name ('zeros', 'constant', 'uniform' / 'random_uniform', 'truncated_normal',
    'normal' / 'random_normal')
    and keyword settings, or an Initializer instance as is."""
    if isinstance(identifier, Initializer):
        if kwargs:
            raise ValueError(f"initializer: keyword arguments {sorted(kwargs)} given with an Initializer instance")
        return identifier
    if not isinstance(identifier, str):
        raise TypeError(f"initializer must be a name or an xdl_ec.init.Initializer, got {type(identifier).__name__}")
    cls = NAMES.get(identifier.lower())
    if cls is None:
        raise ValueError(f"initializer: unknown name {identifier!r}; known: {', '.join(sorted(NAMES))}")
    return cls(**kwargs)
