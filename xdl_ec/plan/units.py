"""The planner's quantities as text: sizes (``64G``, ``512M``, ``1.5GiB``, bytes) and durations (``14h``, ``30m``,
``90s``, ``2d``, seconds), each refused with the flag's name and an example of what is expected."""

from __future__ import annotations

import math
import re

from xdl_ec.sparse.memory_budget import parse_size

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?\s*$", re.IGNORECASE)
_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def size_bytes(flag: str, text: str) -> int:
    """Bytes of a size text (K, M, G, T: powers of 1024); ValueError naming ``flag`` unless positive."""
    if str(text).strip().startswith("-"):
        raise ValueError(f"{flag}: a size cannot be negative, got {text!r}; give e.g. 64G")
    try:
        value = parse_size(text)
    except ValueError:
        raise ValueError(f"{flag}: expected a size like 64G, 512M or 1000000 (bytes), got {text!r}") from None
    if value < 1:
        raise ValueError(f"{flag}: must be a positive size like 64G, got {text!r}")
    return value


def duration_seconds(flag: str, text: str) -> float:
    """Seconds of a duration text (s, m, h, d; a bare number is seconds); ValueError naming ``flag`` unless
    positive and finite."""
    if str(text).strip().startswith("-"):
        raise ValueError(f"{flag}: a duration cannot be negative, got {text!r}; give e.g. 14h")
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"{flag}: expected a duration like 14h, 30m, 90s or 2d, got {text!r}")
    value = float(match.group(1)) * _SECONDS[(match.group(2) or "").lower()]
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{flag}: must be a positive duration like 14h, got {text!r}")
    return value
