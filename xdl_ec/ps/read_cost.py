"""ReadCost: what one read of a resize's background copy costs, so that a boundary knows how large a read to make
and whether another fits.

A pre-copy read (:mod:`xdl_ec.ps.background_move`: a round, ranges of every unfinished old shard's slots) loads
the rows it finds onto the fresh layout; its seconds are a fixed part per read (a round of calls to the old and
fresh servers) plus a part per slot. Fitted over the move's reads so far, the model sizes the next read
(``slots_for``: what the credit left pays for, but large enough that the fixed part is a small share of it) and
predicts its seconds (``seconds``): a boundary with credit left goes on reading only while the next read is
predicted to fit, so the move keeps to its budget on average and a boundary runs past it by at most one read.
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

    def mean_per_slot(self) -> float:
        """The reads' seconds per slot, weighted as in the fit (their fixed parts spread over their slots: an upper
        bound of a slot's cost in reads of their size or larger); 0 before a read of a slot."""
        return self._y / self._x if self._x > 0 else 0.0

    def slots_for(self, seconds: float, most: float, fixed_share: float, least: int) -> int:
        """The slots of a read that fits in ``seconds`` by the fit, but at least enough that the fixed part is at
        most ``fixed_share`` of its seconds (few, large reads), at most what ``most`` seconds pay for at
        :meth:`mean_per_slot` (so a fit thrown by noise, a fixed part too large or a cost per slot too small,
        cannot ask a read of far more than ``most`` seconds), and at least ``least``."""
        if not (0 < fixed_share < 1):
            raise ValueError(f"ReadCost.slots_for: fixed_share must be in (0, 1), got {fixed_share}")
        fixed, per_slot = self.fit()
        mean = self.mean_per_slot()
        if per_slot <= 0 or mean <= 0:
            return int(least)
        amortized = fixed * (1.0 - fixed_share) / (fixed_share * per_slot)
        within = (seconds - fixed) / per_slot
        return int(max(least, min(max(amortized, within), most / mean)))

    def seconds(self, slots: int) -> float:
        """The predicted seconds of a read of ``slots`` slots."""
        fixed, per_slot = self.fit()
        return fixed + per_slot * max(0, int(slots))
