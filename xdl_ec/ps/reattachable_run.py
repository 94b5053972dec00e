"""ReattachableRun: a run on Ray whose servers, parity and worker outlive its driver for a grace, so that the same
command run again reattaches to them (``--run-dir DIR --reattach-within S``; docs/design/reattach.md).

It owns the run directory's side of that: the run's Ray head (found, or started: :mod:`xdl_ec.ps.run_head`), the
Ray namespace derived from the directory, the run record in its keeper actor (:mod:`xdl_ec.ps.run_keeper`), and
the driver's heartbeat (:mod:`xdl_ec.ps.run_heartbeat`). As a step hook it keeps the heartbeat's step and rewrites
the record when the cluster's roles changed. :meth:`end` ends the run's head: only a driver that dies leaves it up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from xdl_ec.ps.api import RoleAPI
from xdl_ec.ps.backend import CallTimeout, RoleLost, connect_ray, use_ray_token
from xdl_ec.ps.kept_handle import KeptHandle
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.run_head import HEARTBEAT_FILE, process_alive, read_head, start_head, stop_head
from xdl_ec.ps.run_heartbeat import RunHeartbeat, last_heartbeat
from xdl_ec.ps.run_keeper import KEEPER_NAME, RunKeeper, RunRecord
from xdl_ec.settings import checks

DEFAULT_GRACE = 300.0  # seconds the run's roles wait for a driver to reattach
PROBE_SECONDS = 10.0
END_SECONDS = 30.0  # a half-restored replacement ended at a reattach must stop answering within this

log = logging.getLogger(__name__)


def namespace_of(directory: Path) -> str:
    """The Ray namespace of the run in ``directory`` (its real path's hash: two run dirs never share one)."""
    return "xdl-ec-" + hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]


