"""The single-process trainer: one xdl-ec embedding table for the 26 categorical features, a Keras model body,
a custom training loop in ``tf.function``, hold-out evaluation and the run report.

Who updates what: the dense model body is trained by a Keras optimizer (``dense_optimizer``); the embedding rows
live in an :class:`xdl_ec.EmbeddingTable` and are trained by the table's own sparse optimizer, applied by the
gradient of the lookup op during the backward pass (see :mod:`xdl_ec.tf_ops`). The data, the embedding access,
the model body and the loop are separate pieces so that the loop can later run as a worker against parameter
servers.

Evaluation never inserts rows: it reads the table with ``find`` and uses a zero row for keys never trained
(the hold-out split of a time-ordered log is full of unseen values).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from .data.prefetcher import Prefetcher
from .data.schema import NUM_DENSE, NUM_SPARSE, Batch, tf_signature
from .data.source import TrainingData
from .digest import model_digest
from .metrics import holdout_metrics

DENSE_OPTIMIZERS = ("adam", "adagrad", "sgd", "rmsprop")
LAST_LOSSES = 50  # final_loss: mean training loss over this many last steps


@dataclasses.dataclass
class TrainConfig:
    """Everything that defines a training run (the CLI flags of ``xdl-ec train``).

    ``steps`` takes precedence over ``epochs`` when given (the data are cycled as often as needed).
    The defaults train a sensible DLRM on the Criteo sample (see the README).
    """

    data: Optional[str] = None
    synthetic: bool = False
    synthetic_rows: int = 60_000
    synthetic_max_cardinality: Optional[int] = 100_000
    model: str = "dlrm"
    emb_dim: int = 16
    bottom_mlp: Sequence[int] = (64,)
    top_mlp: Sequence[int] = (64, 32)
    hidden: Sequence[int] = (128, 64)
    optimizer: str = "adagrad"
    lr: float = 0.02
    dense_optimizer: str = "adam"
    dense_lr: float = 0.001
    batch_size: int = 128
    steps: Optional[int] = None
    epochs: int = 3
    eval_fraction: float = 0.1
    seed: int = 0
    deterministic: bool = False
    on_bad_line: str = "error"
    progress: bool = True

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        if (self.data is None) == (not self.synthetic):
            raise ValueError("data: give exactly one of a Criteo file (data) or synthetic=True")
        for name in ("emb_dim", "batch_size", "epochs", "synthetic_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        if self.steps is not None and (isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1):
            raise ValueError(f"steps: must be a positive integer, got {self.steps!r}")
        if self.synthetic_max_cardinality is not None and self.synthetic_max_cardinality < 1:
            raise ValueError(f"synthetic_max_cardinality: must be positive, got {self.synthetic_max_cardinality}")
        for name in ("lr", "dense_lr"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: must be a positive finite number, got {value!r}")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction: must be in [0, 1), got {self.eval_fraction}")
        if self.dense_optimizer not in DENSE_OPTIMIZERS:
            raise ValueError(f"dense_optimizer: must be one of {DENSE_OPTIMIZERS}, got {self.dense_optimizer!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: must be a non-negative integer, got {self.seed!r}")


def configure_determinism(seed: int, deterministic: bool) -> None:
    """Seed Python, numpy and TF/Keras; with ``deterministic`` also force deterministic TF ops and one thread
    per op pool (set before TF runs its first op when possible)."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
        for setter in (tf.config.threading.set_intra_op_parallelism_threads,
                       tf.config.threading.set_inter_op_parallelism_threads):
            try:
                setter(1)
            except RuntimeError:  # TF already initialised in this process: keep its pools
                pass


