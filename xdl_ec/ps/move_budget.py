"""MoveBudget: a background move's pace: the seconds (or slots) each step boundary may spend on it, kept as a
credit so the move keeps to its share of the steps' time on average, its last round and its final pause included.

A boundary with credit makes a round whatever it costs and more while :class:`~xdl_ec.ps.read_cost.ReadCost`
predicts the next fits; a boundary in debt reads nothing. The final boundary waits until the debt is paid off and
the final pause's predicted seconds are saved up, so the move as a whole is paid for by its own boundaries.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

from xdl_ec.ps.copy_rounds import CopiedShard, ShardKey
from xdl_ec.ps.old_servers import OldServers
from xdl_ec.ps.pause_prediction import predict_pause
from xdl_ec.ps.read_cost import ReadCost

__all__ = ["MoveBudget"]

CHUNK_SLOTS = 8192  # the first round's slots (then sized by the fitted cost: see round_slots)
ROUND_FIXED_SHARE = 0.2  # a round is at least large enough that its fixed part (a round of calls) is this share
MAX_ROUND_BUDGETS = 256  # a round costs at most this many boundaries' budgets (then paid off before the next)


class MoveBudget:
    """The credit (seconds of budget not spent yet; < 0: a round past it, paid off by later boundaries), the
    rounds' fitted cost (:attr:`read_cost`, both kept over the move's attempts) and, per attempt, the final pause's
    reserve, all counted on ``clock``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.read_cost = ReadCost()  # a read's seconds by its slots: whether another fits in the credit
        self.credit = 0.0
        self.restart()

    def restart(self) -> None:
        """A new attempt (fresh servers lost): nothing copied, no pause saved up; the credit and the fit kept."""
        self.final_reserve: Optional[float] = None  # the final pause's predicted seconds, saved up before it
        self.by_seconds = False  # whether the budget is in seconds (then the final pause is saved up)
        self._reserve_asked = 0.0  # the seconds the last prediction took (the credit pays for the next one too)
        self._reserve_at: Optional[int] = None  # the boundary (count) that made it
        self._copy_seconds = self._copy_slots = 0.0  # the pre-copy's rounds: seconds and slots read, summed

    def earn(self, seconds: float) -> None:
        """A boundary's budget in seconds added to the credit."""
        self.credit += seconds
        self.by_seconds = True

    def round_slots(self, left: float, budget: float) -> int:
        """The slots of the next round, ``left`` seconds of credit left of ``budget`` per boundary: CHUNK_SLOTS,
        then 4 x CHUNK_SLOTS (two sizes, so the fit sees a fixed part), then sized by the fitted cost
        (:meth:`ReadCost.slots_for`: what the credit pays for, at least enough that the fixed part is at most
        ROUND_FIXED_SHARE, at most MAX_ROUND_BUDGETS boundaries' budgets)."""
        if self.read_cost.reads < 2:
            return CHUNK_SLOTS * (1 + 3 * self.read_cost.reads)
        return self.read_cost.slots_for(left, MAX_ROUND_BUDGETS * budget, ROUND_FIXED_SHARE, CHUNK_SLOTS)

    def add_round(self, slots: int, seconds: float) -> None:
        """A round of ``slots`` slots took ``seconds`` (its parity's drain included)."""
        self.read_cost.add(slots, seconds)
        self._copy_seconds, self._copy_slots = self._copy_seconds + seconds, self._copy_slots + slots

    def saved_up(self) -> float:
        """The credit the final boundary waits for: the debt paid off and the predicted pause saved up."""
        return max(0.0, self.final_reserve or 0.0)

    def paid(self, boundaries: int) -> bool:
        """Whether the final boundary may come once every shard was read: the credit holds what it waits for, and
        (a budget in seconds) the pause's prediction was made by the last of the ``boundaries`` so far."""
        if self.credit < self.saved_up():
            return False
        return not self.by_seconds or self._reserve_at == boundaries

    def wants_reserve(self, left: float) -> bool:
        """Whether ``left`` seconds of this boundary's credit pay for asking the prediction again on top of what is
        saved up (asked again each time the credit reaches it: rows keep changing while it is saved up)."""
        return left >= self.saved_up() + self._reserve_asked

    def reserve(self, old: OldServers, shards: Dict[ShardKey, CopiedShard], boundaries: int) -> None:
        """The final pause predicted now (:func:`predict_pause` at the rounds' own seconds per slot), by the
        boundary after ``boundaries`` (counted at its end), on this boundary's clock."""
        began = self.clock()
        per_slot = self._copy_seconds / self._copy_slots if self._copy_slots else 0.0
        self.final_reserve = predict_pause(old, shards, self.read_cost.fit()[0], per_slot)
        self._reserve_asked = self.clock() - began
        self._reserve_at = boundaries + 1