class ReattachableRun:
    """The run in ``directory`` with roles that outlive the driver for ``grace`` seconds: connects this process to
    the run's Ray head (started when none is up) in the run's namespace; :attr:`record` is the run record a dead
    driver left (None: none, or its roles are gone), :attr:`previous` the dead driver's last heartbeat."""

    def __init__(self, directory: Any, grace: float = DEFAULT_GRACE) -> None:
        self.directory = Path(directory).resolve()
        self.grace = checks.positive_number("reattach_within", grace)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.namespace = namespace_of(self.directory)
        self.previous = last_heartbeat(self.directory)  # before this driver's heartbeat overwrites it
        if self.previous is not None and _other_live_process(int(self.previous.get("pid", 0))):
            raise ValueError(
                f"--run-dir {self.directory}: a live driver (pid {self.previous.get('pid')}) runs this run; wait for "
                "it to end or give another --run-dir"
            )
        self.heartbeat = RunHeartbeat(self.directory, self.grace)
        previous = self.previous or {}
        # beat at once: a head waiting out its grace must see this driver before it ends the run
        self.heartbeat.start(int(previous.get("step", 0)), int(previous.get("samples", 0)))
        head = None
        try:
            use_ray_token()  # the run's head is started in token mode (run_head.start_head)
            head = read_head(self.directory)
            self.head_was_up = head is not None
            if head is None:
                head = start_head(self.directory, self.grace)
            self.head = head
            self.address = str(head["address"])
            connect_ray(self.address, namespace=self.namespace)
            self.keeper = self._keeper()
            kept: Optional[RunRecord] = self._call(self.keeper.get) if self.head_was_up else None
            self.record: Optional[RunRecord] = None if kept is None else kept.opened()
            # replacements a dead driver's recovery started and no boundary found whole (run_keeper's journal)
            journal = self._call(self.keeper.replacements) if self.head_was_up else []
            self.journal: List[Tuple[int, Any]] = [(index, kept_handle.open()) for index, kept_handle in journal]
        except BaseException:
            self.heartbeat.stop()
            if head is not None and not self.head_was_up:  # a head started for nothing: not left for its grace
                stop_head(self.directory, head)
            raise
        self.refused: Optional[str] = None
        self.redone: List[int] = []  # servers whose recovery this driver redoes (their replacements ended)
        self._version: Optional[int] = None
        self._roles: Optional[tuple] = None
        self._journaled = False  # this driver journaled a replacement its rebuild has not completed yet

    # ---- what a dead driver left --------------------------------------------------------------------------
    def usable_record(self, shape: Dict[str, Any], tolerated_losses: int) -> Optional[RunRecord]:
        """The record to reattach to: None when there is none, when the run had another ``shape`` (an error: the
        command differs), or when its roles cannot continue it (the worker, holding the dense state, or more than
        ``tolerated_losses`` servers gone: then every role left is ended and :attr:`refused` says why)."""
        record = self.record
        if record is None:
            return None
        if record.shape != shape:
            raise ValueError(
                f"--run-dir {self.directory}: its run was started as {record.shape}, this command asks for {shape}; "
                "rerun the same command, or give another --run-dir"
            )
        previous = self.previous or {}
        if previous.get("recovering") or previous.get("rebuilding") or self.journal:
            record = self.record = self._end_unproven(record, bool(previous.get("recovering")))
        dead_workers = [w.index for w in record.workers if not _answers(w)]
        dead_servers = [s.index for s in record.servers if not _answers(s)]
        if self.refused is not None:
            pass  # a replacement that would not end
        elif dead_workers:
            self.refused = f"worker(s) {dead_workers} died with the driver (the dense state with them)"
        elif len(dead_servers) > tolerated_losses:
            self.refused = f"servers {dead_servers} died meanwhile, more than the {tolerated_losses} the code covers"
        if self.refused is not None:
            log.warning("--run-dir %s: cannot reattach: %s; the run starts again", self.directory, self.refused)
            self.abandon()
            return None
        return record

    def _end_unproven(self, record: RunRecord, recovering: bool) -> RunRecord:
        """The dead driver was recovering or rebuilding lost servers: every replacement it started (the journal)
        is ended, whatever it holds (half restored, or whole without a boundary having seen it), so that its
        server counts as lost and the recovery is redone from the survivors, exactly (docs/design/reattach.md).
        Then the record's spares are ended too (mid-recovery one may have taken a lost server's index before the
        journal named it; the scheduler starts spares again). Returns the record this driver adopts (no spares)."""
        redo = sorted({index for index, _ in self.journal})
        ended = [handle for _, handle in self.journal] + [record.servers[i] for i in redo]
        spares = list(record.spares)
        if recovering or redo:
            ended += spares
            spares = []
        _end_actors(ended)
        deadline = time.monotonic() + END_SECONDS
        answering = [h for h in ended if _answers(h, 1.0)]
        while answering and time.monotonic() < deadline:
            time.sleep(0.2)
            answering = [h for h in answering if _answers(h, 1.0)]
        if answering:
            self.refused = f"replacements {[h.index for h in answering]} still answer {END_SECONDS:g} s after a kill"
        self.redone = redo
        self._call(self.keeper.rebuilt)  # ended: the next recovery journals its own
        self.journal = []
        if redo:
            log.warning("--run-dir %s: the dead driver was recovering servers %s: redone", self.directory, redo)
        return dataclasses.replace(record, spares=spares)

    def abandon(self) -> None:
        """Ends every role of the dead driver's run (the head stays for this driver's fresh cluster)."""
        record, self.record = self.record, None
        if record is not None:
            _end_actors([*record.servers, *record.spares, *record.workers, *(h for _, h in self.journal)])
        self._call(self.keeper.put, None)

    # ---- this driver's run --------------------------------------------------------------------------------
    def keep(self, run: Any, shape: Dict[str, Any]) -> None:
        """Writes ``run``'s (a PSTrainer's) record, the worker counting from this boundary."""
        self._shape = shape
        record = run.roles.record(run.agreement.base(), shape)
        self._call(self.keeper.put, record.kept())
        self._version = run.scheduler.version
        self._roles = self._identities(run)
        self.heartbeat.after_step(run)
        run.recovery.on_recovery = self.heartbeat.recovery
        run.recovery.on_replacement = self._journal_replacement

    def _journal_replacement(self, index: int, handle: Any) -> None:
        """A recovery started ``handle`` for server ``index``: journaled before any role is pointed at it."""
        self._call(self.keeper.add_replacement, index, KeptHandle(handle))
        self._journaled = True

    @staticmethod
    def _identities(run: Any) -> tuple:
        return tuple(id(h) for h in [*run.scheduler.servers, *run.scheduler.spares, *run.workers])

    def due(self, step: int) -> bool:
        return False

    def after_step(self, run: Any) -> None:
        """The heartbeat's step, and the record again when the roles changed (a recovery, a restarted worker)."""
        self.heartbeat.after_step(run)
        if run.scheduler.version != self._version or self._identities(run) != self._roles:
            self.keep(run, self._shape)
        if self._journaled and not run.strategy.rebuilding:  # the record names the replacements, whole now
            self._call(self.keeper.rebuilt)
            self._journaled = False

    def end(self) -> None:
        """The run is over (however it ended, this driver alive): the heartbeat stops and the run's head ends,
        with every role; the heartbeat file goes (a rerun starts fresh)."""
        import ray

        self.heartbeat.stop()
        try:
            ray.shutdown()
        finally:
            stop_head(self.directory, self.head)
            (self.directory / HEARTBEAT_FILE).unlink(missing_ok=True)

    def _keeper(self) -> Any:
        import ray

        keeper = ray.remote(num_cpus=0, max_restarts=0)(RunKeeper)
        return keeper.options(name=KEEPER_NAME, lifetime="detached", get_if_exists=True).remote()

    @staticmethod
    def _call(method: Any, *args: Any) -> Any:
        import ray

        return ray.get(method.remote(*args), timeout=60.0)

    def pids(self) -> List[int]:
        """Processes of the run's head (its session), for tests and leak checks."""
        from xdl_ec.ps.run_head import session_members

        return session_members(int(self.head["session"]))


def _end_actors(handles: List[Any]) -> None:
    """``ray.kill`` of each role's actor (one already dead, or lost before this driver read the record: nothing)."""
    import ray

    for handle in handles:
        if handle.actor is None:  # a LostHandle: nothing runs
            continue
        try:
            ray.kill(handle.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already dead
            pass


def _answers(handle: Any, timeout: float = PROBE_SECONDS) -> bool:
    try:
        Remote(handle, RoleAPI).ping().result(timeout)
        return True
    except (RoleLost, CallTimeout):
        return False


def _other_live_process(pid: int) -> bool:
    return 0 < pid != os.getpid() and process_alive(pid)
