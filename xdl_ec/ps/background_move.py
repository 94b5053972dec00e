"""BackgroundMove: a resize under ``--ft ec`` whose copy is spread over step boundaries while training goes on, as
a virtual machine migrates live: every row copied once onto fresh servers (their stripes formed beside the steps),
then, at a final boundary, only the rows changed or inserted since their copy (their clocks tell), and the switch.

Another server count is other stripes for every row, so every row must be copied; copying them at one boundary
would stop training for the table's copy. Each boundary's part keeps to the :class:`~xdl_ec.ps.resize.Resizer`'s
budget (the final pause included), and the old servers send their rows to the fresh owners themselves
(``forward_slots``), so the rows do not pass through the driver. An old server lost meanwhile is rebuilt by the old
stripes and the move goes on; a fresh one lost starts the move over on new fresh servers. The design:
docs/design/elastic.md ("Resizing a running cluster"); its measurements: docs/results/resize-2026-11-29.md.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.client import owner_positions, rows_by_owner
from xdl_ec.ps.cluster_view import ClusterView
from xdl_ec.ps.fault_tolerance import Unrecoverable
from xdl_ec.ps.move_hooks import NO_HOOKS, MoveHooks
from xdl_ec.ps.read_cost import ReadCost
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.resize_trainer import ResizeTrainer

__all__ = ["BackgroundMove", "FreshLost", "plan_round"]

CALL_SECONDS = 120.0  # a fresh server's answer; longer is taken for a loss
FRESH_ATTEMPTS = 3  # times the move starts over on new fresh servers before the resize fails
CHUNK_SLOTS = 8192  # the first round's slots (then sized by the fitted cost: see precopy)
SAMPLE_EVERY = 64  # the copied keys whose clocks predict the final pause (one in this many,
SAMPLE_MOST = 16384  # and at most this many a shard: a share within ~1% either way, whatever the table's size)
ROUND_FIXED_SHARE = 0.2  # a round is at least large enough that its fixed part (a round of calls) is this share
MAX_ROUND_BUDGETS = 256  # a round costs at most this many boundaries' budgets (then paid off before the next)


class FreshLost(RuntimeError):
    """A fresh server of a move died or stopped answering (the move starts over on new ones)."""


class _FreshView(ClusterView):
    """The resize's strategy's view while the fresh servers are not the cluster's yet: only them, no workers (the
    workers' push logs serve the old servers until the switch)."""

    def __init__(self, trainer: ResizeTrainer, handles: Sequence[Any]) -> None:
        super().__init__(*trainer.view.sources())
        self._handles = list(handles)

    @property
    def num_servers(self) -> int:
        return len(self._handles)

    def server_handles(self) -> List[Any]:
        return list(self._handles)

    def server(self, index: int) -> Remote:
        return Remote(self._handles[index], ServerAPI)

    def servers(self) -> List[Remote]:
        return [Remote(h, ServerAPI) for h in self._handles]

    def beside_handles(self) -> List[Any]:
        return list(self._handles)

    def agent(self, index: int, api: type, beside: bool = False) -> Remote:
        return Remote(self._handles[index], api, agent=True)

    def workers(self) -> List[Remote]:
        return []


