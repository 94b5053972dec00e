"""Validated hyper-parameters: the shared base of the optimizer and initializer settings."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Dict


def real(owner: str, name: str, value: Any) -> float:
    """``value`` as a finite float; TypeError for non-numbers (and bools), ValueError for NaN/Inf."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{owner}: {name} must be finite, got {value}")
    return value


def at_least(owner: str, name: str, value: Any, low: float = 0.0, strict: bool = False) -> float:
    """A finite float >= low (> low when strict); the error names the owner and the field."""
    value = real(owner, name, value)
    if value < low or (strict and value == low):
        op = ">" if strict else ">="
        raise ValueError(f"{owner}: {name} must be {op} {low}, got {value}")
    return value


class HyperParameters:
    """Base of frozen dataclasses whose fields map onto a ``_core`` config struct of the same names."""

    kind: Any = None
    core_names: Dict[str, str] = {}  # field name -> core config field name where they differ

    def _fill(self, config: Any) -> Any:
        config.kind = self.kind
        for field in dataclasses.fields(self):
            setattr(config, self.core_names.get(field.name, field.name), getattr(self, field.name))
        config.validate()
        return config
