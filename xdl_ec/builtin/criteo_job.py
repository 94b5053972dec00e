"""The built-in job: a CTR model (DLRM or Embedding&MLP) on Criteo data, written against the public job API
(``xdl-ec train`` without ``--script``). One table holds the 26 categorical features' rows; their ids are already
salted per column by the reader (see :mod:`xdl_ec.data.schema`), so the job declares them as ONE fixed multi-hot
feature ``categorical`` [B, 26] with ``shared_ids=True`` and no combiner ([B, 26, dim] into the model).

Its input splits one stream of train batches over the workers: worker i of W takes batches i, i + W, ... of the
run (``steps`` batches, or ``epochs`` passes over the train split), so one worker trains them all in file order.

On a stream (``stream=DIR``, :func:`xdl_ec.data.stream`) the run's batches are cut from the stream's rows in order
and split over the workers the same way; the input is endless (until no new file came for ``stream_idle_exit``
seconds), has no hold-out (progressive validation measures it), and each worker's input gives its stream position
(file, offset) to every save, where a resume continues without re-reading the stream.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import math
import os
from typing import Any, Callable, Dict, Iterator, Optional, Sequence

import numpy as np

from xdl_ec.data.file_stream import DEFAULT_POLL_SECONDS, FileStream
from xdl_ec.data.schema import Batch
from xdl_ec.data.source import TrainingData
from xdl_ec.data.synthetic import CARDINALITY_SETS, SyntheticCriteo
from xdl_ec.job.job import Job
from xdl_ec.model.dense_model import DENSE_OPTIMIZERS
from xdl_ec.model.feature import Feature
from xdl_ec.settings import checks
from xdl_ec.settings.flag import flag
from xdl_ec.settings.flag_types import fraction, non_negative_int, positive_float, positive_int
from xdl_ec.sparse import init, optim
from xdl_ec.sparse.row_rules import COUNTERS, DEFAULT_EVERY_STEPS, rules_of
from xdl_ec.sparse.table_config import Table

TABLE_NAME = "criteo_categorical"
FEATURE_NAME = "categorical"
MODELS = ("dlrm", "mlp")


def layer_sizes(text: str) -> tuple[int, ...]:
    """--bottom-mlp, --top-mlp and --hidden's text: comma-separated positive sizes ("" for none)."""
    if text.strip() == "":
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 64,32, got {text!r}"
        ) from None
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers like 64,32, got {text!r}")
    return sizes


