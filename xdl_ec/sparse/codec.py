"""The erasure codec: a systematic MDS code over GF(2^8) (ISA-L) on byte fragments.

Fragment indices are 0..k-1 for data and k..k+r-1 for parity. Parity bytes are byte-identical to
ISA-L's generator (and pyeclib's ``isa_l_rs_vand`` / ``isa_l_rs_cauchy`` backends).
"""

from __future__ import annotations

import numbers
from typing import Mapping, Sequence

import numpy as np

from xdl_ec import _core

MATRICES = ("auto", "vandermonde", "cauchy")


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def _as_dict(fragments: Mapping[int, np.ndarray]) -> dict:
    if isinstance(fragments, dict):
        return fragments
    if not isinstance(fragments, Mapping):
        raise TypeError(f"fragments must be a dict {{index: uint8 array}}, got {type(fragments).__name__}")
    return dict(fragments)


class ErasureCode:
    """k data + r parity fragments (1 <= r <= 4, k + r <= 32); any r lost fragments are rebuilt exactly.

    ``matrix="auto"`` picks ISA-L's Vandermonde matrix where ISA-L documents it as invertible for every
    erasure pattern (its first parity row is all ones: r = 1 is plain XOR), else ISA-L's Cauchy matrix.
    The byte work runs in C++ with the GIL released.
    """

    def __init__(self, k: int, r: int, matrix: str = "auto") -> None:
        k = _check_int("k", k)
        r = _check_int("r", r)
        if not isinstance(matrix, str):
            raise TypeError(f"matrix must be a str, one of {MATRICES}, got {type(matrix).__name__}")
        self._code = _core.ErasureCode(k, r, matrix)

    @property
    def k(self) -> int:
        """Number of data fragments."""
        return self._code.k

    @property
    def r(self) -> int:
        """Number of parity fragments (losses tolerated)."""
        return self._code.r

    @property
    def matrix(self) -> str:
        """The generator in use: "vandermonde" or "cauchy"."""
        return self._code.matrix

    @property
    def coefficients(self) -> np.ndarray:
        """uint8[r, k]: coefficient g(j, i) of data fragment i in parity fragment j."""
        return self._code.coefficients

    def encode(self, data: np.ndarray) -> np.ndarray:
        """Parity uint8[r, L] of the data fragments uint8[k, L]."""
        return self._code.encode(data)

    def decode(self, fragments: Mapping[int, np.ndarray]) -> np.ndarray:
        """The k data fragments uint8[k, L] from at least k surviving fragments {index: uint8[L]}.

        The k smallest indices given are used (data first). Raises ValueError("unrecoverable: ...")
        when fewer than k survive.
        """
        fragments = _as_dict(fragments)
        return self._code.decode(fragments)

    def reconstruct(
        self, fragments: Mapping[int, np.ndarray], lost: Sequence[int], out: np.ndarray | None = None
    ) -> np.ndarray:
        """Only the fragments ``lost`` (data or parity indices), uint8[len(lost), L], from at least k
        survivors {index: uint8[L]}; written into ``out`` (writeable uint8[len(lost), L]) when given.

        For rebuilding a lost server's fragment, parity included, without materialising the others.
        """
        fragments = _as_dict(fragments)
        return self._code.reconstruct(fragments, lost, out)

    def update(self, parity: np.ndarray, index: int, delta: np.ndarray) -> None:
        """In place: parity[j] ^= g(j, index) * delta for every j, where delta = old XOR new bytes of
        data fragment ``index``. parity is the writeable uint8[r, L] array to update."""
        self._code.update(parity, _check_int("index", index), delta)

    def __reduce__(self) -> tuple:
        # Picklable (e.g. shipped to Ray actors): the code is fully determined by (k, r, matrix).
        return (ErasureCode, (self.k, self.r, self.matrix))

    def __repr__(self) -> str:
        return f"ErasureCode(k={self.k}, r={self.r}, matrix={self.matrix!r})"