class _Copied:
    """What the pre-copy read of one old server's shard of one table: the slot it reached and, per copied row,
    its key, slot and clock then."""

    def __init__(self) -> None:
        self.next_slot = 0  # where the next read starts (past the high-water mark once the end was reached)
        self.end: Optional[int] = None  # the shard's slot end at the last read (None: not read yet)
        self.reached_end = False
        self.keys: List[np.ndarray] = []
        self.slots: List[np.ndarray] = []
        self.clocks: List[np.ndarray] = []
        self.moved: List[np.ndarray] = []  # per copied row: whether its owner's id changes

    @property
    def done(self) -> bool:
        return self.reached_end

    def joined(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        def cat(parts: List[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

        joined = cat(self.keys, np.int64), cat(self.slots, np.int64), cat(self.clocks, np.int32), cat(self.moved, bool)
        if self.reached_end:  # nothing is added after the end was reached: kept joined (asked again at each reserve)
            self.keys, self.slots, self.clocks, self.moved = ([part] for part in joined)
        return joined


class BackgroundMove:
    """One re-forming resize in progress (see the module docstring): ``servers`` fresh servers of stable ids
    ``ids`` (in order), started ahead (``ready``) or here on ``placement``'s nodes."""

    def __init__(
        self,
        trainer: ResizeTrainer,
        servers: int,
        ids: Sequence[int],
        placement: Any,
        ready: Optional[List[Any]],
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
        self.ids = list(ids)
        self.old_ids = list(range(len(trainer.scheduler.servers))) if old_ids is None else list(old_ids)
        self.drain = set(int(i) for i in drain)
        self.placement = placement
        self.hooks = hooks
        self.clock = hooks.clock  # what a budget in seconds is counted by
        self.restarts = 0
        self.boundaries = 0  # pre-copy boundaries that copied rows
        self.rows_precopied = 0  # rows loaded by the pre-copy (over every attempt)
        self.bytes_copied = 0
        self.precopy_seconds = 0.0
        self.read_cost = ReadCost()  # a read's seconds by its slots: whether another fits in the credit
        self.credit = 0.0  # seconds of budget not spent yet (< 0: a read past it, paid off by later boundaries)
        self.started_step = int(trainer.step) + 1  # the first step trained while the rows move
        self._old = list(trainer.scheduler.servers)
        self._tables = [t.name for t in trainer.job.tables]
        self.fresh: List[Any] = []
        self.targets = _Targets([], [])  # the fresh servers as the old ones were told them
        self.strategy: Any = None
        self._starting: Optional[_FreshStart] = None  # the fresh servers until they are ready (_fresh_formed)
        self._begin(trainer, ready)

    # ---- the fresh servers ----------------------------------------------------------------------------------
    def _begin(self, trainer: ResizeTrainer, ready: Optional[List[Any]]) -> None:
        """Fresh servers with their own stripes (the resize's strategy, attached to them alone), nothing read. They
        start (``ready`` None; on Ray that takes seconds) and their stripes form in a thread while training goes on;
        boundaries read nothing until that is done and the old servers were told them (:meth:`_fresh_formed`)."""
        self._copied = {(t, p): _Copied() for t in self._tables for p in range(len(self._old))}
        self.fresh, self.targets = [], _Targets([], [])
        self.final_reserve: Optional[float] = None  # the final pause's predicted seconds, saved up before it
        self._reserve_asked = 0.0  # the seconds the last prediction took (the credit pays for the next one too)
        self._reserve_at: Optional[int] = None  # the boundary (count) that made it
        self._by_seconds = False  # whether the budget is in seconds (then the final pause is saved up)
        self._copy_seconds = self._copy_slots = 0.0  # the pre-copy's rounds: seconds and slots read, summed
        self.strategy = trainer.strategy.successor(self.code)
        self._starting = _FreshStart(trainer, self.servers, self.placement, ready, self.strategy)

    def _fresh_formed(self, trainer: ResizeTrainer, wait: bool) -> bool:
        """Whether the fresh servers are up with their stripes; a start under way is waited for when ``wait``
        (else False while it runs). Once they are, the old servers are told them (their links to them open beside
        the next steps). A start that failed, or a fresh server lost while the stripes formed: FreshLost."""
        start = self._starting
        if start is None:
            return True
        if not wait and start.is_alive():
            return False
        start.join()
        self._starting = None
        self.fresh = start.handles
        if start.error is not None:
            if start.forming and not isinstance(start.error, (RoleLost, TimeoutError)):
                raise start.error  # not a loss: the strategy refused these servers
            what = "was lost while its stripes formed" if start.forming else "did not start"
            raise FreshLost(f"a fresh server {what}: {start.error}") from start.error
        self.targets = _Targets(self.fresh, self.ids)
        if trainer.link_secret is None:  # one process: no link to open, told now (boundaries not timing-dependent)
            self.targets.tell(trainer, range(len(trainer.scheduler.servers)))
        else:
            self.targets.announce(trainer)
        return True

    def _start_over(self, trainer: ResizeTrainer, err: BaseException) -> None:
        """A fresh server was lost: new fresh servers, the pre-copy from the start (the old servers hold every row)."""
        self.restarts += 1
        self.drop(trainer)
        if self.restarts >= FRESH_ATTEMPTS:
            raise RuntimeError(f"resize: fresh servers were lost {self.restarts} times; the last: {err}") from err
        self._begin(trainer, None)

    def drop(self, trainer: ResizeTrainer) -> None:
        """Stops the fresh servers (a move started over or withdrawn; the old servers are untouched)."""
        if self._starting is not None:
            self._starting.join()
            self.fresh, self._starting = self._starting.handles, None
        if getattr(self.strategy, "background", None) is not None:
            self.strategy.background.stop()
        for handle in self.fresh:
            trainer.backend.kill(handle)
        self.fresh = []

    def _fresh_wait(self, trainer: ResizeTrainer, futures: List[Any]) -> List[Any]:
        try:
            return [f.result(CALL_SECONDS) for f in futures]
        except (RoleLost, TimeoutError) as err:
            raise FreshLost(f"a fresh server was lost mid-move: {err}") from err

    # ---- copying ----------------------------------------------------------------------------------------------
    @property
    def precopied(self) -> bool:
        """Every slot of every old shard was read once and the budget's debt paid off, with the final pause's
        predicted seconds saved up (:attr:`final_reserve`): the final boundary may come. A move's last round and
        its final pause are paid for by the boundaries of the move, not by the steps after it, so the move as a
        whole, pause included, keeps to its share of the steps' time."""
        if self._unfinished() or self.credit < self._saved_up():
            return False
        return not self._by_seconds or self._reserve_at == self.boundaries  # (a prediction the last boundary made)

    def _saved_up(self) -> float:
        """The credit the final boundary waits for: the debt paid off and the predicted pause saved up."""
        return max(0.0, self.final_reserve or 0.0)

    def _reserve_final(self, trainer: ResizeTrainer) -> None:
        """The final pause's seconds predicted for the rows it would copy now: those whose clock changed since their
        copy (estimated from every SAMPLE_EVERY-th copied key's clock, SAMPLE_MOST a shard at most) and those
        inserted since the pre-copy passed (the old servers' row counts tell), at the pre-copy's own seconds per slot
        read (its rounds, their parity's drain included), plus a round's fixed part. Asked again each time the
        credit reaches it (and pays for asking), as rows keep changing while it is saved up; it grows to one more
        copy of the table at most. A job whose steps touch few rows saves up little; one that rewrites most of them
        about the pre-copy's own cost again, and its move takes that much longer rather than a larger share of the
        steps."""
        began = self.clock()
        asks, sampled, copied_rows = [], [], []
        for (table, p), copied in self._copied.items():
            keys, _, clocks, _ = copied.joined()
            every = max(SAMPLE_EVERY, -(-keys.size // SAMPLE_MOST))
            asks.append((p, table, keys[::every]))
            sampled.append(clocks[::every])
            copied_rows.append(keys.size)
        rows = 0.0
        for (count, now), clocks, n in zip(_ask_clocks(trainer, asks), sampled, copied_rows):
            now = np.asarray(now, np.int32)
            changed, gone = (
                (np.count_nonzero((now != clocks) & (now >= 0)) / now.size, np.count_nonzero(now < 0) / now.size)
                if now.size
                else (0.0, 0.0)
            )
            rows += changed * n + max(0.0, int(count) - n * (1.0 - gone))  # changed, and inserted since
        per_slot = self._copy_seconds / self._copy_slots if self._copy_slots else 0.0
        self.final_reserve = self.read_cost.fit()[0] + per_slot * rows if rows >= 1 else 0.0
        self._reserve_asked = self.clock() - began
        self._reserve_at = self.boundaries + 1  # (counted at the end of this boundary)

    def _unfinished(self) -> int:
        return sum(not c.done for c in self._copied.values())

    def precopy(self, trainer: ResizeTrainer, rows: Optional[int] = None, seconds: Optional[float] = None) -> int:
        """One pre-copy boundary: slot records read from the old servers and loaded onto the fresh layout, at most
        ``rows`` of them (a shard after another), or rounds of reads while the move's budget in seconds lasts
        (``seconds`` more at each boundary, :attr:`credit`); returns the slots read. A budget in seconds is kept
        on average: a boundary with credit makes one round whatever it costs and more while :attr:`read_cost`
        predicts the next fits, and a boundary in debt (a round cost more than the credit) reads nothing. A round
        reads every unfinished shard at once, one call per old server, which sends the rows to their fresh
        owners itself (:meth:`_round`), so its fixed part is one round of calls, not one per shard; it is sized
        by the fitted cost (:meth:`_round_slots`): what the credit left pays for, but large enough that the fixed
        part is at most ROUND_FIXED_SHARE of it, and at most MAX_ROUND_BUDGETS boundaries' budgets (its debt is
        paid off before the final boundary, :attr:`precopied`). A fresh server lost: the pre-copy starts over on
        new ones, started beside the steps (boundaries read nothing until they answer); an old server lost:
        RoleLost (its strategy rebuilds it at this boundary; the move goes on after)."""
        start = self.clock()
        self.hooks.phase("precopy", trainer, self)
        loaded = slots_read = 0
        try:
            formed = self._fresh_formed(trainer, wait=False) and self.targets.announced
            if not formed:
                seconds = None  # the fresh servers are starting (or being told): nothing to read into, no credit kept
            elif seconds is not None:
                self.credit += seconds
                self._by_seconds = True
            if formed and rows is not None:
                loaded, slots_read = self._precopy_rows(trainer, max(1, int(rows)))
            elif formed:
                rounds = 0
                while self._unfinished():
                    left = self.credit - (self.clock() - start)
                    slots = self._round_slots(left, seconds or 0.0)
                    if left <= 0 or (rounds and self.read_cost.seconds(slots) > left):
                        break
                    began = self.clock()
                    n, read = self._round(trainer, plan_round(self._copied, slots))
                    self._durable()  # the fresh parity's work in the round, on its budget (not beside the steps)
                    took = self.clock() - began
                    self.read_cost.add(read, took)
                    self._copy_seconds, self._copy_slots = self._copy_seconds + took, self._copy_slots + read
                    loaded, slots_read, rounds = loaded + n, slots_read + read, rounds + 1
                left = self.credit - (self.clock() - start)
                if seconds is not None and not self._unfinished() and left >= self._saved_up() + self._reserve_asked:
                    self._reserve_final(trainer)  # (on this boundary's clock)
        except FreshLost as err:
            self._start_over(trainer, err)
            return 0
        seconds_taken = self.clock() - start
        if seconds is not None:
            self.credit -= seconds_taken
        self.precopy_seconds += seconds_taken
        self.boundaries += 1
        self.rows_precopied += loaded
        self.hooks.phase("precopied", trainer, self)
        return slots_read

    def _precopy_rows(self, trainer: ResizeTrainer, budget: int) -> Tuple[int, int]:
        """At most ``budget`` slots read, a shard after another: (rows loaded, slots read)."""
        loaded = slots_read = 0
        for (table, p), copied in self._copied.items():
            if copied.done:
                continue
            if budget <= 0:
                break
            n, read = self._round(trainer, [(table, p, budget)])
            budget -= read
            loaded, slots_read = loaded + n, slots_read + read
        return loaded, slots_read

    def _round_slots(self, left: float, budget: float) -> int:
        """The slots of the next round, ``left`` seconds of credit left of ``budget`` per boundary: CHUNK_SLOTS,
        then 4 x CHUNK_SLOTS (two sizes, so the fit sees a fixed part), then sized by the fitted cost
        (:meth:`ReadCost.slots_for`: what the credit pays for, at least enough that the fixed part is at most
        ROUND_FIXED_SHARE, at most MAX_ROUND_BUDGETS boundaries' budgets)."""
        if self.read_cost.reads < 2:
            return CHUNK_SLOTS * (1 + 3 * self.read_cost.reads)
        return self.read_cost.slots_for(left, MAX_ROUND_BUDGETS * budget, ROUND_FIXED_SHARE, CHUNK_SLOTS)

    def _round(self, trainer: ResizeTrainer, plan: List[Tuple[str, int, int]]) -> Tuple[int, int]:
        """Has the old servers send ``plan``'s (table, position, slots) to the fresh layout themselves, one call per
        old server (:meth:`ParameterServer.forward_slots`: the rows go from old server to fresh owner, not through
        the driver), and waits: (rows loaded, slots read)."""
        reads = [(p, table, (self._copied[(table, p)].next_slot, ask)) for table, p, ask in plan]
        parts = _forward_old(trainer, reads, self.targets)
        slots_read = loaded = 0
        for (table, p, ask), part in zip(plan, parts):
            copied = self._copied[(table, p)]
            end = int(part["end"])
            read = max(0, min(ask, end - copied.next_slot))
            slots_read += max(read, 1)
            live = np.asarray(part["slots"])
            copied.end = end
            if live.size < read or read == 0:
                # a free slot: the high-water mark (no row is erased under ec, so slots fill in order); rows
                # inserted from now on come after it, and the final boundary reads on from there
                copied.next_slot = int(live[-1]) + 1 if live.size else copied.next_slot
                copied.reached_end = True
            else:
                copied.next_slot += read
                # read up to the shard's end: rows inserted from now on come after it (saves a read of none)
                copied.reached_end = copied.next_slot >= end
            loaded += int(np.asarray(part["keys"]).size)
            self.bytes_copied += int(part["bytes"])
            copied.keys.append(part["keys"])
            copied.slots.append(part["slots"])
            copied.clocks.append(part["clocks"])
            copied.moved.append(self._moves(part["keys"], p, np.asarray(part["owner"], np.int64)))
        return loaded, slots_read

    def _durable(self) -> None:
        """Waits until the fresh parity holds every row loaded so far."""
        try:
            self.strategy.drain()
        except (RoleLost, TimeoutError, Unrecoverable) as err:
            raise FreshLost(f"a fresh server was lost before its parity was durable: {err}") from err

    def _owners(self, keys: np.ndarray) -> np.ndarray:
        """Each key's owner as a position among the fresh servers."""
        return np.asarray(owner_positions(np.asarray(keys, dtype=np.int64), self.ids), dtype=np.int64)

    def _load(self, trainer: ResizeTrainer, table: str, rows: Dict[str, Any]) -> int:
        """Loads ``rows`` (read through the driver: a shard copied whole) into their owners among the fresh
        servers, one call per owner; returns how many."""
        keys = np.asarray(rows["keys"], dtype=np.int64)
        if not keys.size:
            return 0
        owner = self._owners(keys)
        loads = []
        for dest, part in rows_by_owner(rows, owner):
            self.bytes_copied += int(sum(part[f].nbytes for f in part))
            loads.append(Remote(self.fresh[dest], ServerAPI).load_rows(table, part))
        self._fresh_wait(trainer, loads)
        return int(keys.size)

    def _moves(self, keys: np.ndarray, position: int, owner: Optional[np.ndarray] = None) -> np.ndarray:
        """Per key of the old server at ``position``: whether its owner's id changes (every key of a drained one);
        ``owner``: the keys' positions among the fresh servers, if known."""
        keys = np.asarray(keys, dtype=np.int64)
        if self.old_ids[position] in self.drain:
            return np.ones(keys.size, bool)
        return np.asarray(self.ids)[self._owners(keys) if owner is None else owner] != self.old_ids[position]

    def _erase(self, trainer: ResizeTrainer, table: str, keys: np.ndarray) -> None:
        if not keys.size:
            return
        owner = np.asarray(owner_positions(keys, self.ids))
        self._fresh_wait(
            trainer,
            [Remote(self.fresh[int(d)], ServerAPI).erase_rows(table, keys[owner == d]) for d in np.unique(owner)],
        )

    # ---- the final boundary ---------------------------------------------------------------------------------
    def finish(self, trainer: ResizeTrainer, live: List[int]) -> Optional[Dict[str, Any]]:
        """The final boundary (the caller quiesced and settled the workers' pulls): the rest copied, parity
        durable, the switch. Returns the figures (rows_recopied, rows_final, final_pause_s, ...) or None when a
        fresh server was lost here (the pre-copy starts over on new ones; the old servers serve on)."""
        start = time.perf_counter()
        old_strategy = trainer.strategy
        old_strategy.finish_rebuild()  # no shard under restore: every clock and slot read is whole
        self.hooks.phase("export", trainer, self)
        recopied = final = whole = held = moved = 0
        try:
            self._fresh_formed(trainer, wait=True)  # (the run's last boundary while fresh servers start)
            shards = list(self._copied.items())
            joined = [copied.joined() for _, copied in shards]
            # every copied row's clock now and every shard's row count: one call per old server
            answers = _ask_clocks(trainer, [(p, table, keys) for ((table, p), _), (keys, *_) in zip(shards, joined)])
            counts = [int(n) for n, _ in answers]
            nows = [np.asarray(now, np.int32) for _, now in answers]
            # the rows inserted since the pre-copy passed (the slots past where it reached) and those changed since
            # their copy, sent by the old servers themselves: one call per old server
            reads: List[Tuple[int, str, Any]] = []
            for ((table, p), copied), (_, slots, clocks, _), now in zip(shards, joined, nows):
                changed = (now != clocks) & (now >= 0)
                reads.append((p, table, (copied.next_slot, 1 << 62)))
                reads.append((p, table, slots[changed]))
            sent = _forward_old(trainer, reads, self.targets)
            for i, (((table, p), _), (keys, _, clocks, moves)) in enumerate(zip(shards, joined)):
                now, count, tail, again = nows[i], counts[i], sent[2 * i], sent[2 * i + 1]
                self.bytes_copied += int(tail["bytes"]) + int(again["bytes"])
                gone = now < 0  # a row a recovery rolled back (inserted after the stripes' durable point)
                changed = (now != clocks) & ~gone
                tail_keys, again_keys = np.asarray(tail["keys"]), np.asarray(again["keys"])
                final += int(tail_keys.size) + int(again_keys.size)
                exact = count == int(np.count_nonzero(~gone)) + int(tail_keys.size)
                if not exact or not np.array_equal(again_keys, keys[changed]):
                    # a row inserted into a slot freed before the copy passed it (or a slot that holds another
                    # row now): this shard is copied whole here, exact either way
                    rows = _wait_old(trainer, p, "export", table)
                    self._erase(trainer, table, np.setdiff1d(keys, np.asarray(rows["keys"], np.int64)))
                    final += self._load(trainer, table, rows)
                    held += int(np.asarray(rows["keys"]).size)
                    moved += int(np.count_nonzero(self._moves(rows["keys"], p)))
                    whole += 1
                    continue
                recopied += int(again_keys.size)
                self._erase(trainer, table, keys[gone])
                held += count
                moved += int(np.count_nonzero(moves[~gone]))
                moved += int(np.count_nonzero(self._moves(tail_keys, p, np.asarray(tail["owner"], np.int64))))
            self.hooks.phase("load", trainer, self)
            self._durable()  # every row durable on the new layout: the old servers may go
        except FreshLost as err:
            self._start_over(trainer, err)
            return None
        self._switch(trainer, live)
        return {
            "rows": held,
            "rows_moved": moved,
            "rows_recopied": recopied,
            "rows_final": final,
            "shards_copied_whole": whole,
            "final_pause_s": time.perf_counter() - start,
        }

    def _switch(self, trainer: ResizeTrainer, live: List[int]) -> None:
        """The fresh servers become the cluster under the resize's strategy; the old ones stop."""
        scheduler = trainer.scheduler
        trainer.strategy.retire()
        old = list(scheduler.servers)
        scheduler.replace_servers(self.fresh, self.placement)
        scheduler.server_ids = None if self.ids == list(range(self.servers)) else list(self.ids)
        trainer.client.set_servers(self.fresh, 0, self.ids)
        _wait_trainer(trainer, [trainer.worker(i).set_servers(self.fresh, 0, self.ids) for i in live])
        self.strategy.view = trainer.view  # the cluster's view from now on (recoveries, replays)
        _wait_trainer(trainer, [trainer.worker(i).enable_push_log() for i in live])
        trainer.strategy = self.strategy
        for handle in old:
            trainer.backend.kill(handle)


class _FreshStart:
    """A move's fresh servers made ready: started (unless ``ready`` holds them) and ``strategy`` attached to them
    alone (their stripes formed). In a thread beside the steps when they must start (on Ray seconds) or on Ray
    (the stripes' ~0.1 s of calls, not in a boundary); given servers in one process form at once (a few ms, and a
    boundary count that does not depend on a thread's timing). ``handles`` once done, or ``error`` (``forming``:
    raised while the stripes formed)."""

    def __init__(
        self, trainer: ResizeTrainer, servers: int, placement: Any, ready: Optional[Sequence[Any]], strategy: Any
    ) -> None:
        self._trainer, self._servers, self._placement, self._strategy = trainer, servers, placement, strategy
        self.handles: List[Any] = list(ready or ())
        self.forming = False
        self.error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        if ready is not None and trainer.link_secret is None:
            self.run()
        else:
            self._thread = threading.Thread(target=self.run, name="xdl-ec-move-start", daemon=True)
            self._thread.start()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def run(self) -> None:
        try:
            if not self.handles:
                self.handles = self._trainer.scheduler.start_servers(range(self._servers), self._placement)
            self.forming = True
            self._strategy.attach(_FreshView(self._trainer, self.handles))
        except BaseException as err:  # noqa: BLE001 - the move's next boundary raises it (a loss as FreshLost)
            self.error = err


def _wait_trainer(trainer: ResizeTrainer, futures: List[Any]) -> List[Any]:
    answers, lost = trainer.drain(futures)
    if lost:
        raise lost[0]
    return answers


def plan_round(copied: Dict[Tuple[str, int], "_Copied"], slots: int) -> List[Tuple[str, int, int]]:
    """The reads of a round of ``slots`` slots: (table, position, slots) per unfinished shard of ``copied``, in
    its order, ``slots`` split evenly over them (a shard whose end is known asks at most what it has left, at
    least 1, and what it leaves goes to the others)."""
    todo = [(key, c) for key, c in copied.items() if not c.done]
    asks = {key: 0 for key, _ in todo}
    left, open_ = int(slots), list(todo)
    while open_ and left > 0:
        share = max(1, -(-left // len(open_)))
        still, capped = [], False
        for key, c in open_:
            rest = None if c.end is None else max(1, c.end - c.next_slot - asks[key])
            take = share if rest is None else min(share, rest)
            asks[key] += take
            left -= take
            capped = capped or take < share
            if rest is None or take < rest:
                still.append((key, c))
        if not capped:
            break
        open_ = still
    return [(table, p, max(1, asks[(table, p)])) for (table, p), _ in todo]


class _Targets:
    """The fresh servers (handles, stable ids) the old servers forward to: each old server process is told them
    once (``forward_to``, which opens its links to them) before its first forward; a rebuilt one's replacement
    anew. :meth:`announce` tells them all without waiting, so the links open beside the steps."""

    def __init__(self, fresh: List[Any], ids: List[int]) -> None:
        self.fresh, self.ids = fresh, ids
        self._told: Dict[int, Any] = {}  # old position -> the handle told
        self._telling: Dict[int, Tuple[Any, Any]] = {}  # old position -> (handle, its forward_to in flight)

    def announce(self, trainer: ResizeTrainer) -> None:
        for p, handle in enumerate(trainer.scheduler.servers):
            self._telling[p] = (handle, Remote(handle, ServerAPI).forward_to(self.fresh, self.ids))

    @property
    def announced(self) -> bool:
        """Whether every forward_to sent by :meth:`announce` was answered (a failed one too: :meth:`tell` says)."""
        return all(future.done() for _, future in self._telling.values())

    def tell(self, trainer: ResizeTrainer, positions: Sequence[int]) -> None:
        servers = trainer.scheduler.servers
        telling, self._telling = self._telling, {}
        due: Dict[int, Any] = {}
        for p in positions:
            if self._told.get(p) is servers[p]:
                continue
            handle, future = telling.get(p, (None, None))
            due[p] = future if handle is servers[p] else Remote(servers[p], ServerAPI).forward_to(self.fresh, self.ids)
        _wait_trainer(trainer, list(due.values()))
        for p in due:
            self._told[p] = servers[p]


def _forward_old(trainer: ResizeTrainer, reads: Sequence[Tuple[int, str, Any]], targets: _Targets) -> List[Any]:
    """Each (position, table, slots) of ``reads`` sent by that old server to its rows' owners among ``targets``, one
    forward_slots call per old server, asked at once (on Ray over the driver's links beside the steps'): per read,
    what forward_slots answers. A fresh server lost: FreshLost; an old server's loss is confirmed by the scheduler
    and raised (its strategy recovers it)."""
    targets.tell(trainer, sorted({p for p, _, _ in reads}))

    def lost(answer: List[Any]) -> None:
        if answer and "lost" in answer[0]:
            raise FreshLost(f"a fresh server was lost mid-move: {answer[0]['lost']}")

    return _per_old_server(trainer, reads, lambda old, mine: old.forward_slots(mine, CALL_SECONDS), lost)


def _ask_clocks(trainer: ResizeTrainer, asks: Sequence[Tuple[int, str, np.ndarray]]) -> List[Tuple[int, np.ndarray]]:
    """Per (position, table, keys) of ``asks``: that old server's row count of the table and the keys' clocks, one
    clocks_many call per old server, asked at once."""
    return _per_old_server(trainer, asks, lambda old, mine: old.clocks_many(mine))


def _per_old_server(
    trainer: ResizeTrainer,
    items: Sequence[Tuple[Any, ...]],
    ask: Callable[[Remote, List[Tuple[Any, ...]]], Any],
    check: Callable[[List[Any]], None] = lambda answer: None,
) -> List[Any]:
    """Each (position, *rest) of ``items`` asked of the old server at ``position``, one call per server
    (``ask(server, [rest, ...])``, answering a part per rest), all at once; each answer ``check``-ed before it is
    split: per item, its part."""
    by_server: Dict[int, List[int]] = {}
    for i, item in enumerate(items):
        by_server.setdefault(item[0], []).append(i)
    calls = [ask(_old(trainer, p), [items[i][1:] for i in mine]) for p, mine in by_server.items()]
    out: List[Any] = [None] * len(items)
    for mine, answer in zip(by_server.values(), _wait_trainer(trainer, calls)):
        check(answer)
        for i, part in zip(mine, answer):
            out[i] = part
    return out


def _old(trainer: ResizeTrainer, position: int) -> Remote:
    """The old server at ``position`` (the cluster's now: a rebuilt one's replacement), for the copy's calls: on Ray
    over the driver's link beside the steps' (a call's arrays sent from their memory, not through the object store),
    in one process on the server's own thread (a call beside would run in the driver's)."""
    if trainer.link_secret is None:
        return Remote(trainer.scheduler.servers[position], ServerAPI)
    return Remote(trainer.server_beside(position), ServerAPI, beside=True)


def _wait_old(trainer: ResizeTrainer, position: int, method: str, *args: Any) -> Any:
    """A call of the old server at ``position`` (the cluster's now: a rebuilt one's replacement); a loss is
    confirmed by the scheduler and raised (its strategy recovers it)."""
    handle = trainer.scheduler.servers[position]
    return _wait_trainer(trainer, [getattr(Remote(handle, ServerAPI), method)(*args)])[0]
