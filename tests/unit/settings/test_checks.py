"""The setting validators: each returns the value in its type, and each error names the setting, what it must be and
what it got; a value of the wrong kind is a WrongKind, both a TypeError and a ValueError."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable

import numpy as np
import pytest

from xdl_ec.settings import checks
from xdl_ec.settings.checks import WrongKind


def test_integers_accept_numpy_ints_and_refuse_bools_floats_and_strs() -> None:
    assert checks.integer("n", np.int64(3)) == 3 and type(checks.integer("n", np.int64(3))) is int
    for wrong in (True, 3.0, "3", None):
        with pytest.raises(WrongKind, match=r"^n: must be an int, got "):
            checks.integer("n", wrong)
    assert issubclass(WrongKind, TypeError) and issubclass(WrongKind, ValueError)


@pytest.mark.parametrize(
    "check,value,message",
    [
        (lambda v: checks.integer("n", v, 1, 4), 5, r"^n: must be an int in \[1, 4\], got 5$"),
        (lambda v: checks.integer("n", v, high=4), 5, r"^n: must be an int <= 4, got 5$"),
        (lambda v: checks.positive_int("steps", v), 0, r"^steps: must be an int >= 1, got 0$"),
        (lambda v: checks.non_negative_int("seed", v), -1, r"^seed: must be an int >= 0, got -1$"),
        (lambda v: checks.real("Adam", "beta1", v), math.nan, r"^Adam: beta1 must be finite, got nan$"),
        (lambda v: checks.at_least("Adam", "epsilon", v, 0.0, True), 0.0, r"^Adam: epsilon must be > 0.0, got 0.0$"),
        (lambda v: checks.number("share", v, 0.0, 1.0, high_open=True), 1.0, r"^share: .* in \[0.0, 1.0\), got 1.0$"),
        (lambda v: checks.number("x", v, low=0.0), math.inf, r"^x: must be a finite number in \[0.0, inf\], got inf$"),
        (lambda v: checks.positive_number("lr", v), 0, r"^lr: must be a finite number in \(0.0, inf\], got 0.0$"),
        (lambda v: checks.one_of("mode", v, ("sync", "async")), "bulk", r"^mode: must be one of 'sync', 'async'"),
    ],
)
def test_a_value_out_of_range_is_a_value_error_naming_it(check: Callable[[Any], Any], value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        check(value)
    assert not isinstance(raised.value, WrongKind)


def test_numbers_come_back_as_floats_at_their_bounds() -> None:
    assert checks.number("share", Fraction(1, 2), 0.0, 1.0) == 0.5
    assert checks.number("share", 0, 0.0, 1.0) == 0.0 and checks.at_least("o", "f", 0.0) == 0.0
    assert checks.real("o", "f", np.float32(2.5)) == 2.5
    for wrong in (True, "0.5", None):
        with pytest.raises(WrongKind):
            checks.number("share", wrong)
        with pytest.raises(WrongKind, match=r"^o: f must be a real number, got "):
            checks.real("o", "f", wrong)


def test_strings_and_instances() -> None:
    assert checks.non_empty_str("name", "users") == "users"
    for wrong in ("", None, b"users"):
        with pytest.raises(WrongKind, match=r"^name: must be a non-empty str, got "):
            checks.non_empty_str("name", wrong)
    assert checks.instance("cache", 3, int) == 3
    with pytest.raises(WrongKind, match=r"^cache: expected a int, got str$"):
        checks.instance("cache", "3", int)
