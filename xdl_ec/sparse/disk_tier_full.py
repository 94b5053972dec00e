"""DiskTierFull: the run stopped because the disk tier could not write to its spill dir (a full disk, a file size
limit): the driver's form of the core's failed write, which leaves the shard unchanged.

The core names the dir as ``spill dir '<dir>': ...``; :func:`spill_dir_of` finds it in an error from a table call.
A run in this process gives up its :class:`~xdl_ec.sparse.disk_reserve.DiskReserve` at the first failed write,
finishes the step on that room and stops at the boundary after it (``at_boundary``), where the job makes a
resumable save; when even that room does not suffice, and on servers (whose calls are not run again: a server's
part of a step may fail while the others' are applied), the run stops with no save of its state, and resumes from
its last save."""

from __future__ import annotations

import re
from typing import Optional

# the core's SpillTier::Fail (a server's call may carry it inside its own message)
_SPILL_ERROR = re.compile(
    r"spill dir '(?P<dir>[^']*)': (?:write|read|truncate|allocation|mapping) of slot \d+ failed: "
)


def spill_dir_of(err: BaseException) -> Optional[str]:
    """The spill dir a failed disk-tier write of the core names, or None when ``err`` is not one."""
    match = _SPILL_ERROR.search(str(err))
    return match.group("dir") if isinstance(err, RuntimeError) and match else None


class DiskTierFull(RuntimeError):
    """The disk tier under ``spill_dir`` failed to write (``cause``: the core's message) after step ``step``;
    ``at_boundary``: the run stopped at the boundary of step ``step`` with every step up to it applied (a save
    there is exact; else the state may be part of a step); ``saved``: the save made there (None: none)."""

    def __init__(self, spill_dir: str, cause: str, step: int, at_boundary: bool, saved: Optional[str] = None) -> None:
        self.spill_dir, self.cause, self.step, self.at_boundary, self.saved = spill_dir, cause, step, at_boundary, saved
        super().__init__(self._message())

    def _message(self) -> str:
        where = (
            f"the run stopped at the boundary of step {self.step}, every step up to it applied"
            if self.at_boundary
            else f"the run stopped after step {self.step} in a state no save may take (part of a step may be applied)"
        )
        if self.saved is not None:
            resume = (
                f"; saved at step {self.step} in {self.saved}: free space there (or pass another --spill-dir), then "
                "run the same command again with --resume and its save dir"
            )
        elif self.at_boundary:
            resume = "; no --save-dir was given, so nothing was saved: free space there and train again"
        else:
            resume = (
                "; free space there (or pass another --spill-dir or a larger --memory-budget), then run the same "
                "command again with --resume and its save dir: it continues from the last save"
            )
        return f"spill dir {self.spill_dir!r} is full or refused a write ({self.cause}); {where}{resume}"

    def with_save(self, saved: Optional[str]) -> "DiskTierFull":
        """This stop, saying where its save went."""
        return DiskTierFull(self.spill_dir, self.cause, self.step, self.at_boundary, saved)
