"""Streaming reader of raw Criteo TSV files (plain or gzip) into numpy batches and ``tf.data``.

Format: 40 tab-separated fields per line, ``label I1..I13 C1..C26``; empty fields are missing values (a line
can end in tabs). Labels must be ``0`` or ``1``; integers are optionally signed decimal; categoricals are 1 to 8
hex digits. See :mod:`xdl_ec.data.schema` for the feature transforms and keys.

The split is by time, as Criteo is evaluated: the last ``floor(lines * eval_fraction)`` lines of the file (bad
ones included in the count) are the eval split, the lines before them the train split. Counting the lines is one
streaming pass; the file is never held in memory whole.
"""

from __future__ import annotations

import gzip
import io
import itertools
import math
import os
import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Iterator, Literal, NamedTuple, Optional, cast

import numpy as np

from xdl_ec import _core
from xdl_ec.data.schema import (
    EMPTY_VALUE,
    NUM_DENSE,
    NUM_FIELDS,
    NUM_SPARSE,
    Batch,
    categorical_keys,
    dense_transform,
    tf_signature,
)
from xdl_ec.settings import checks

if TYPE_CHECKING:  # TensorFlow is only imported by dataset()
    import tensorflow as tf

Split = Literal["train", "eval", "all"]
ON_BAD_LINE = ("error", "skip")
CHUNK_LINES = 2048  # lines parsed together by the vectorised path
MAX_INT_DIGITS = 15  # longer integers go the line-by-line way (float64 is exact up to 15 digits)

# Field checks of the line-by-line path, which diagnoses lines the vectorised path declined.
_INT_FIELD = re.compile(r"[+-]?[0-9]+")
_HEX_FIELD = re.compile(r"[0-9a-fA-F]{1,8}")


class BadLineError(ValueError):
    """A malformed line in a Criteo file; the message names file:line and the reason."""

    def __init__(self, path: str, line_no: int, reason: str) -> None:
        super().__init__(f"{path}:{line_no}: {reason} (use on_bad_line='skip' / --on-bad-line=skip to skip such lines)")
        self.path = path
        self.line_no = line_no
        self.reason = reason


def _diagnose(fields: list[str]) -> str:
    """The reason a line is bad, or '' when it is well formed."""
    if len(fields) != NUM_FIELDS:
        return f"wrong field count: expected {NUM_FIELDS} tab-separated fields, got {len(fields)}"
    if fields[0] not in ("0", "1"):
        return f"bad label {fields[0]!r}: expected 0 or 1"
    for i in range(NUM_DENSE):
        f = fields[1 + i]
        if f and not _INT_FIELD.fullmatch(f):
            return f"non-numeric integer feature I{i + 1}: {f!r}"
    for i in range(NUM_SPARSE):
        f = fields[1 + NUM_DENSE + i]
        if f and not _HEX_FIELD.fullmatch(f):
            return f"bad hex in categorical feature C{i + 1}: {f!r} (expected 1 to 8 hex digits)"
    return ""


def open_bytes(path: Path) -> BinaryIO:
    """A plain or gzip file (told by its magic bytes) opened for reading its bytes."""
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    return cast(BinaryIO, gzip.open(path, "rb")) if gzipped else open(path, "rb")


def _read_lines(path: Path) -> Iterator[str]:
    """The lines of a plain or gzip file (by its magic bytes); a corrupt or truncated file raises OSError naming it."""
    try:
        with io.TextIOWrapper(open_bytes(path), encoding="utf-8", errors="replace", newline="\n") as f:
            yield from f
    except (OSError, EOFError, zlib.error) as err:
        raise OSError(f"{path}: cannot read the file: {err}") from err


def _count_lines(path: Path) -> int:
    """How many lines :func:`_read_lines` yields, counted on the bytes (a last line without its newline counts)."""
    try:
        with open_bytes(path) as f:
            lines, last = 0, b"\n"
            while block := f.read(1 << 20):
                lines += block.count(b"\n")
                last = block[-1:]
            return lines + (last != b"\n")
    except (OSError, EOFError, zlib.error) as err:
        raise OSError(f"{path}: cannot read the file: {err}") from err


