"""Training data for a trainer: a train split streamed once per epoch and a held-out eval split, from a Criteo
file or from the synthetic generator, behind one interface."""

from __future__ import annotations

import math
import os
from typing import Iterator

from xdl_ec.data.criteo import CriteoReader
from xdl_ec.data.schema import Batch
from xdl_ec.data.synthetic import SyntheticCriteo
from xdl_ec.settings import checks


class TrainingData:
    """Train and eval batches of one data set. Build with :meth:`from_file` or :meth:`synthetic`."""

    def __init__(self, description: dict, num_train: int, num_eval: int) -> None:
        self.description = description
        self.num_train = num_train  # rows (file: lines) per train epoch
        self.num_eval = num_eval

    def train_batches(self, batch_size: int) -> Iterator[Batch]:  # pragma: no cover - abstract
        raise NotImplementedError

    def eval_batches(self, batch_size: int) -> Iterator[Batch]:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def bad_lines(self) -> int:
        return 0

    @staticmethod
    def from_file(path: str | os.PathLike, *, eval_fraction: float = 0.1, on_bad_line: str = "error") -> "TrainingData":
        """A raw Criteo TSV file split by time: the last ``eval_fraction`` of its lines held out."""
        return _FileData(CriteoReader(path, eval_fraction=eval_fraction, on_bad_line=on_bad_line))

    @staticmethod
    def synthetic(
        rows: int,
        *,
        eval_fraction: float = 0.1,
        seed: int = 0,
        max_cardinality: int | None = None,
        zipf_exponent: float = 1.1,
        tables: str = "kaggle",
        table_scale: float = 1.0,
    ) -> "TrainingData":
        """``rows`` synthetic rows, of which the last ``floor(rows * eval_fraction)`` are held out; ``tables``,
        ``table_scale``: the columns' cardinalities (:class:`SyntheticCriteo`)."""
        rows = checks.integer("rows", rows, 1)
        if not 0.0 <= eval_fraction < 1.0:
            raise ValueError(f"eval_fraction: must be in [0, 1), got {eval_fraction}")
        gen = SyntheticCriteo(
            seed,
            max_cardinality=max_cardinality,
            zipf_exponent=zipf_exponent,
            tables=tables,
            table_scale=table_scale,
        )
        return _SyntheticData(gen, rows, int(math.floor(rows * eval_fraction)))


class _FileData(TrainingData):
    def __init__(self, reader: CriteoReader) -> None:
        super().__init__(
            {
                "source": "criteo_tsv",
                "path": str(reader.path),
                "on_bad_line": reader.on_bad_line,
                "eval_fraction": reader.eval_fraction,
            },
            reader.num_train_lines,
            reader.num_eval_lines,
        )
        self.reader = reader

    def train_batches(self, batch_size: int) -> Iterator[Batch]:
        return self.reader.batches(batch_size, "train")

    def eval_batches(self, batch_size: int) -> Iterator[Batch]:
        return self.reader.batches(batch_size, "eval")

    @property
    def bad_lines(self) -> int:
        return self.reader.bad_lines


class _SyntheticData(TrainingData):
    def __init__(self, gen: SyntheticCriteo, rows: int, num_eval: int) -> None:
        super().__init__(
            {
                "source": "synthetic",
                "rows": rows,
                "seed": gen.seed,
                "max_cardinality": int(gen.cardinalities.max()),
                "zipf_exponent": gen.zipf_exponent,
            },
            rows - num_eval,
            num_eval,
        )
        self.gen = gen

    def _split(self, batch_size: int, rows: int, split: str) -> Iterator[Batch]:
        full, rest = divmod(rows, batch_size)
        yield from self.gen.batches(batch_size, full, split)
        if rest:  # the short last batch: the head of the next full-size batch, so a split is a fixed row set
            b = self.gen.batch(full, batch_size, split)
            yield Batch(b.dense[:rest], b.sparse[:rest], b.label[:rest])

    def train_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._split(batch_size, self.num_train, "train")

    def eval_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._split(batch_size, self.num_eval, "eval")
