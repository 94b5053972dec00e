"""An endless input: the Criteo TSV rows of the files in a directory, in file-name order, as the files appear
(hourly partitions), with a position (file, offset) a resumed reader starts at without reading anything before it.

A file counts once it is in the directory under its final name: a producer writes ``.name`` or ``name.tmp`` and
renames it in (atomic on one file system); names starting with ``.`` or ending in ``.tmp`` are never read, so a
partial file is never read. Files are plain or gzipped (by their magic bytes). Each file is read once, in name
order: a file that appears under a name sorting before one already read is a :class:`StreamError` (it would be
lost otherwise; name files so they sort in arrival order, e.g. by hour). With nothing new to read the stream waits,
polling the directory every ``poll`` seconds, and ends when no new file came for ``idle_exit`` seconds of waiting
(None: never). A directory that vanishes, or a file removed before it was read, is a :class:`StreamError`.

Positions: ``{"file": name, "offset": bytes, "line": lines, "batch": batches}``: everything before byte ``offset``
(``line`` lines) of ``file`` and every file whose name sorts before it is consumed; ``batch`` counts the batches cut
so far. Resuming a plain file seeks to the offset; a gzipped one decompresses up to it (reading nothing before).
A job resumed from a save, or rolled back by ``--ft ckpt``, continues at such a position; a worker restarted in a new
process (``--fail-worker-at``) skips to its batch count from the first file, so keep files until a run has saved
past them.
"""

from __future__ import annotations

import fnmatch
import os
import time
from pathlib import Path
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Set, Tuple

import numpy as np

from xdl_ec.data.criteo import ON_BAD_LINE, BadLineError, Rows, _diagnose, open_bytes, parse_lines_fast
from xdl_ec.data.schema import EMPTY_VALUE, NUM_DENSE, NUM_SPARSE, Batch, categorical_keys, dense_transform
from xdl_ec.settings import checks

DEFAULT_POLL_SECONDS = 0.5
Position = Dict[str, Any]


class StreamError(RuntimeError):
    """The stream cannot go on without losing or repeating rows (a vanished directory or file, a late file)."""


def ignored(name: str) -> bool:
    """Names a producer writes under before renaming the file in: never read."""
    return name.startswith(".") or name.endswith(".tmp")


