"""An erasure code's (k, r), from ``--code K,R`` or a pair: the same rule for a job's start and a resize."""

from __future__ import annotations

from typing import Any

import pytest

from xdl_ec.settings.stripe_code import MAX_K_PLUS_R, MAX_R, parse_code


@pytest.mark.parametrize("code,expected", [("4,1", (4, 1)), (" 2 , 2 ", (2, 2)), ((1, 4), (1, 4)), ([28, 4], (28, 4))])
def test_a_code_is_k_data_and_r_parity(code: Any, expected: tuple) -> None:
    assert parse_code(code) == expected


@pytest.mark.parametrize(
    "code,error,message",
    [
        ("4", ValueError, r"^code: must be 'k,r' with two positive integers \(e.g. 4,1\), got '4'$"),
        ("4,-1", ValueError, r"^code: must be 'k,r'"),
        ("a,b", ValueError, r"^code: must be 'k,r'"),
        ("0,1", ValueError, rf"^code: need k >= 1, 1 <= r <= {MAX_R} and k \+ r <= {MAX_K_PLUS_R}, got k=0, r=1$"),
        ("4,5", ValueError, r"got k=4, r=5$"),
        ((30, 3), ValueError, r"got k=30, r=3$"),
        ((4.0, 1), TypeError, r"^code k: must be an int"),
        (41, TypeError, r"^code: expected 'k,r' or a \(k, r\) pair, got int$"),
        ((4, 1, 1), TypeError, r"^code: expected 'k,r' or a \(k, r\) pair, got tuple$"),
    ],
)
def test_a_code_out_of_its_bounds_is_an_error(code: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        parse_code(code)
