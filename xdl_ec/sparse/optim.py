"""Sparse optimizers for embedding tables: SGD, Momentum, Adagrad, Adam (lazy) and FTRL.

Each class only holds hyper-parameters; the update runs in the C++ shard and matches TensorFlow's
sparse kernels (ResourceSparseApplyMomentum, ResourceSparseApplyAdagradV2, ResourceSparseApplyFtrlV2,
and ApplyAdam on the touched rows) bit for bit on float32. Per-row state layout:
SGD none; Momentum accum[dim]; Adagrad accum[dim]; Adam m[dim], v[dim]; FTRL accum[dim], linear[dim].
"""

from __future__ import annotations

import dataclasses
from typing import Any, Union

from xdl_ec import _core
from xdl_ec.settings.checks import at_least, real
from xdl_ec.settings.hyperparameter import HyperParameters

__all__ = ["Optimizer", "SGD", "Momentum", "Adagrad", "Adam", "Ftrl", "get", "NAMES"]


class Optimizer(HyperParameters):
    """Base of the sparse optimizers: validated hyper-parameters convertible to the core's config."""

    core_names = {"initial_accumulator_value": "initial_accumulator"}

    def to_config(self) -> "_core.OptimizerConfig":
        """The ``_core.OptimizerConfig`` for a shard (validated again by the core)."""
        return self._fill(_core.OptimizerConfig())


@dataclasses.dataclass(frozen=True)
class SGD(Optimizer):
    """Plain SGD: ``var -= learning_rate * grad``. No state."""

    learning_rate: float = 0.01
    kind = _core.OptimizerKind.SGD

    def __post_init__(self) -> None:
        object.__setattr__(self, "learning_rate", at_least("SGD", "learning_rate", self.learning_rate))


@dataclasses.dataclass(frozen=True)
class Momentum(Optimizer):
    """``accum = accum * momentum + grad; var -= lr * accum`` (Nesterov: ``var -= lr * grad + (lr * momentum) *
    accum``)."""

    learning_rate: float = 0.01
    momentum: float = 0.9
    use_nesterov: bool = False
    kind = _core.OptimizerKind.MOMENTUM

    def __post_init__(self) -> None:
        object.__setattr__(self, "learning_rate", at_least("Momentum", "learning_rate", self.learning_rate))
        object.__setattr__(self, "momentum", at_least("Momentum", "momentum", self.momentum))
        if not isinstance(self.use_nesterov, bool):
            raise TypeError(f"Momentum: use_nesterov must be a bool, got {type(self.use_nesterov).__name__}")


@dataclasses.dataclass(frozen=True)
class Adagrad(Optimizer):
    """``accum += grad^2; var -= lr * grad / (sqrt(accum) + epsilon)``; accum starts at initial_accumulator_value."""

    learning_rate: float = 0.001
    initial_accumulator_value: float = 0.1
    epsilon: float = 1e-7
    kind = _core.OptimizerKind.ADAGRAD

    def __post_init__(self) -> None:
        object.__setattr__(self, "learning_rate", at_least("Adagrad", "learning_rate", self.learning_rate))
        object.__setattr__(
            self,
            "initial_accumulator_value",
            at_least("Adagrad", "initial_accumulator_value", self.initial_accumulator_value),
        )
        object.__setattr__(self, "epsilon", at_least("Adagrad", "epsilon", self.epsilon))
        if self.initial_accumulator_value == 0.0 and self.epsilon == 0.0:
            raise ValueError("Adagrad: initial_accumulator_value and epsilon cannot both be 0")


@dataclasses.dataclass(frozen=True)
class Adam(Optimizer):
    """Lazy Adam: only the rows in a batch move; bias correction from the global step of the push."""

    learning_rate: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-7
    kind = _core.OptimizerKind.ADAM

    def __post_init__(self) -> None:
        object.__setattr__(self, "learning_rate", at_least("Adam", "learning_rate", self.learning_rate))
        for name in ("beta1", "beta2"):
            value = at_least("Adam", name, getattr(self, name))
            if value >= 1.0:
                raise ValueError(f"Adam: {name} must be in [0, 1), got {value}")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "epsilon", at_least("Adam", "epsilon", self.epsilon, strict=True))


@dataclasses.dataclass(frozen=True)
class Ftrl(Optimizer):
    """FTRL-Proximal as ResourceSparseApplyFtrlV2 (with l2_shrinkage, linear not multiplied by lr)."""

    learning_rate: float = 0.001
    learning_rate_power: float = -0.5
    initial_accumulator_value: float = 0.1
    l1: float = 0.0
    l2: float = 0.0
    l2_shrinkage: float = 0.0
    kind = _core.OptimizerKind.FTRL

    def __post_init__(self) -> None:
        object.__setattr__(self, "learning_rate", at_least("Ftrl", "learning_rate", self.learning_rate, strict=True))
        power = real("Ftrl", "learning_rate_power", self.learning_rate_power)
        if power > 0.0:
            raise ValueError(f"Ftrl: learning_rate_power must be <= 0, got {power}")
        object.__setattr__(self, "learning_rate_power", power)
        for name in ("initial_accumulator_value", "l1", "l2", "l2_shrinkage"):
            object.__setattr__(self, name, at_least("Ftrl", name, getattr(self, name)))


NAMES = {"sgd": SGD, "momentum": Momentum, "adagrad": Adagrad, "adam": Adam, "ftrl": Ftrl}


def get(identifier: Union[str, Optimizer], **kwargs: Any) -> Optimizer:
    """An optimizer from a name ('sgd', 'momentum', 'adagrad', 'adam', 'ftrl'; case-insensitive) and
    keyword hyper-parameters, or an Optimizer instance as is."""
    if isinstance(identifier, Optimizer):
        if kwargs:
            raise ValueError(f"optimizer: keyword arguments {sorted(kwargs)} given with an Optimizer instance")
        return identifier
    if not isinstance(identifier, str):
        raise TypeError(f"optimizer must be a name or an xdl_ec.optim.Optimizer, got {type(identifier).__name__}")
    cls = NAMES.get(identifier.lower())
    if cls is None:
        raise ValueError(f"optimizer: unknown name {identifier!r}; known: {', '.join(sorted(NAMES))}")
    return cls(**kwargs)