class FileStream:
    """Lines of the files of ``directory`` matching ``pattern`` (see the module docstring); iterate for the lines
    (str, newline stripped), or :meth:`batches` for batches with the position after each."""

    def __init__(
        self,
        directory: str | os.PathLike,
        pattern: str = "*",
        *,
        idle_exit: Optional[float] = None,
        poll: float = DEFAULT_POLL_SECONDS,
        start: Optional[Position] = None,
    ) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise StreamError(f"stream directory {self.directory}: no such directory")
        self.pattern = checks.non_empty_str("pattern", pattern)
        self.idle_exit = None if idle_exit is None else checks.number("idle_exit", idle_exit, 0.0)
        self.poll = checks.positive_number("poll", poll)
        start = dict(start or {})
        self.file: Optional[str] = start.get("file")  # the file being read (or the last one read)
        self.offset = int(start.get("offset", 0))
        self.line = int(start.get("line", 0))
        self.batch = int(start.get("batch", 0))
        if self.file is not None and not (self.directory / self.file).is_file():
            raise StreamError(
                f"stream directory {self.directory}: the position's file {self.file!r} is gone; a "
                f"resumed stream continues inside it (keep files until the runs reading them end)"
            )
        self._resume_inside = self.file is not None
        self._floor = self.file  # a resumed stream read every file before this one (in an earlier run)
        self._read: Set[str] = set()
        self.files_read = 0
        self.bad_lines = 0  # skipped by batches(on_bad_line="skip")

    def position(self) -> Position:
        """Where the rows read so far end (see the module docstring)."""
        return {"file": self.file, "offset": self.offset, "line": self.line, "batch": self.batch}

    # ---- files ------------------------------------------------------------------------------------------------
    def _names(self) -> List[str]:
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            raise StreamError(
                f"stream directory {self.directory} vanished (read up to {self.file!r}, line "
                f"{self.line}): restore it and resume from the newest save"
            ) from None
        return sorted(
            e.name for e in entries if not ignored(e.name) and fnmatch.fnmatch(e.name, self.pattern) and e.is_file()
        )

    def _next_name(self) -> Optional[str]:
        names = self._names()
        if self.file is not None:
            late = [
                n for n in names if n < self.file and n not in self._read and (self._floor is None or n > self._floor)
            ]
            if late:
                raise StreamError(
                    f"stream directory {self.directory}: file {late[0]!r} appeared after "
                    f"{self.file!r} was read; files are read once in name order, so name them to sort "
                    f"in arrival order (e.g. by hour)"
                )
        later = [n for n in names if self.file is None or n > self.file]
        return later[0] if later else None

    def _wait_for_file(self) -> Optional[str]:
        waited_from = time.monotonic()
        while True:
            name = self._next_name()
            if name is not None:
                return name
            if self.idle_exit is not None and time.monotonic() - waited_from >= self.idle_exit:
                return None
            time.sleep(self.poll)

    def _open(self, name: str) -> BinaryIO:
        path = self.directory / name
        try:
            return open_bytes(path)
        except FileNotFoundError:
            raise StreamError(
                f"{path}: removed before it was read; files renamed into the stream directory must stay until read"
            ) from None

    def _lines_of(self, name: str, offset: int) -> Iterator[bytes]:
        path = self.directory / name
        try:
            with self._open(name) as f:
                if offset:
                    f.seek(offset)
                yield from f
        except (OSError, EOFError) as err:  # a truncated or corrupt gzip member
            raise OSError(f"{path}: cannot read the file: {err}") from err

    def __iter__(self) -> Iterator[str]:
        return (text for _, _, text in self._located())

    def _located(self) -> Iterator[Tuple[str, int, str]]:
        """(file, line number, text) of every line from the position on; the position moves past each line as it
        is handed out."""
        while True:
            if self._resume_inside:
                self._resume_inside = False
                name: Optional[str] = self.file
            else:
                name = self._wait_for_file()
                if name is None:
                    return
                self.file, self.offset, self.line = name, 0, 0
            assert name is not None
            self._read.add(name)
            for raw in self._lines_of(name, self.offset):
                self.offset += len(raw)
                self.line += 1
                yield name, self.line, raw.decode("utf-8", errors="replace").rstrip("\r\n")
            self.files_read += 1

    # ---- batches ----------------------------------------------------------------------------------------------
    def batches(self, batch_size: int, on_bad_line: str = "error") -> Iterator[Tuple[Batch, Position]]:
        """Batches of ``batch_size`` good rows in stream order (a batch waits for its rows; the last one, when the
        stream ends, may be short), each with the position after its last line. ``on_bad_line``: "error" raises
        :class:`~xdl_ec.data.criteo.BadLineError` naming file:line, "skip" drops the line (counted in
        :attr:`bad_lines`)."""
        batch_size = checks.positive_int("batch_size", batch_size)
        checks.one_of("on_bad_line", on_bad_line, ON_BAD_LINE)
        lines = self._located()
        while True:
            parts: List[Rows] = []
            need = batch_size
            while need:
                chunk = [line for _, line in zip(range(need), lines, strict=False)]
                if not chunk:
                    break
                rows = parse_lines_fast([text for _, _, text in chunk]) or self._checked(chunk, on_bad_line)
                parts.append(rows)
                need -= len(rows.label)
            if need == batch_size:
                return
            merged = Rows(*(np.concatenate(arrays) for arrays in zip(*parts, strict=True)))
            self.batch += 1
            yield (
                Batch(
                    dense=dense_transform(merged.raw_dense), sparse=categorical_keys(merged.values), label=merged.label
                ),
                self.position(),
            )

    def _checked(self, chunk: List[Tuple[str, int, str]], on_bad_line: str) -> Rows:
        labels: List[float] = []
        dense: List[List[int]] = []
        cats: List[List[int]] = []
        for name, line_no, text in chunk:
            fields = text.split("\t")
            reason = _diagnose(fields)
            if reason:
                if on_bad_line == "error":
                    raise BadLineError(str(self.directory / name), line_no, reason)
                self.bad_lines += 1
                continue
            labels.append(1.0 if fields[0] == "1" else 0.0)
            dense.append([int(x) if x else 0 for x in fields[1 : 1 + NUM_DENSE]])
            cats.append([int(x, 16) if x else EMPTY_VALUE for x in fields[1 + NUM_DENSE :]])
        return Rows(
            np.array(labels, dtype=np.float32),
            np.array(dense, dtype=np.float64).reshape(-1, NUM_DENSE),
            np.array(cats, dtype=np.uint64).reshape(-1, NUM_SPARSE),
        )


def stream(
    directory: str | os.PathLike,
    pattern: str = "*",
    *,
    idle_exit: Optional[float] = None,
    poll: float = DEFAULT_POLL_SECONDS,
    start: Optional[Position] = None,
) -> FileStream:
    """The Criteo TSV rows of ``directory``'s files matching ``pattern``, in name order as they appear (see
    :mod:`xdl_ec.data.file_stream`); ``start``: a position to continue after."""
    return FileStream(directory, pattern, idle_exit=idle_exit, poll=poll, start=start)