class CriteoReader:
    """Reads a raw Criteo TSV file (plain or .gz) as a stream of :class:`Batch` es.

    ``on_bad_line="error"`` raises :class:`BadLineError` (file:line and reason) at the first malformed line;
    ``"skip"`` drops such lines and counts them in :attr:`bad_lines` (each bad line counted once, however many
    passes read it; :attr:`bad_line_examples` keeps the first few reasons).
    """

    MAX_EXAMPLES = 10

    def __init__(self, path: str | os.PathLike, *, eval_fraction: float = 0.1, on_bad_line: str = "error") -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path: expected a str or path, got {type(path).__name__}")
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"path: no such file: {self.path}")
        if isinstance(eval_fraction, bool) or not isinstance(eval_fraction, (int, float)):
            raise TypeError(f"eval_fraction: expected a float, got {type(eval_fraction).__name__}")
        if not 0.0 <= eval_fraction < 1.0:
            raise ValueError(f"eval_fraction: must be in [0, 1), got {eval_fraction}")
        if on_bad_line not in ON_BAD_LINE:
            raise ValueError(f"on_bad_line: must be one of {ON_BAD_LINE}, got {on_bad_line!r}")
        self.eval_fraction = float(eval_fraction)
        self.on_bad_line = on_bad_line
        self._num_lines: int | None = None
        self._bad: set[int] = set()
        self.bad_line_examples: list[tuple[int, str]] = []

    # ---- sizes and split ------------------------------------------------------------------------------
    @property
    def num_lines(self) -> int:
        """Lines in the file (one streaming pass the first time)."""
        if self._num_lines is None:
            self._num_lines = _count_lines(self.path)
        return self._num_lines

    @property
    def num_eval_lines(self) -> int:
        return int(math.floor(self.num_lines * self.eval_fraction))

    @property
    def num_train_lines(self) -> int:
        return self.num_lines - self.num_eval_lines

    @property
    def bad_lines(self) -> int:
        """Distinct bad lines met so far (skip mode)."""
        return len(self._bad)

    def _line_range(self, split: Split) -> tuple[int, int]:
        """1-based inclusive-exclusive line numbers of a split."""
        if split == "all":
            return 1, self.num_lines + 1
        if split == "train":
            return 1, self.num_train_lines + 1
        if split == "eval":
            return self.num_train_lines + 1, self.num_lines + 1
        raise ValueError(f"split: must be 'train', 'eval' or 'all', got {split!r}")

    # ---- streaming ------------------------------------------------------------------------------------
    def batches(self, batch_size: int, split: Split = "train", *, drop_remainder: bool = False) -> Iterator[Batch]:
        """Yields batches of ``batch_size`` rows of a split in file order (the last one may be short)."""
        batch_size = checks.integer("batch_size", batch_size, 1)
        first, end = self._line_range(split)
        return self._stream(int(batch_size), first, end, drop_remainder)

    def _stream(self, batch_size: int, first: int, end: int, drop_remainder: bool) -> Iterator[Batch]:
        rows = _RowBuffer()
        lines = itertools.islice(_read_lines(self.path), first - 1, end - 1)
        line_no = first
        while chunk := list(itertools.islice(lines, CHUNK_LINES)):
            parsed = parse_lines_fast(chunk)
            rows.append(parsed if parsed is not None else self._parse_lines_checked(chunk, line_no))
            line_no += len(chunk)
            while len(rows) >= batch_size:
                yield rows.take(batch_size)
        if len(rows) and not drop_remainder:
            yield rows.take(len(rows))

    def _parse_lines_checked(self, lines: list[str], first_line_no: int) -> Rows:
        """Line by line, with a reason for every bad line: raises (error mode) or drops and counts (skip mode)."""
        labels: list[float] = []
        dense: list[list[int]] = []
        cats: list[list[int]] = []
        for line_no, line in enumerate(lines, start=first_line_no):
            fields = line.rstrip("\r\n").split("\t")
            reason = _diagnose(fields)
            if reason:
                if self.on_bad_line == "error":
                    raise BadLineError(str(self.path), line_no, reason)
                if line_no not in self._bad:
                    self._bad.add(line_no)
                    if len(self.bad_line_examples) < self.MAX_EXAMPLES:
                        self.bad_line_examples.append((line_no, reason))
                continue
            labels.append(1.0 if fields[0] == "1" else 0.0)
            dense.append([int(x) if x else 0 for x in fields[1 : 1 + NUM_DENSE]])
            cats.append([int(x, 16) if x else EMPTY_VALUE for x in fields[1 + NUM_DENSE :]])
        return Rows(
            np.array(labels, dtype=np.float32),
            np.array(dense, dtype=np.float64).reshape(-1, NUM_DENSE),
            np.array(cats, dtype=np.uint64).reshape(-1, NUM_SPARSE),
        )

    def dataset(self, batch_size: int, split: Split = "train", *, drop_remainder: bool = False) -> "tf.data.Dataset":
        """The same batches as a ``tf.data.Dataset`` of (dense, sparse, label), streamed from the file."""
        import tensorflow as tf

        self._line_range(split)  # validate split before TF builds anything
        return tf.data.Dataset.from_generator(
            lambda: (tuple(b) for b in self.batches(batch_size, split, drop_remainder=drop_remainder)),
            output_signature=tf_signature(),
        )