class Trainer:
    """Trains one model on one :class:`TrainingData` in this process; :meth:`run` returns the report dict."""

    TABLE_NAME = "criteo_categorical"

    def __init__(self, config: TrainConfig, data: Optional[TrainingData] = None) -> None:
        config.validate()
        self.config = config
        self.data = data if data is not None else open_training_data(config)
        configure_determinism(config.seed, config.deterministic)

        import tensorflow as tf

        from . import init, optim
        from .keras import SparseEmbedding
        from .table import EmbeddingTable

        self.table = EmbeddingTable(self.TABLE_NAME, config.emb_dim,
                                    optimizer=optim.get(config.optimizer, learning_rate=config.lr),
                                    initializer=init.RandomUniform(-0.05, 0.05), seed=config.seed)
        self.embedding = SparseEmbedding(self.table)
        self.model, self.dense_optimizer = build_dense_part(config)
        self.step = 0
        self.losses: list[float] = []
        self._train_step = self._make_train_step(tf)
        self._predict = tf.function(lambda dense, emb: tf.sigmoid(self.model((dense, emb), training=False)),
                                    input_signature=[tf.TensorSpec([None, NUM_DENSE], tf.float32),
                                                     tf.TensorSpec([None, NUM_SPARSE, config.emb_dim], tf.float32)])

    def _make_train_step(self, tf: Any) -> Any:
        model, embedding, optimizer = self.model, self.embedding, self.dense_optimizer
        trigger = embedding.backward_trigger

        def train_step(dense, sparse, label, step):  # noqa: ANN001, ANN202 - traced by tf.function
            with tf.GradientTape() as tape:
                emb = embedding(sparse, step=step)
                logits = model((dense, emb), training=True)
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logits))
            variables = model.trainable_variables
            # The trigger's gradient (always 0) carries the table update: asking for it runs the sparse push.
            grads = tape.gradient(loss, [*variables, trigger])
            with tf.control_dependencies([grads[-1]]):
                optimizer.apply(grads[:-1], variables)
                return tf.identity(loss)

        signature = [*tf_signature(), tf.TensorSpec([], tf.int64)]
        return tf.function(train_step, input_signature=signature)

    # ---- training ---------------------------------------------------------------------------------------
    def _batches(self) -> Iterator[Batch]:
        """Train batches for the whole run (epochs, or steps cycling the data), in data order."""
        return train_batch_stream(self.data, self.config)

    def fit(self) -> dict:
        """Runs the training loop; returns samples, steps, train_seconds, samples_per_sec (whole loop),
        steady_samples_per_sec (after the first step, which traces the tf.function) and final_loss."""
        from tqdm import tqdm

        cfg = self.config
        total = cfg.steps if cfg.steps is not None else cfg.epochs * math.ceil(self.data.num_train / cfg.batch_size)
        samples = 0
        first_step_end, first_samples = None, 0  # steady-state rate: after the first step (tracing, warm-up)
        bar = tqdm(total=total, unit="step", disable=not cfg.progress, dynamic_ncols=True, leave=False)
        start = time.perf_counter()
        last_postfix = start
        import tensorflow as tf

        batches = Prefetcher(self._batches())
        try:
            for b in batches:
                self.step += 1
                loss = float(self._train_step(b.dense, b.sparse, b.label, tf.constant(self.step, tf.int64)))
                if not math.isfinite(loss):
                    raise FloatingPointError(f"training diverged at step {self.step}: loss is {loss}; "
                                             f"lower --lr / --dense-lr")
                self.losses.append(loss)
                samples += len(b)
                if first_step_end is None:
                    first_step_end, first_samples = time.perf_counter(), samples
                bar.update(1)
                now = time.perf_counter()
                if now - last_postfix > 0.5:
                    bar.set_postfix(loss=f"{np.mean(self.losses[-LAST_LOSSES:]):.4f}",
                                    samples_per_sec=f"{samples / (now - start):,.0f}")
                    last_postfix = now
        finally:
            batches.close()
            bar.close()
        end = time.perf_counter()
        seconds = end - start
        steady = (samples - first_samples) / (end - first_step_end) if samples > first_samples else None
        return {"samples": samples, "steps": self.step, "train_seconds": seconds,
                "samples_per_sec": samples / seconds if seconds > 0 else 0.0, "steady_samples_per_sec": steady,
                "final_loss": float(np.mean(self.losses[-LAST_LOSSES:])) if self.losses else None}

    # ---- evaluation -------------------------------------------------------------------------------------
    def embeddings_for_eval(self, sparse: np.ndarray) -> np.ndarray:
        """Rows [B, 26, dim] of the keys without inserting any: unseen keys read as zero rows."""
        return rows_for_eval(self.table.find, sparse, self.config.emb_dim)

    def evaluate(self) -> dict:
        """AUC and log loss on the held-out split (None when it is empty or has one class only)."""
        return evaluate_holdout(self.data, self.config, self._predict, self.embeddings_for_eval)

    def digest(self) -> str:
        """``model_digest`` of the current state (see :mod:`xdl_ec.digest`)."""
        return model_digest([self.table.export()], self.model.weights, self.dense_optimizer.variables)

    def run(self) -> dict:
        """fit + evaluate + digest: the report of ``xdl-ec train --report``."""
        report = self.fit()
        start = time.perf_counter()
        report.update(self.evaluate())
        report["eval_seconds"] = time.perf_counter() - start
        report["model_digest"] = self.digest()
        report["embedding_rows"] = len(self.table)
        report["bad_lines"] = self.data.bad_lines
        report["config"] = {**dataclasses.asdict(self.config), "data_source": self.data.description}
        return report