def _field(default: Any, name: str, help: str, part: str = "built-in", **options: Any) -> Any:
    """A TrainConfig field and its ``xdl-ec train`` flag: ``part`` "built-in" (the built-in job's only), "run"
    (any job's run) or "bounded" (the table rules, also for a --script job's tables that declare none)."""
    return dataclasses.field(default=default, metadata=flag(name, help, part=part, **options))


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything that defines the built-in job, checked on creation; each field beside its ``xdl-ec train`` flag.

    ``steps`` (batches of the run, split over the workers) takes precedence over ``epochs`` when given (the data
    are cycled as often as needed). The defaults train a sensible DLRM on the Criteo sample (see the README).
    """

    data: Optional[str] = _field(
        None, "--data", "[built-in] raw Criteo TSV file, plain or .gz", metavar="PATH", one_of="source"
    )
    synthetic: bool = _field(
        False, "--synthetic", "[built-in] seeded synthetic Criteo-shaped data", action="store_true", one_of="source"
    )
    # a directory of Criteo TSV files read as they appear (xdl_ec.data.stream)
    stream: Optional[str] = _field(
        None,
        "--stream",
        "[built-in] train on the Criteo TSV files (plain or .gz) of DIR in name order as they appear, endlessly; a "
        "file counts once renamed in (names starting with '.' or ending in .tmp are ignored); saves keep the stream "
        "position (file, offset)",
        metavar="DIR",
        one_of="source",
    )
    stream_pattern: str = "*"
    # seconds without a new file that end the stream (None: never)
    stream_idle_exit: Optional[float] = _field(
        None,
        "--stream-idle-exit",
        "[built-in] with --stream: end when no new file came for this many seconds of waiting (default: wait "
        "forever; SIGINT/SIGTERM stop cleanly)",
        type=positive_float,
        metavar="SECONDS",
    )
    stream_poll: float = DEFAULT_POLL_SECONDS
    synthetic_rows: int = _field(
        60_000,
        "--synthetic-rows",
        "[built-in] rows of synthetic data, eval split included (default {default})",
        type=positive_int,
    )
    synthetic_max_cardinality: Optional[int] = _field(
        100_000,
        "--synthetic-max-cardinality",
        "[built-in] cap on each synthetic column's cardinality (default {default})",
        type=positive_int,
    )
    synthetic_tables: str = _field(
        "kaggle",
        "--synthetic-tables",
        "[built-in] the synthetic columns' cardinalities: kaggle (Criteo Kaggle's, ~34M ids) or criteo-1tb (MLPerf "
        "DLRM's Criteo 1TB tables capped at 40M rows each, ~188M ids; give --synthetic-max-cardinality 40000000 or "
        "more to keep them whole) (default {default})",
        choices=tuple(CARDINALITY_SETS),
    )
    synthetic_table_scale: float = _field(
        1.0,
        "--synthetic-table-scale",
        "[built-in] every synthetic column's cardinality times F, in (0, 1] (rounded up; before "
        "--synthetic-max-cardinality): the same shape at a fraction of its rows (default {default})",
        type=positive_float,
        metavar="F",
    )
    synthetic_preload: bool = _field(
        False,
        "--synthetic-preload",
        "[built-in] before the first step, create the row of every id the synthetic data can draw (each column's "
        "values below its cardinality) in bounded chunks, through the servers' own insert path (parity follows): "
        "each row is its initializer's, the row training would have created on first use, so every step reads "
        "what it reads without the preload (not on --resume: the save holds the rows)",
        action="store_true",
    )
    synthetic_zipf: float = _field(
        1.1,
        "--synthetic-zipf",
        "[built-in] Zipf exponent of the synthetic ids' skew (default {default})",
        type=positive_float,
        metavar="S",
    )
    model: str = _field("dlrm", "--model", "[built-in] model body (default {default})", choices=MODELS)
    emb_dim: int = _field(16, "--emb-dim", "[built-in] embedding dimension (default {default})", type=positive_int)
    bottom_mlp: Sequence[int] = _field(
        (64,),
        "--bottom-mlp",
        "[built-in] DLRM bottom MLP hidden sizes; its output layer has emb-dim units (default {default})",
        type=layer_sizes,
        metavar="N,N",
    )
    top_mlp: Sequence[int] = _field(
        (64, 32),
        "--top-mlp",
        "[built-in] DLRM top MLP hidden sizes before the logit (default {default})",
        type=layer_sizes,
        metavar="N,N",
    )
    hidden: Sequence[int] = _field(
        (128, 64),
        "--hidden",
        "[built-in] Embedding&MLP hidden sizes (default {default})",
        type=layer_sizes,
        metavar="N,N",
    )
    optimizer: str = _field(
        "adagrad",
        "--optimizer",
        "[built-in] sparse optimizer of the embedding table: sgd, momentum, adagrad, adam, ftrl (default {default})",
    )
    lr: float = _field(0.02, "--lr", "[built-in] sparse learning rate (default {default})", type=positive_float)
    dense_optimizer: str = _field(
        "adam",
        "--dense-optimizer",
        "[built-in] Keras optimizer of the dense model (default {default})",
        choices=DENSE_OPTIMIZERS,
    )
    dense_lr: float = _field(
        0.001, "--dense-lr", "[built-in] dense learning rate (default {default})", type=positive_float
    )
    batch_size: int = _field(128, "--batch-size", "[built-in] default {default}", type=positive_int)
    steps: Optional[int] = _field(
        None,
        "--steps",
        "built-in: batches of the run, split over the workers (cycling the data as needed); --script: at most this "
        "many steps, each one batch on every worker",
        part="run",
        type=positive_int,
        one_of="length",
    )
    epochs: int = _field(
        3,
        "--epochs",
        "[built-in] passes over the train split (default {default})",
        type=positive_int,
        one_of="length",
    )
    eval_fraction: float = _field(
        0.1,
        "--eval-fraction",
        "[built-in] held-out fraction: the last rows in file order (default {default})",
        type=fraction,
    )
    seed: int = _field(0, "--seed", "default {default}", part="run", type=non_negative_int)
    deterministic: bool = _field(
        False,
        "--deterministic",
        "deterministic TF ops, one thread per op (ops side by side on two): same seed, same model_digest (except "
        "with --evict-ttl-seconds, whose passes follow wall time)",
        part="run",
        action="store_true",
    )
    on_bad_line: str = _field(
        "error",
        "--on-bad-line",
        "[built-in] malformed lines: stop with file:line and the reason, or skip and count them",
        choices=("error", "skip"),
    )
    progress: bool = True
    # bounded table (xdl_ec.sparse.row_rules): None leaves the table unbounded, as before
    admit_min_count: Optional[int] = _field(
        None,
        "--admit-min-count",
        "an id gets a row on its N-th occurrence (pushes); until then it reads zeros and its gradients are dropped "
        "(default: at once)",
        part="bounded",
        type=positive_int,
        metavar="N",
    )
    # "sketch": a count-min sketch per server instead of a record per pending id, halved every evict_every_steps
    admit_counter: str = _field(
        "exact",
        "--admit-counter",
        "how --admit-min-count counts the ids without a row: exact (a record per id; the default) or sketch (a "
        "count-min sketch per server: no record per id, may admit an id early; halved every --evict-every-steps)",
        part="bounded",
        choices=COUNTERS,
    )
    evict_ttl_steps: Optional[int] = _field(
        None,
        "--evict-ttl-steps",
        "evict rows not updated for more than N steps (default: never)",
        part="bounded",
        type=positive_int,
        metavar="N",
    )
    # instead of evict_ttl_steps: seconds of training wall time
    evict_ttl_seconds: Optional[float] = _field(
        None,
        "--evict-ttl-seconds",
        "instead of --evict-ttl-steps: evict rows not updated for more than S seconds of training wall time (the "
        "driver's step start times; the steps before a --resume count as started with the first step after it). "
        "Wall time varies from run to run, so even --deterministic runs may evict other rows (a recovered run still "
        "evicts what its failure-free run with the same step times would)",
        part="bounded",
        type=positive_float,
        metavar="S",
    )
    max_rows: Optional[int] = _field(
        None,
        "--max-rows",
        "at most N rows, summed over the servers (each keeps N / servers, at least one 1024-row block); the least "
        "used go first (default: no cap)",
        part="bounded",
        type=positive_int,
        metavar="N",
    )
    evict_every_steps: int = _field(
        DEFAULT_EVERY_STEPS,
        "--evict-every-steps",
        "eviction passes run after the pushes of every K-th step (default {default})",
        part="bounded",
        type=positive_int,
        metavar="K",
    )

    def __post_init__(self) -> None:
        if (self.data is not None) + bool(self.synthetic) + (self.stream is not None) != 1:
            raise ValueError(
                "data: give exactly one of a Criteo file (data), a stream directory (stream) or synthetic=True"
            )
        for name in ("data", "stream"):  # workers may run elsewhere (Ray actors in their own working directory)
            if getattr(self, name) is not None:
                object.__setattr__(self, name, os.path.abspath(os.fspath(getattr(self, name))))
        if self.stream_idle_exit is not None:
            checks.number("stream_idle_exit", self.stream_idle_exit, 0.0)
        checks.positive_number("stream_poll", self.stream_poll)
        checks.non_empty_str("stream_pattern", self.stream_pattern)
        for name in ("emb_dim", "batch_size", "epochs", "synthetic_rows"):
            checks.positive_int(name, getattr(self, name))
        if self.steps is not None:
            checks.positive_int("steps", self.steps)
        if self.synthetic_max_cardinality is not None:
            checks.positive_int("synthetic_max_cardinality", self.synthetic_max_cardinality)
        checks.one_of("synthetic_tables", self.synthetic_tables, tuple(CARDINALITY_SETS))
        checks.number("synthetic_table_scale", self.synthetic_table_scale, 0.0, 1.0, low_open=True)
        if self.synthetic_preload and not self.synthetic:
            raise ValueError("synthetic_preload: preloads the ids of synthetic data; it needs synthetic=True")
        for name in ("lr", "dense_lr", "synthetic_zipf"):
            checks.positive_number(name, getattr(self, name))
        checks.number("eval_fraction", self.eval_fraction, 0.0, 1.0, high_open=True)
        checks.one_of("dense_optimizer", self.dense_optimizer, DENSE_OPTIMIZERS)
        checks.one_of("model", self.model, MODELS)
        checks.one_of("admit_counter", self.admit_counter, COUNTERS)
        checks.non_negative_int("seed", self.seed)
        optim.get(self.optimizer, learning_rate=self.lr)  # an unknown name lists the known ones
        Table(TABLE_NAME, self.emb_dim, **self.table_rules())  # bad admission / eviction settings fail here

    def describe(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def table_rules(self) -> Dict[str, Any]:
        """The table's ``admit`` and ``evict`` (None where not asked for)."""
        return rules_of(
            self.admit_min_count,
            self.admit_counter,
            self.evict_ttl_steps,
            self.evict_ttl_seconds,
            self.max_rows,
            self.evict_every_steps,
        )


