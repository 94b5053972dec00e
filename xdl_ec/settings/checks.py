"""Validation of user-facing settings, in one place: every config, flag and API argument is checked with these,
and every error names the setting, what it must be and what it got.

A value of the wrong kind (a bool is not an int here) raises :class:`WrongKind`, which is both a TypeError and a
ValueError (callers catching either see it); one out of range raises ValueError.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Sequence


class WrongKind(TypeError, ValueError):
    """A setting of the wrong kind (e.g. a str or a bool where an int is expected)."""


def integer(name: str, value: Any, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """``value`` as an int in [low, high] (either bound optional)."""
    if type(value) is not int and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
        raise WrongKind(f"{name}: must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        bound = (
            f"in [{low}, {high}]"
            if low is not None and high is not None
            else (f">= {low}" if low is not None else f"<= {high}")
        )
        raise ValueError(f"{name}: must be an int {bound}, got {value}")
    return value


def positive_int(name: str, value: Any) -> int:
    return integer(name, value, 1)


def non_negative_int(name: str, value: Any) -> int:
    return integer(name, value, 0)


def real(owner: str, name: str, value: Any) -> float:
    """``value`` as a finite float; TypeError for non-numbers (and bools), ValueError for NaN/Inf. The error
    reads "owner: name ..." (owner: the object the setting belongs to)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise WrongKind(f"{owner}: {name} must be a real number, got {type(value).__name__}")
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


def number(
    name: str,
    value: Any,
    low: Optional[float] = None,
    high: Optional[float] = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A finite float in the interval given by the bounds (open or closed at each end)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise WrongKind(f"{name}: must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    below = low is not None and (value < low or (low_open and value == low))
    above = high is not None and (value > high or (high_open and value == high))
    if not math.isfinite(value) or below or above:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        span = f"in {left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
        raise ValueError(f"{name}: must be a finite number {span}, got {value}")
    return value


def positive_number(name: str, value: Any) -> float:
    return number(name, value, 0.0, low_open=True)


def one_of(name: str, value: Any, choices: Sequence[Any]) -> Any:
    if value not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def non_empty_str(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise WrongKind(f"{name}: must be a non-empty str, got {value!r}")
    return value


def instance(name: str, value: Any, cls: type) -> Any:
    if not isinstance(value, cls):
        raise WrongKind(f"{name}: expected a {cls.__name__}, got {type(value).__name__}")
    return value
