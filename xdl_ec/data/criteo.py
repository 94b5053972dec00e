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
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Literal

import numpy as np

from .schema import (EMPTY_VALUE, NUM_DENSE, NUM_FIELDS, NUM_SPARSE, Batch, categorical_keys, dense_transform,
                     tf_signature)

if TYPE_CHECKING:  # TensorFlow is only imported by dataset()
    import tensorflow as tf

Split = Literal["train", "eval", "all"]
ON_BAD_LINE = ("error", "skip")

# One regular expression validates a whole well-formed line; lines that fail it are diagnosed field by field.
_INT = r"(?:[+-]?[0-9]+)?"
_HEX = r"[0-9a-fA-F]{0,8}"
_LINE = re.compile(r"[01]" + r"\t" + r"\t".join([_INT] * NUM_DENSE) + r"\t" + r"\t".join([_HEX] * NUM_SPARSE))
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
    """The reason a line that failed the fast check is bad, or '' when it is fine after all."""
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


def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace", newline="\n")
    return open(path, "r", encoding="utf-8", errors="replace", newline="\n")


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
            with _open_text(self.path) as f:
                self._num_lines = sum(1 for _ in f)
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
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size: must be a positive integer, got {batch_size!r}")
        first, end = self._line_range(split)
        return self._stream(int(batch_size), first, end, drop_remainder)

    def _stream(self, batch_size: int, first: int, end: int, drop_remainder: bool) -> Iterator[Batch]:
        labels: list[float] = []
        dense: list[list[int]] = []
        cats: list[list[int]] = []
        path = str(self.path)
        with _open_text(self.path) as f:
            for line_no, line in enumerate(f, start=1):
                if line_no < first:
                    continue
                if line_no >= end:
                    break
                line = line.rstrip("\r\n")
                if _LINE.fullmatch(line) is None:
                    fields = line.split("\t")
                    reason = _diagnose(fields)
                    if reason:
                        if self.on_bad_line == "error":
                            raise BadLineError(path, line_no, reason)
                        if line_no not in self._bad:
                            self._bad.add(line_no)
                            if len(self.bad_line_examples) < self.MAX_EXAMPLES:
                                self.bad_line_examples.append((line_no, reason))
                        continue
                else:
                    fields = line.split("\t")
                labels.append(1.0 if fields[0] == "1" else 0.0)
                dense.append([int(x) if x else 0 for x in fields[1 : 1 + NUM_DENSE]])
                cats.append([int(x, 16) if x else EMPTY_VALUE for x in fields[1 + NUM_DENSE :]])
                if len(labels) == batch_size:
                    yield _to_batch(labels, dense, cats)
                    labels, dense, cats = [], [], []
        if labels and not drop_remainder:
            yield _to_batch(labels, dense, cats)

    def dataset(self, batch_size: int, split: Split = "train", *, drop_remainder: bool = False) -> "tf.data.Dataset":
        """The same batches as a ``tf.data.Dataset`` of (dense, sparse, label), streamed from the file."""
        import tensorflow as tf

        self._line_range(split)  # validate split before TF builds anything
        return tf.data.Dataset.from_generator(
            lambda: (tuple(b) for b in self.batches(batch_size, split, drop_remainder=drop_remainder)),
            output_signature=tf_signature(),
        )


def _to_batch(labels: list[float], dense: list[list[int]], cats: list[list[int]]) -> Batch:
    return Batch(
        dense=dense_transform(np.array(dense, dtype=np.float64).reshape(-1, NUM_DENSE)),
        sparse=categorical_keys(np.array(cats, dtype=np.uint64).reshape(-1, NUM_SPARSE)),
        label=np.array(labels, dtype=np.float32),
    )

