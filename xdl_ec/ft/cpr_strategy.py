"""``--ft cpr``: partial recovery (Maeng et al., MLSys 2021), the second baseline.

Every server checkpoints its own shard on CPR's schedule (:class:`~xdl_ec.ft.cpr_checkpointer.CprCheckpointer`:
a full save, then partial saves of the rows ``--cpr-mode mfu`` or ``ssu`` selects, a full save again every
``full_every`` saves). The interval comes from the target portion of lost samples, ``T = 2 * N * MTBF * PLS``
(:func:`~xdl_ec.settings.interval.cpr_interval`, ``--cpr-pls`` with ``--mtbf``), or ``--cpr-interval`` steps.

Where things live: each server holds a :class:`CprAgent` (attached through ``ParameterServer.attach_agent``), which
sees every applied push (MFU/SSU bookkeeping and the per-row update ledger) and writes that server's checkpoints
into ``<dir>/server-NNNN``; it dies with its server, as the paper's per-node tracking does. The driver keeps what
must outlive a server: each server's ledger total (polled at every step boundary) and the samples trained since its
newest save.

On a server's death ONLY that server is replaced and reloads its newest full + partial saves; the others keep their
state, the dense state is untouched (it lives with the driver), and the failed step is retried. Nothing is rolled
back, so the updates the dead shard applied after each row's newest save are lost for good:

- ``lost_updates``: row updates lost = the dead server's ledger total at the last step boundary minus the update
  counts its restored rows carried when they were saved. The totals are polled without waiting (a poll sent at one
  boundary is read at the next, so the step loop never waits for it) and :meth:`PartialRecovery.settle` (the
  driver's quiesce) completes the poll in flight. Exact on the one-process backend, where a server runs the poll
  after the step's pushes; on Ray a poll may overtake the last step's pushes to that server; a server dying with
  its poll unanswered is counted from the poll before;
- ``lost_samples``: the samples trained whose updates to a failed shard were lost, fully or (for the rows a later
  partial save kept) partly, each sample counted once. A failure of server s loses the samples trained since s's
  state was last complete: its newest FULL save, or its previous reload if that came later (the samples before
  that reload were counted by the failure that caused it). The driver keeps the union of these sample intervals
  (on the axis of samples trained; cpr never rolls back, so it only grows); a failure's ``lost_samples`` is what
  it adds to the union, so the total never exceeds the samples trained, even when several servers lose the same
  samples. ``lost_updates`` is the exact count of row updates lost. With a full save at every save both are
  exact.

The accuracy cost shows in the report's ``auc`` / ``logloss`` against a failure-free run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

import numpy as np

from xdl_ec.ft.cpr_checkpointer import MODES, CprCheckpointer
from xdl_ec.ft.row_selection import AccessCounter
from xdl_ec.ps.agent import AgentHost, ServerAgent
from xdl_ec.ps.fault_tolerance import FailureRecord, FaultTolerance, Resume
from xdl_ec.settings.interval import IntervalPolicy, cpr_interval
from xdl_ec.sparse.table import EmbeddingTable

if TYPE_CHECKING:
    from xdl_ec.ps.cluster_view import ClusterView

__all__ = ["CprAgent", "PartialRecovery"]


class CprAgent(ServerAgent):
    """One server's CPR state (its agent), living in the server's process: counts every row a push updates, saves
    and restores the server's shards."""

    def __init__(self, host: AgentHost, root: str, mode: str, fraction: float, full_every: int, seed: int) -> None:
        self.root, self.mode, self.fraction, self.full_every, self.seed = root, mode, fraction, full_every, seed
        self._checkpointer: Optional[CprCheckpointer] = None
        self._ledger: Dict[str, AccessCounter] = {}

    def _ckpt(self) -> CprCheckpointer:
        if self._checkpointer is None:
            self._checkpointer = CprCheckpointer(
                self.root, self.mode, self.fraction, self.full_every, self.seed, ledger=self._ledger
            )
        return self._checkpointer

    def push(
        self,
        host: AgentHost,
        table: EmbeddingTable,
        keys: np.ndarray,
        grads: np.ndarray,
        step: int,
        pushes: Mapping[int, int],
        repeats: Optional[np.ndarray] = None,
        ttl_before: int = 0,
    ) -> None:
        table.push(keys, grads, step=step, repeats=repeats, ttl_before=ttl_before)
        self._count(table.name, keys, step)

    def _count(self, table: str, keys: np.ndarray, step: int) -> None:
        counter = self._ledger.get(table)
        if counter is None:
            counter = self._ledger[table] = AccessCounter()
        counter.add(keys)
        self._ckpt().record(table, keys, step)  # SSU samples by batch: one global step = one batch here

    def save(self, server: AgentHost, step: int) -> Dict[str, Any]:
        with server.lock:
            return self._save(server, step)

    def _save(self, server: AgentHost, step: int) -> Dict[str, Any]:
        tables = server.tables()
        for name in tables:
            self._ledger.setdefault(name, AccessCounter())
        ckpt = self._ckpt()
        full = ckpt.next_is_full()
        saved = ckpt.save(step, tables)
        return {"step": step, "full": full, "bytes": saved.nbytes(), "rows": sum(saved.rows(n) for n in saved.tables)}

    def updates(self, server: AgentHost) -> int:
        """Row updates applied so far (the ledger's total)."""
        return sum(c.total() for c in self._ledger.values())

    def restore(self, server: AgentHost) -> Dict[str, Any]:
        """Reloads this (fresh) server's tables from its chain; the ledger restarts at the saved counts."""
        with server.lock:
            return self._restore(server)

    def _restore(self, server: AgentHost) -> Dict[str, Any]:
        tables = server.tables()
        for name in tables:
            self._ledger.setdefault(name, AccessCounter())
        result = self._ckpt().restore(tables)
        server.replace_tables(result.tables)
        return {
            "step": result.step,
            "restored_rows": result.restored_rows,
            "saved_updates": self.updates(server),
            "checkpoints": [str(p) for p in result.checkpoints],
        }

    def stats(self, server: AgentHost) -> Dict[str, Any]:
        return self._ckpt().stats()


