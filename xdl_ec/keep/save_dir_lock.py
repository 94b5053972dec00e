"""SaveDirLock: a live run's hold on its save directory, so a second run given the same ``--save-dir`` cannot
rotate away (``--keep``) the saves the first one writes or resumes from.

The hold is an exclusive ``flock`` on ``DIR/.lock``, kept for the run's life: the kernel drops it when the holder's
process ends however it ends, so a dead run's lock is stale by construction and the next run takes it over (a clean
end removes the file). The file says who holds it (pid, host, start, command) so the refusal can name the live run."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional, Union

LOCK_FILE = ".lock"


class SaveDirBusy(ValueError):
    """Another live run holds the save directory (a ValueError: the --save-dir given is in use)."""


class SaveDirLock:
    """Holds ``directory`` (created if missing) for this process until :meth:`release`; :class:`SaveDirBusy`
    naming the live holder when another run holds it."""

    def __init__(self, directory: Union[str, os.PathLike]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / LOCK_FILE
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe(_read_holder(fd))
                os.close(fd)
                raise SaveDirBusy(
                    f"save dir {self.directory} is held by a live run ({holder}); wait for it to end, or give this "
                    "run another --save-dir (two runs saving into one directory would delete each other's saves)"
                ) from None
            if _same_file(fd, self.path):
                break
            os.close(fd)  # a run that ended unlinked the file we opened: lock the one that is there now
        self._fd: Optional[int] = fd
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": sys.argv}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Gives the directory up (idempotent), leaving no file: unlinked while still locked, so a run that
        opened it meanwhile sees it is gone and locks a fresh one."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass  # the directory went away with the run's files
            os.close(fd)  # closing the descriptor drops the flock


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _read_holder(fd: int) -> Dict[str, Any]:
    try:
        text = os.pread(fd, 65536, 0).decode()
        record = json.loads(text) if text else {}
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        return {}  # written by a run still starting, or damaged: the refusal names no details


def _describe(holder: Dict[str, Any]) -> str:
    if not holder:
        return "its details not written yet"
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    command = " ".join(str(a) for a in holder.get("command") or [])
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started {when}: {command}"
