"""RunHeartbeat: a reattachable run's driver says it is alive, how far it got and its grace, in
``DIR/heartbeat.json`` (docs/design/reattach.md).

Rewritten at every step boundary (a :class:`~xdl_ec.ps.step_hook.StepHook`: the completed step and samples) and
every second by a thread (a long step, a recovery). A ``pwrite`` over an open descriptor, no fsync: the page cache
survives a SIGKILL of the writer, and the file's mtime is the heartbeat the run head's supervisor
(:mod:`xdl_ec.ps.run_head`) watches. After the driver died, :func:`last_heartbeat` says how far it got, so a run
resumed from a backstop can say how many steps it re-trains.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

from xdl_ec.ps.run_head import HEARTBEAT_FILE

RECORD_BYTES = 512  # a fixed size: a rewrite covers the previous record whole
BEAT_SECONDS = 1.0


def last_heartbeat(directory: Path) -> Optional[Dict[str, Any]]:
    """The last record a driver wrote in ``directory`` ({"pid", "step", "samples", "grace", "recovering",
    "rebuilding", "time"}), None when there is none."""
    try:
        text = (directory / HEARTBEAT_FILE).read_bytes().rstrip(b"\0 \n").decode()
        record = json.loads(text) if text else None
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


class RunHeartbeat:
    """The heartbeat of this driver into ``directory`` with the run's ``grace`` (seconds), from :meth:`start` to
    :meth:`stop`; :meth:`after_step` records each completed step."""

    def __init__(self, directory: Path, grace: float) -> None:
        self.directory, self.grace = Path(directory), float(grace)
        self.step, self.samples = 0, 0
        # the roles are not as a step boundary leaves them: a recovery runs, or a rebuild (replacements in restore
        # mode); a driver that dies then leaves a run that is not reattached
        self.recovering = False
        self.rebuilding = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._fd: Optional[int] = None
        self._thread: Optional[threading.Thread] = None

    def start(self, step: int = 0, samples: int = 0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.directory / HEARTBEAT_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        self.step, self.samples = step, samples
        self.beat()
        self._thread = threading.Thread(target=self._run, name="xdl-ec-heartbeat", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        """Writes the record now (the mtime moves: the supervisor sees the driver alive)."""
        record = {"pid": os.getpid(), "step": self.step, "samples": self.samples, "grace": self.grace}
        record.update(recovering=self.recovering, rebuilding=self.rebuilding)
        record["time"] = time.time()
        data = json.dumps(record).encode().ljust(RECORD_BYTES, b" ")
        with self._lock:
            if self._fd is not None:
                os.pwrite(self._fd, data, 0)

    def _run(self) -> None:
        while not self._stop.wait(BEAT_SECONDS):
            self.beat()

    # ---- StepHook ---------------------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        return False  # never holds an async step: any boundary will do

    def after_step(self, run: Any) -> None:
        self.step, self.samples = int(run.step), int(run.samples)
        self.rebuilding = bool(run.strategy.rebuilding)
        self.beat()

    def recovery(self, running: bool) -> None:
        """A recovery begins (True) or ends: written at once, before the recovery changes any role."""
        self.recovering = running
        if running:
            self.rebuilding = True  # until a boundary finds the rebuild over
        self.beat()

    def stop(self) -> None:
        """Stops beating (the file stays: a clean end removes the run head itself)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