class PartialRecovery(FaultTolerance):
    """CPR: per-server partial checkpoints; a lost server alone reloads its shard, training goes on.

    Args:
      pls: target portion of lost samples (with ``mtbf``: interval ``2 * servers * mtbf * pls`` seconds).
      mtbf: the job's mean time between failures, seconds.
      interval_steps: checkpoint every this many steps instead (no MTBF needed).
      mode: ``mfu`` or ``ssu`` row selection for partial saves.
      fraction: rows (mfu) or batches (ssu) selected per partial save; full_every: saves per full save.
      directory: where servers save (None: a temporary directory removed at the end).
    """

    name = "cpr"

    def __init__(
        self,
        pls: float = 0.02,
        mtbf: Optional[float] = None,
        interval_steps: Optional[int] = None,
        mode: str = "mfu",
        fraction: float = 0.1,
        full_every: int = 10,
        directory: Optional[str] = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"--cpr-mode: must be one of {MODES}, got {mode!r}")
        if interval_steps is None and mtbf is None:
            raise ValueError(
                "--ft cpr: the interval comes from --cpr-pls and --mtbf (2 * servers * MTBF * PLS); "
                "give --mtbf, or --cpr-interval STEPS"
            )
        if mtbf is not None:
            cpr_interval(pls, mtbf, 1)  # validates pls and mtbf now, with a clear message
        self.pls, self.mtbf, self.interval_steps, self.mode = pls, mtbf, interval_steps, mode
        self.fraction, self.full_every, self.seed = fraction, full_every, seed
        self._own_dir = directory is None
        # absolute: the servers (Ray actors have another working directory) write there
        self._directory = None if directory is None else os.path.abspath(directory)
        self.policy: Optional[IntervalPolicy] = None
        self.saves: List[Dict[str, Any]] = []
        self.checkpoint_bytes = 0
        self.lost_updates = 0
        self._updates: List[int] = []  # each server's ledger total at the newest answered poll
        self._polls: List[Any] = []  # the poll in flight: one future per server
        self._saved_samples: List[int] = []  # trainer.samples at each server's newest full save or reload
        self._lost: List[List[int]] = []  # disjoint, sorted [start, end) intervals of samples counted as lost

    @property
    def interval_seconds(self) -> Optional[float]:
        if self.interval_steps is not None or self.view is None or self.mtbf is None:
            return None
        return cpr_interval(self.pls, self.mtbf, self.view.num_servers)

    @property
    def _policy(self) -> IntervalPolicy:
        if self.policy is None:
            raise RuntimeError("cpr: the strategy is not attached to a run (attach() sets its interval)")
        return self.policy

    def _attach_agent(self, index: int) -> Any:
        directory = self._directory
        if directory is None:
            raise RuntimeError("cpr: the strategy is not attached to a run (attach() makes its directory)")
        return self.view.server(index).attach_agent(
            CprAgent, str(Path(directory) / f"server-{index:04d}"), self.mode, self.fraction, self.full_every, self.seed
        )

    def attach(self, view: ClusterView) -> None:
        super().attach(view)
        if self._directory is None:
            self._directory = tempfile.mkdtemp(prefix="xdl-ec-cpr-")
        self.policy = (
            IntervalPolicy(steps=self.interval_steps)
            if self.interval_steps is not None
            else IntervalPolicy(seconds=self.interval_seconds)
        )
        self._call_all([self._attach_agent(i) for i in range(view.num_servers)])
        self._updates = [0] * view.num_servers
        self._saved_samples = [0] * view.num_servers
        self.save(0)

    def resumed(self, step: int) -> None:
        """A resumed run's rows are loaded: a lost shard reloads them, not the empty shard of :meth:`attach`."""
        self.save(step)

    def _call_all(self, futures: List[Any]) -> List[Any]:
        results, lost = self.view.wait(futures)
        if lost:
            raise lost[0]
        return results

    def save(self, step: int) -> None:
        """Every server saves its shard (full or partial per its schedule), in parallel."""
        v = self.view
        start = time.perf_counter()
        v.quiesce()
        results = self._call_all([v.agent(i, CprAgent).save(step) for i in range(v.num_servers)])
        end = time.perf_counter()
        self.checkpoint_seconds += end - start
        self.checkpoint_bytes += sum(r["bytes"] for r in results)
        self.saves.append({"step": step, "full": results[0]["full"], "seconds": end - start})
        self._saved_samples = [v.samples if r["full"] else before for r, before in zip(results, self._saved_samples)]
        self._policy.saved(step, end, end - start)

    def wants_boundary(self, step: int) -> bool:
        """Whether a save is due (async mode: the driver then lets the steps in flight finish)."""
        return self._policy.due(step, time.perf_counter())

    def settle(self) -> None:
        """Reads the ledger poll in flight (a server that died meanwhile keeps its previous total)."""
        polls, self._polls = self._polls, []
        results, _ = self.view.wait(polls)
        for i, total in enumerate(results):
            if total is not None:
                self._updates[i] = total

    def after_step(self, step: int) -> None:
        v = self.view
        self.settle()
        self._polls = [v.agent(i, CprAgent).updates() for i in range(v.num_servers)]
        if self._policy.due(step, time.perf_counter()):
            self.save(step)

    def recover(self, lost: BaseException) -> Resume:
        v = self.view
        self.settle()
        lost_samples = 0
        for index in v.dead_servers():
            start = time.perf_counter()
            v.replace_server(index)
            self._call_all([self._attach_agent(index)])
            [restored] = self._call_all([v.agent(index, CprAgent).restore()])
            updates = max(self._updates[index] - restored["saved_updates"], 0)
            self._updates[index] = restored["saved_updates"]
            samples = self._count_lost(self._saved_samples[index], v.samples)
            self._saved_samples[index] = v.samples  # its state is complete again from here (what came before is lost)
            self.lost_updates += updates
            lost_samples += samples
            self.failures.append(
                FailureRecord(
                    step=v.step + 1,
                    role="server",
                    index=index,
                    rebuild_seconds=time.perf_counter() - start,
                    samples_per_sec_during_rebuild=0.0,  # training waits for it
                    lost_samples=samples,
                )
            )
        return Resume(step=v.step, reader_position=None, lost_samples=lost_samples)

    def _count_lost(self, start: int, end: int) -> int:
        """Adds samples [start, end) to the lost ones; returns how many of them were not counted yet."""
        before = sum(b - a for a, b in self._lost)
        merged: List[List[int]] = []
        for a, b in sorted(self._lost + [[start, end]] if end > start else self._lost):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self._lost = merged
        return sum(b - a for a, b in merged) - before

    def report(self) -> Dict[str, Any]:
        out = super().report()
        out["lost_updates"] = self.lost_updates
        out["cpr"] = {
            "mode": self.mode,
            "pls_target": self.pls if self.interval_steps is None else None,
            "interval_seconds": self.interval_seconds,
            "interval_steps": self.interval_steps,
            "saves": len(self.saves),
            "full_saves": sum(s["full"] for s in self.saves),
            "bytes": self.checkpoint_bytes,
            "directory": self._directory,
        }
        return out

    def close(self) -> None:
        """Removes the temporary checkpoint directory (a user-given ``--ckpt-dir`` is kept)."""
        if self._own_dir and self._directory is not None and Path(self._directory).is_dir():
            shutil.rmtree(self._directory, ignore_errors=True)