class Rows(NamedTuple):
    """Parsed rows before the transforms: labels float32 [n], raw integers float64 [n, 13], categorical values
    uint64 [n, 26] (EMPTY_VALUE for empty fields)."""

    label: np.ndarray
    raw_dense: np.ndarray
    values: np.ndarray


class _RowBuffer:
    """Parsed rows waiting to be cut into batches of a fixed size."""

    def __init__(self) -> None:
        self._parts: list[Rows] = []
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def append(self, rows: Rows) -> None:
        if len(rows.label):
            self._parts.append(rows)
            self._rows += len(rows.label)

    def take(self, n: int) -> Batch:
        merged = Rows(*(np.concatenate(arrays) for arrays in zip(*self._parts)))
        rest = Rows(*(a[n:] for a in merged))
        self._parts, self._rows = ([rest] if len(rest.label) else []), len(rest.label)
        return Batch(
            dense=dense_transform(merged.raw_dense[:n]),
            sparse=categorical_keys(merged.values[:n]),
            label=merged.label[:n],
        )


# The native parse's columns (xdl_ec._core.parse_delimited_fields): the label, the integers (optionally signed,
# up to MAX_INT_DIGITS digits: exact as float64, as the line path's int()), the categoricals (1 to 8 hex digits).
_COLUMNS = [("bit", 1, 0)] + [("decimal", MAX_INT_DIGITS, 0)] * NUM_DENSE + [("hex", 8, EMPTY_VALUE)] * NUM_SPARSE


def parse_lines_fast(lines: list[str]) -> Optional[Rows]:
    """Native parse of well-formed lines (with or without their newlines); None when any line is not (the caller
    then goes line by line, which also finds the reason). Accepts exactly what :func:`_diagnose` accepts (but
    integers past MAX_INT_DIGITS digits) and gives the same values."""
    # a file's lines end in newlines (but perhaps the last), a stream's come stripped of them
    joined = "".join(lines) if lines and lines[0].endswith("\n") else "\n".join(lines)
    try:
        buffer = joined.encode("ascii")
    except UnicodeEncodeError:
        return None
    values = _core.parse_delimited_fields(buffer, len(lines), _COLUMNS)
    if values is None:
        return None
    return Rows(
        values[:, 0].astype(np.float32),
        values[:, 1 : 1 + NUM_DENSE].astype(np.float64),
        values[:, 1 + NUM_DENSE :].view(np.uint64),
    )
