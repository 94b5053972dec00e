"""An erasure code's (k, r): ``--code K,R`` at a job's start and ``code=K,R`` of a resize take the same rule."""

from __future__ import annotations

from typing import Any, Tuple

from xdl_ec.settings import checks

MAX_R = 4
MAX_K_PLUS_R = 32


def parse_code(code: Any) -> Tuple[int, int]:
    """``"k,r"`` or a (k, r) pair -> (k, r) with k >= 1, 1 <= r <= 4, k + r <= 32."""
    if isinstance(code, str):
        parts = [p.strip() for p in code.split(",")]
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"code: must be 'k,r' with two positive integers (e.g. 4,1), got {code!r}")
        k, r = int(parts[0]), int(parts[1])
    elif isinstance(code, (tuple, list)) and len(code) == 2:
        k, r = checks.integer("code k", code[0]), checks.integer("code r", code[1])
    else:
        raise TypeError(f"code: expected 'k,r' or a (k, r) pair, got {type(code).__name__}")
    if k < 1 or not 1 <= r <= MAX_R or k + r > MAX_K_PLUS_R:
        raise ValueError(f"code: need k >= 1, 1 <= r <= {MAX_R} and k + r <= {MAX_K_PLUS_R}, got k={k}, r={r}")
    return k, r
