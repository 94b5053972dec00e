"""A flag's text to its value (argparse ``type`` functions): bad text is refused with what was expected."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from xdl_ec.settings.stripe_code import parse_code


def number(parse: Callable[[str], Any], accept: Callable[[Any], bool], expected: str) -> Callable[[str], Any]:
    """An argparse type: ``parse`` the text, then check it with ``accept``; errors say what was ``expected``."""

    def convert(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return convert


positive_int = number(int, lambda v: v >= 1, "a positive integer")
non_negative_int = number(int, lambda v: v >= 0, "a non-negative integer")
positive_float = number(float, lambda v: 0 < v < float("inf"), "a positive finite number")
fraction = number(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
open_fraction = number(float, lambda v: 0.0 < v < 1.0, "a number in (0, 1)")


def stripe_code(text: str) -> tuple[int, int]:
    """``K,R`` of --code, by the one rule of a stripe code (:func:`xdl_ec.settings.stripe_code.parse_code`)."""
    try:
        return parse_code(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"expected K,R (data and parity servers per stripe) like 4,1: {str(err).removeprefix('code: ')}"
        ) from None