def open_training_data(config: TrainConfig) -> TrainingData:
    """The data a config names: its Criteo file, or the synthetic generator seeded by its seed."""
    if config.synthetic:
        return TrainingData.synthetic(
            config.synthetic_rows,
            eval_fraction=config.eval_fraction,
            seed=config.seed,
            max_cardinality=config.synthetic_max_cardinality,
            zipf_exponent=config.synthetic_zipf,
            tables=config.synthetic_tables,
            table_scale=config.synthetic_table_scale,
        )
    if config.data is None:
        raise ValueError("data: the built-in job reads a Criteo file (data=PATH) or synthetic rows (synthetic=True)")
    return TrainingData.from_file(
        os.fspath(config.data), eval_fraction=config.eval_fraction, on_bad_line=config.on_bad_line
    )


def num_train_batches(data: TrainingData, config: TrainConfig) -> int:
    """Batches the run trains on: ``steps``, else ``epochs`` passes over the train split."""
    if config.steps is not None:
        return config.steps
    return config.epochs * math.ceil(data.num_train / config.batch_size)


def train_batch_stream(data: TrainingData, config: TrainConfig, total: int) -> Iterator[Batch]:
    """The run's ``total`` train batches in data order, cycling the train split as often as needed."""
    produced_total = 0
    while produced_total < total:
        produced = False
        for b in data.train_batches(config.batch_size):
            produced = True
            yield b
            produced_total += 1
            if produced_total == total:
                return
        if not produced:
            raise ValueError("data: the train split is empty (every line bad, or too small a file)")


