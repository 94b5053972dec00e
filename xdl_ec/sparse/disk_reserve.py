"""DiskReserve: room a budgeted process holds in its spill dir so that a disk that fills during training still lets
the run stop cleanly.

A full disk shows first as a failed write-back of the disk tier (the core throws with the shard unchanged). To stop
at a step boundary with nothing acknowledged lost, the run must still finish the step (the failed call again) and
write a resumable save, whose scan of a tiered table writes frames back too. So the process takes this room up
front, in an unlinked file of its own, and gives it up at the first failed write: the bytes the tier then needs
come from it. Its size is the process's memory budget plus a MiB: the tier's frames, all of which a scan may write
back, live within the budget."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from typing import Optional

RESERVE_SLACK = 1 << 20  # beside the budget: the key copies and block maps a save writes nothing of, and rounding


class DiskReserve:
    """``nbytes`` held in ``spill_dir`` until :meth:`release`; ValueError naming the dir when it cannot hold them
    (before training: a full dir is found here)."""

    def __init__(self, spill_dir: str, nbytes: int) -> None:
        self.spill_dir = spill_dir
        self.nbytes = int(nbytes)
        fd, path = tempfile.mkstemp(prefix="xdl-ec-reserve-", dir=spill_dir)
        os.unlink(path)  # goes with the process, however it ends
        try:
            os.posix_fallocate(fd, 0, self.nbytes)
        except OSError as err:
            os.close(fd)
            free = shutil.disk_usage(spill_dir).free
            raise ValueError(
                f"spill dir {spill_dir!r} is full: {free} bytes free, less than the {self.nbytes} bytes a budgeted "
                f"run keeps there (its memory budget plus 1 MiB) to stop cleanly if the disk fills ({err.strerror}); "
                "free space there, or pass another spill dir"
            ) from None
        self._fd: Optional[int] = fd
        self._lock = threading.Lock()  # a server's threads may meet a full disk together

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> bool:
        """Gives the room back to the filesystem; False when it was given already."""
        with self._lock:
            if self._fd is None:
                return False
            os.close(self._fd)
            self._fd = None
            return True

    def close(self) -> None:
        self.release()
