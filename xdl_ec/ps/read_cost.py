"""ReadCost: what one read of a resize's background copy costs, so that a boundary knows whether another fits.

A pre-copy read (:mod:`xdl_ec.ps.background_move`) reads a range of one old shard's slots and loads the rows it
finds onto the fresh layout; its seconds are a fixed part per read (the calls to one old and up to every fresh
server) plus a part per slot. Fitted over the move's reads so far, the model predicts the next read's seconds
(``seconds``): a boundary with credit left goes on reading only while the next read is predicted to fit, so the
move keeps to its budget on average and a boundary runs past it by at most one read.
"""

from __future__ import annotations

import math
from typing import Tuple

__all__ = ["ReadCost"]


class ReadCost:
    """``fixed + per_slot * slots`` seconds per read, fitted by least squares over :meth:`add`'s reads (weights
    halve every ``half_life`` reads, so a cost that drifts with the machine's load is followed). Until reads of two
    sizes were seen, the reads' mean seconds per slot, no fixed part."""

    def __init__(self, half_life: float = 64.0) -> None:
        if not (isinstance(half_life, (int, float)) and half_life > 0 and math.isfinite(half_life)):
            raise ValueError(f"half_life: must be a finite number of reads > 0, got {half_life!r}")
        self._decay = 0.5 ** (1.0 / float(half_life))
        self._w = self._x = self._y = self._xx = self._xy = 0.0
        self.reads = 0

    def add(self, slots: int, seconds: float) -> None:
        """One read of ``slots`` slots (those within the shard's end: the rows read and loaded) took ``seconds``."""
        if slots < 0 or not (seconds >= 0 and math.isfinite(seconds)):
            raise ValueError(f"ReadCost.add: expected slots >= 0 and finite seconds >= 0, got {slots}, {seconds}")
        d = self._decay
        x, y = float(slots), float(seconds)
        self._w = self._w * d + 1.0
        self._x = self._x * d + x
        self._y = self._y * d + y
        self._xx = self._xx * d + x * x
        self._xy = self._xy * d + x * y
        self.reads += 1

    @property
    def known(self) -> bool:
        """Whether a read was timed (before that the caller asks a first read of its own size)."""
        return self.reads > 0

    def fit(self) -> Tuple[float, float]:
        """(fixed seconds, seconds per slot), both >= 0."""
        if not self._w:
            return 0.0, 0.0
        mean_x, mean_y = self._x / self._w, self._y / self._w
        var = self._xx / self._w - mean_x * mean_x
        if var > 1e-9 * max(1.0, mean_x * mean_x):
            per_slot = (self._xy / self._w - mean_x * mean_y) / var
            fixed = mean_y - per_slot * mean_x
            if per_slot > 0 and fixed >= 0:
                return fixed, per_slot
            if per_slot > 0:  # a negative intercept: the line through the origin instead
                return 0.0, self._xy / self._xx
        # one size seen (or a fit that makes no sense): the mean per slot, the fixed part in it
        return 0.0, (mean_y / mean_x if mean_x > 0 else 0.0)

    def seconds(self, slots: int) -> float:
        """The predicted seconds of a read of ``slots`` slots."""
        fixed, per_slot = self.fit()
        return fixed + per_slot * max(0, int(slots))