def as_job_batch(batch: Batch) -> Dict[str, Any]:
    return {"label": batch.label, "dense": batch.dense, FEATURE_NAME: batch.sparse}


class StreamBatches:
    """One worker's share of a stream's batches (worker i of W: batches i, i + W, ... of the stream, the first
    ``steps`` when given), with its position after each for a save (``position_after``) and a resume there
    (``resume_at``)."""

    KEPT_POSITIONS = 256  # batches handed out but not yet trained (prefetched) are a few; a save asks for one

    def __init__(self, config: TrainConfig, worker: int, num_workers: int) -> None:
        assert config.stream is not None
        self.config, self._worker, self._count = config, worker, num_workers
        self._start: Dict[str, Any] = {"stream": None, "batches": 0}
        self._positions: "collections.OrderedDict[int, Dict[str, Any]]" = collections.OrderedDict()
        self._stream: Optional[FileStream] = None

    def resume_at(self, position: Dict[str, Any]) -> None:
        if not isinstance(position, dict) or set(position) != {"stream", "batches"}:
            raise ValueError(f"stream position: expected {{'stream', 'batches'}} from a save, got {position!r}")
        self._start = dict(position)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        c = self.config
        assert c.stream is not None
        self._stream = FileStream(
            c.stream, c.stream_pattern, idle_exit=c.stream_idle_exit, poll=c.stream_poll, start=self._start["stream"]
        )
        own = int(self._start["batches"])
        self._positions = collections.OrderedDict({own: self._start})
        batches = self._stream.batches(c.batch_size, c.on_bad_line)
        # the run's first ``steps`` batches when given (as on a file), stopping before waiting for more rows
        while c.steps is None or self._stream.batch < c.steps:
            cut = next(batches, None)
            if cut is None:
                return
            batch, position = cut
            if (position["batch"] - 1) % self._count != self._worker:
                continue
            own += 1
            self._positions[own] = {"stream": position, "batches": own}
            while len(self._positions) > self.KEPT_POSITIONS:
                self._positions.popitem(last=False)
            yield as_job_batch(batch)

    def position_after(self, batches: int) -> Dict[str, Any]:
        """The stream position after this worker's ``batches``-th batch (kept for the last few handed out)."""
        if batches not in self._positions:
            raise ValueError(
                f"stream position: batch {batches} of worker {self._worker} is not among the last "
                f"{self.KEPT_POSITIONS} handed out"
            )
        return self._positions[batches]

    def stats(self) -> Dict[str, Any]:
        s = self._stream
        return {} if s is None else {"bad_lines": s.bad_lines, "stream_file": s.file, "stream_files_read": s.files_read}