def num_train_batches(data: TrainingData, config: TrainConfig) -> int:
    """Batches a run trains on: ``steps``, else ``epochs`` passes over the train split."""
    if config.steps is not None:
        return config.steps
    return config.epochs * math.ceil(data.num_train / config.batch_size)


def train_batch_stream(data: TrainingData, config: TrainConfig, total: Optional[int] = None) -> Iterator[Batch]:
    """The run's train batches in data order: ``epochs`` passes, or ``steps`` (or ``total``) batches cycling the
    train split. Several workers split this one stream (worker i takes every W-th batch)."""
    if total is None:
        total = config.steps
    epoch, produced_total = 0, 0
    while (total is None and epoch < config.epochs) or (total is not None and produced_total < total):
        produced = False
        for b in data.train_batches(config.batch_size):
            produced = True
            yield b
            produced_total += 1
            if produced_total == total:
                return
        if not produced:
            raise ValueError("data: the train split is empty (every line bad, or too small a file)")
        epoch += 1


def rows_for_eval(find: Callable[[np.ndarray], tuple], sparse: np.ndarray, dim: int) -> np.ndarray:
    """Rows [B, 26, dim] of ``sparse`` keys read with ``find(unique_keys) -> (rows, found)`` (no insert): keys
    never trained read as zero rows."""
    unique, inverse = np.unique(sparse.reshape(-1), return_inverse=True)
    rows, found = find(unique)
    rows = np.where(np.asarray(found, dtype=bool)[:, None], rows, np.float32(0))
    return rows[inverse].reshape(sparse.shape[0], NUM_SPARSE, dim)


def evaluate_holdout(data: TrainingData, config: TrainConfig, predict: Callable[[Any, Any], Any],
                     embeddings: Callable[[np.ndarray], np.ndarray]) -> dict:
    """AUC and log loss of ``predict(dense, embeddings(sparse))`` on the held-out split."""
    labels, probs = [], []
    for b in data.eval_batches(max(config.batch_size, 4096)):
        probs.append(np.asarray(predict(b.dense, embeddings(b.sparse))))
        labels.append(b.label)
    return holdout_metrics(labels, probs)


def build_dense_part(config: TrainConfig) -> tuple[Any, Any]:
    """The model body of a config, built (weights created from the seeded Keras RNG), and its dense Keras
    optimizer, built over the body's trainable variables."""
    import tensorflow as tf

    from .models import build_model

    model = build_model(config.model, config.emb_dim, bottom_mlp=config.bottom_mlp, top_mlp=config.top_mlp,
                        hidden=config.hidden)
    model((tf.zeros([1, NUM_DENSE]), tf.zeros([1, NUM_SPARSE, config.emb_dim])))
    optimizer = tf.keras.optimizers.get(
        {"class_name": config.dense_optimizer, "config": {"learning_rate": config.dense_lr}})
    optimizer.build(model.trainable_variables)
    return model, optimizer


def open_training_data(config: TrainConfig) -> TrainingData:
    """The data a config names: its Criteo file, or the synthetic generator seeded by its seed."""
    if config.synthetic:
        return TrainingData.synthetic(config.synthetic_rows, eval_fraction=config.eval_fraction, seed=config.seed,
                                      max_cardinality=config.synthetic_max_cardinality)
    return TrainingData.from_file(os.fspath(config.data), eval_fraction=config.eval_fraction,
                                  on_bad_line=config.on_bad_line)
