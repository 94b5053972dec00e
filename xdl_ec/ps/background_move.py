"""BackgroundMove: a resize under ``--ft ec`` whose copy is spread over step boundaries while training goes on, as
a virtual machine migrates live: every row copied once onto fresh servers (their stripes formed beside the steps),
then, at a final boundary, only the rows changed or inserted since their copy (their clocks tell), and the switch.

Another server count is other stripes for every row, so every row must be copied; copying them at one boundary
would stop training for the table's copy. The move is composed of its parts: the fresh side
(:class:`~xdl_ec.ps.fresh_servers.FreshServers`), the pre-copy's rounds (:class:`~xdl_ec.ps.copy_rounds.CopyRounds`,
the old servers sending their rows themselves), their pace (:class:`~xdl_ec.ps.move_budget.MoveBudget`, the final
pause included) and the final boundary's copy (:class:`~xdl_ec.ps.final_copy.FinalCopy`). An old server lost
meanwhile is rebuilt by the old stripes and the move goes on; a fresh one lost starts the move over on new fresh
servers. The design: docs/design/elastic.md ("Resizing a running cluster").
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from xdl_ec.ps.copy_rounds import CopiedShard, CopyRounds, ShardKey, plan_round
from xdl_ec.ps.fault_tolerance import FaultTolerance
from xdl_ec.ps.final_copy import FinalCopy
from xdl_ec.ps.fresh_lost import FreshLost
from xdl_ec.ps.fresh_servers import FreshServers
from xdl_ec.ps.fresh_targets import FreshTargets
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.move_budget import MoveBudget
from xdl_ec.ps.move_hooks import NO_HOOKS, MoveHooks
from xdl_ec.ps.move_routes import MoveRoutes
from xdl_ec.ps.old_servers import OldServers
from xdl_ec.ps.placement import Placement
from xdl_ec.ps.read_cost import ReadCost
from xdl_ec.ps.resize_trainer import ResizeTrainer

__all__ = ["BackgroundMove", "FreshLost", "plan_round"]

FRESH_ATTEMPTS = 3  # times the move starts over on new fresh servers before the resize fails


class BackgroundMove:
    """One re-forming resize in progress (see the module docstring): ``servers`` fresh servers of stable ids
    ``ids`` (in order), started ahead (``ready``) or here on ``placement``'s nodes. Its figures (``restarts``,
    ``boundaries``, ``rows_precopied``, ``bytes_copied``, ``precopy_seconds``, ``started_step``) make the resize's
    record."""

    def __init__(
        self,
        trainer: ResizeTrainer,
        servers: int,
        ids: Sequence[int],
        placement: Optional[Placement],
        ready: Optional[List[Handle]],
        hooks: MoveHooks = NO_HOOKS,
        old_ids: Optional[Sequence[int]] = None,
        drain: Sequence[int] = (),
        code: Optional[Tuple[int, int]] = None,
    ) -> None:
        """``old_ids``: the old servers' stable ids (None: 0..n-1), ``drain`` those that leave: a row's move
        counts in ``rows_moved`` when its owner's id changes or its old server is drained. ``code``: the (k, r)
        the fresh stripes take (None: the current strategy's)."""
        self.servers = servers
        self.code = code
        self.placement = placement
        self.hooks = hooks
        old = list(range(len(trainer.scheduler.servers))) if old_ids is None else list(old_ids)
        self.routes = MoveRoutes(ids, old, drain)
        self.budget = MoveBudget(hooks.clock)
        self.restarts = 0
        self.boundaries = 0  # pre-copy boundaries that copied rows
        self.rows_precopied = 0  # rows loaded by the pre-copy (over every attempt)
        self._bytes_before = 0  # what earlier attempts and final boundaries sent (see bytes_copied)
        self.precopy_seconds = 0.0
        self.started_step = int(trainer.step) + 1  # the first step trained while the rows move
        self._old = OldServers(trainer)
        self._positions = len(trainer.scheduler.servers)
        self._tables = [t.name for t in trainer.job.tables]
        self._begin(trainer, ready)

    def _begin(self, trainer: ResizeTrainer, ready: Optional[List[Handle]]) -> None:
        """An attempt: fresh servers with their own stripes, starting beside the steps; nothing read. Boundaries
        read nothing until they formed and the old servers were told them (:meth:`FreshServers.formed`)."""
        self.rounds = CopyRounds(self._tables, self._positions, self._old, self.routes)
        self.budget.restart()
        self.side = FreshServers(trainer, self.servers, self.routes, self.placement, ready, self.code)

    # ---- what the resize and its observers read -------------------------------------------------------------
    @property
    def bytes_copied(self) -> int:
        """The bytes the move sent onto fresh servers, over every attempt."""
        return self._bytes_before + self.rounds.bytes

    @property
    def ids(self) -> List[int]:
        return self.routes.ids

    @property
    def fresh(self) -> List[Handle]:
        """The fresh servers' handles (empty while they start)."""
        return self.side.handles

    @property
    def targets(self) -> FreshTargets:
        return self.side.targets

    @property
    def strategy(self) -> FaultTolerance:
        """The resize's strategy, the fresh servers' (the cluster's after the switch)."""
        return self.side.strategy

    @property
    def read_cost(self) -> ReadCost:
        return self.budget.read_cost

    @property
    def credit(self) -> float:
        return self.budget.credit

    @property
    def final_reserve(self) -> Optional[float]:
        """The final pause's predicted seconds, saved up before it (None: not predicted)."""
        return self.budget.final_reserve

    @property
    def shards(self) -> Dict[ShardKey, CopiedShard]:
        """The pre-copy's shards of this attempt."""
        return self.rounds.shards

    @property
    def precopied(self) -> bool:
        """Every slot of every old shard was read once and the budget's debt paid off, with the final pause's
        predicted seconds saved up (:attr:`final_reserve`): the final boundary may come. A move's last round and
        its final pause are paid for by the boundaries of the move, not by the steps after it, so the move as a
        whole, pause included, keeps to its share of the steps' time."""
        return not self.rounds.unfinished() and self.budget.paid(self.boundaries)

    # ---- the pre-copy -----------------------------------------------------------------------------------------
    def precopy(self, trainer: ResizeTrainer, rows: Optional[int] = None, seconds: Optional[float] = None) -> int:
        """One pre-copy boundary: slot records read from the old servers and loaded onto the fresh layout, at most
        ``rows`` of them (a shard after another), or rounds of reads while the move's budget in seconds lasts
        (``seconds`` more at each boundary: :class:`~xdl_ec.ps.move_budget.MoveBudget`); returns the slots read.
        A fresh server lost: the pre-copy starts over on new ones, started beside the steps (boundaries read
        nothing until they answer); an old server lost: RoleLost (its strategy rebuilds it at this boundary; the
        move goes on after)."""
        start = self.budget.clock()
        self.hooks.phase("precopy", trainer, self)
        loaded = slots_read = 0
        try:
            formed = self.side.formed(trainer, wait=False) and self.side.targets.announced
            if not formed:
                seconds = None  # the fresh servers are starting (or being told): nothing to read into, no credit kept
            elif seconds is not None:
                self.budget.earn(seconds)
            if formed and rows is not None:
                loaded, slots_read = self.rounds.by_rows(self.side.targets, max(1, int(rows)))
            elif formed:
                loaded, slots_read = self._rounds_on_credit(start, seconds or 0.0)
                left = self.budget.credit - (self.budget.clock() - start)
                if seconds is not None and not self.rounds.unfinished() and self.budget.wants_reserve(left):
                    self.budget.reserve(self._old, self.rounds.shards, self.boundaries)  # (on this boundary's clock)
        except FreshLost as err:
            self._start_over(trainer, err)
            return 0
        seconds_taken = self.budget.clock() - start
        if seconds is not None:
            self.budget.credit -= seconds_taken
        self.precopy_seconds += seconds_taken
        self.boundaries += 1
        self.rows_precopied += loaded
        self.hooks.phase("precopied", trainer, self)
        return slots_read

    def _rounds_on_credit(self, start: float, seconds: float) -> Tuple[int, int]:
        """Rounds while the credit lasts (one whatever it costs, more while the next is predicted to fit), each
        waiting for the fresh parity so that work is on the budget too: (rows loaded, slots read)."""
        budget, clock = self.budget, self.budget.clock
        loaded = slots_read = rounds = 0
        while self.rounds.unfinished():
            left = budget.credit - (clock() - start)
            slots = budget.round_slots(left, seconds)
            if left <= 0 or (rounds and budget.read_cost.seconds(slots) > left):
                break
            began = clock()
            n, read = self.rounds.round(self.side.targets, plan_round(self.rounds.shards, slots))
            self.side.durable()  # the fresh parity's work in the round, on its budget (not beside the steps)
            budget.add_round(read, clock() - began)
            loaded, slots_read, rounds = loaded + n, slots_read + read, rounds + 1
        return loaded, slots_read

    def _start_over(self, trainer: ResizeTrainer, err: BaseException) -> None:
        """A fresh server was lost: new fresh servers, the pre-copy from the start (the old servers hold every row)."""
        self.restarts += 1
        self.drop(trainer)
        if self.restarts >= FRESH_ATTEMPTS:
            raise RuntimeError(f"resize: fresh servers were lost {self.restarts} times; the last: {err}") from err
        self._bytes_before += self.rounds.bytes
        self._begin(trainer, None)

    def drop(self, trainer: ResizeTrainer) -> None:
        """Stops the fresh servers (a move started over or withdrawn; the old servers are untouched)."""
        self.side.stop(trainer)

    # ---- the final boundary ---------------------------------------------------------------------------------
    def finish(self, trainer: ResizeTrainer, live: List[int]) -> Optional[Dict[str, Any]]:
        """The final boundary (the caller quiesced and settled the workers' pulls): the rest copied, parity
        durable, the switch. Returns the figures (rows_recopied, rows_final, final_pause_s, ...) or None when a
        fresh server was lost here (the pre-copy starts over on new ones; the old servers serve on)."""
        start = time.perf_counter()
        trainer.strategy.finish_rebuild()  # no shard under restore: every clock and slot read is whole
        self.hooks.phase("export", trainer, self)
        final = FinalCopy(self._old, self.side, self.routes)
        try:
            try:
                self.side.formed(trainer, wait=True)  # (the run's last boundary while fresh servers start)
                figures = final.run(list(self.rounds.shards.items()))
                self.hooks.phase("load", trainer, self)
                self.side.durable()  # every row durable on the new layout: the old servers may go
            finally:
                self._bytes_before += final.bytes
        except FreshLost as err:
            self._start_over(trainer, err)
            return None
        self.side.take_over(trainer, live)
        return {
            "rows": figures.rows,
            "rows_moved": figures.rows_moved,
            "rows_recopied": figures.rows_recopied,
            "rows_final": figures.rows_final,
            "shards_copied_whole": figures.shards_copied_whole,
            "final_pause_s": time.perf_counter() - start,
        }