class CriteoBatches:
    """One worker's share of the run's batches; ``stats()`` reports the bad lines its reader skipped so far."""

    def __init__(self, config: TrainConfig, worker: int, num_workers: int) -> None:
        self.data = open_training_data(config)
        if self.data.num_train == 0:
            raise ValueError("data: the train split is empty (every line bad, or too small a file)")
        self._stream = train_batch_stream(self.data, config, num_train_batches(self.data, config))
        self._worker, self._count = worker, num_workers

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return (as_job_batch(b) for i, b in enumerate(self._stream) if i % self._count == self._worker)

    def stats(self) -> Dict[str, Any]:
        return {"bad_lines": self.data.bad_lines}


@dataclasses.dataclass(frozen=True)
class CriteoInput:
    """``input_fn`` of the built-in job (picklable: each worker opens the data itself)."""

    config: TrainConfig

    def __call__(self, worker: int, num_workers: int) -> Any:
        if self.config.stream is not None:
            return StreamBatches(self.config, worker, num_workers)
        return CriteoBatches(self.config, worker, num_workers)


@dataclasses.dataclass(frozen=True)
class CriteoHoldout:
    """``eval_fn`` of the built-in job: the held-out split, in batches of at least 4096."""

    config: TrainConfig

    def __call__(self) -> Iterator[Dict[str, Any]]:
        data = open_training_data(self.config)
        return (as_job_batch(b) for b in data.eval_batches(max(self.config.batch_size, 4096)))


@dataclasses.dataclass(frozen=True)
class CriteoModel:
    """``model_fn`` of the built-in job: the model body the config names."""

    config: TrainConfig

    def __call__(self) -> Any:
        from xdl_ec.models import build_model

        c = self.config
        return build_model(c.model, c.emb_dim, bottom_mlp=c.bottom_mlp, top_mlp=c.top_mlp, hidden=c.hidden)


PRELOAD_CHUNK = 1 << 18  # keys per preload chunk: ~40 MB of new d16 Adagrad rows over the servers at a time


@dataclasses.dataclass(frozen=True)
class SyntheticIds:
    """Every id the built-in job's synthetic data can draw, in chunks (a preload's keys)."""

    config: TrainConfig

    def __call__(self) -> Iterator[np.ndarray]:
        c = self.config
        gen = SyntheticCriteo(
            c.seed,
            max_cardinality=c.synthetic_max_cardinality,
            zipf_exponent=c.synthetic_zipf,
            tables=c.synthetic_tables,
            table_scale=c.synthetic_table_scale,
        )
        return gen.key_chunks(PRELOAD_CHUNK)


def synthetic_preload(config: TrainConfig) -> Dict[str, Callable[[], Iterator[np.ndarray]]]:
    """``Job.fit``'s ``preload`` of ``--synthetic-preload``: the built-in table's every synthetic id."""
    return {TABLE_NAME: SyntheticIds(config)}


def criteo_job(config: TrainConfig) -> Job:
    """The built-in job of ``config``."""
    table = Table(
        TABLE_NAME,
        config.emb_dim,
        optimizer=optim.get(config.optimizer, learning_rate=config.lr),
        initializer=init.RandomUniform(-0.05, 0.05),
        seed=config.seed,
        **config.table_rules(),
    )
    return Job(
        tables=[table],
        features=[Feature(FEATURE_NAME, table, combiner=None, shared_ids=True)],
        model_fn=CriteoModel(config),
        input_fn=CriteoInput(config),
        dense_optimizer=config.dense_optimizer,
        dense_learning_rate=config.dense_lr,
        eval_fn=CriteoHoldout(config) if config.eval_fraction > 0 and config.stream is None else None,
    )


def job_from_description(description: Dict[str, Any]) -> Job:
    """The built-in job of a save's source (``TrainConfig.describe()``): how :func:`xdl_ec.load` rebuilds it."""
    return criteo_job(TrainConfig(**description))
