"""fmix64: MurmurHash3's 64-bit finaliser, the bijection that salts ids into table keys (per Criteo column in the
reader, per feature in the job API) and spreads them over the whole int64 range."""

from __future__ import annotations

import numpy as np


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser on uint64 words (wrapping arithmetic, bijective); returns a new array."""
    x = np.array(x, dtype=np.uint64, copy=True)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x
