"""Seeded synthetic Criteo-shaped data whose labels come from a hidden model, so AUC means something.

Each of the 26 categorical columns draws a rank from a bounded Zipf law over its cardinality (the Criteo Kaggle
cardinalities, optionally capped); the rank is the categorical value, keyed exactly as the file reader keys a hex
value (:func:`xdl_ec.data.schema.categorical_keys`). The 13 integer columns are geometric counts (a few with
negatives and empties, like I2). The label is Bernoulli(sigmoid(logit)) with

    logit = bias + sum_c w_c(rank_c) + v . dense

where the per-id weights w_c are computed from (seed, column, rank) by a hash, so the hidden model needs no memory
however large the cardinalities. Batch ``i`` of a split is generated from its own random stream seeded by
(seed, split, batch_size, i): the data are deterministic and any batch can be produced without the ones before it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterator

import numpy as np

from xdl_ec.data.schema import (
    NUM_DENSE,
    NUM_SPARSE,
    Batch,
    categorical_keys,
    column_keys,
    dense_transform,
    tf_signature,
)
from xdl_ec.settings import checks
from xdl_ec.sparse.hashing import fmix64

if TYPE_CHECKING:
    import tensorflow as tf

# Distinct values per categorical column of Criteo Kaggle (train.txt), C1..C26.
CRITEO_KAGGLE_CARDINALITIES = (
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
)

# MLPerf DLRM's Criteo 1TB (Terabyte) tables, C1..C26, each capped at 40M rows (its --max-ind-range=40000000):
# 187,767,399 rows in all.
CRITEO_1TB_CARDINALITIES = (
    39884406,
    39043,
    17289,
    7420,
    20263,
    3,
    7120,
    1543,
    63,
    38532951,
    2953546,
    403346,
    10,
    2208,
    11938,
    155,
    4,
    976,
    14,
    39979771,
    25641295,
    39664984,
    585935,
    12972,
    108,
    36,
)

# --synthetic-tables: the column cardinalities by name
CARDINALITY_SETS = {"kaggle": CRITEO_KAGGLE_CARDINALITIES, "criteo-1tb": CRITEO_1TB_CARDINALITIES}

_SPLITS = {"train": 0, "eval": 1}


def _bounded_zipf(u: np.ndarray, n: np.ndarray, s: float) -> np.ndarray:
    """Ranks in [0, n) with P(rank k) ~ (k + 1)^-s, by inverting the continuous power law's CDF."""
    n = n.astype(np.float64)
    if abs(s - 1.0) < 1e-9:
        x = np.exp(u * np.log(n + 1.0))
    else:
        a = 1.0 - s
        x = (u * ((n + 1.0) ** a - 1.0) + 1.0) ** (1.0 / a)
    return np.minimum(np.floor(x) - 1.0, n - 1.0).clip(0).astype(np.uint64)


class SyntheticCriteo:
    """Deterministic Criteo-shaped batches (see the module docstring); same :class:`Batch` format as the reader.

    Args:
      seed: selects the data and the hidden model.
      max_cardinality: caps every column's cardinality (None: the full ones of ``tables``).
      zipf_exponent: skew of the categorical values (> 0; Criteo's is about 1.05-1.2).
      id_weight_scale: standard deviation of the hidden per-id weights.
      tables: the column cardinalities, a name of ``CARDINALITY_SETS``: ``"kaggle"`` (Criteo Kaggle's) or
        ``"criteo-1tb"`` (MLPerf DLRM's Criteo 1TB tables, each capped at 40M rows).
      table_scale: every column's cardinality times this (rounded up, at least 1; before ``max_cardinality``):
        a run of the same shape at a fraction of its rows.
    """

    def __init__(
        self,
        seed: int = 0,
        *,
        max_cardinality: int | None = None,
        zipf_exponent: float = 1.1,
        id_weight_scale: float = 0.5,
        tables: str = "kaggle",
        table_scale: float = 1.0,
    ) -> None:
        seed = checks.integer("seed", seed, 0)
        if max_cardinality is not None and (
            isinstance(max_cardinality, bool)
            or not isinstance(max_cardinality, (int, np.integer))
            or max_cardinality < 1
        ):
            raise ValueError(f"max_cardinality: must be a positive integer or None, got {max_cardinality!r}")
        if not np.isfinite(zipf_exponent) or zipf_exponent <= 0:
            raise ValueError(f"zipf_exponent: must be a positive number, got {zipf_exponent!r}")
        if not np.isfinite(id_weight_scale) or id_weight_scale < 0:
            raise ValueError(f"id_weight_scale: must be a non-negative number, got {id_weight_scale!r}")
        if tables not in CARDINALITY_SETS:
            raise ValueError(f"tables: must be one of {sorted(CARDINALITY_SETS)}, got {tables!r}")
        if not np.isfinite(table_scale) or not 0 < table_scale <= 1:
            raise ValueError(f"table_scale: must be in (0, 1], got {table_scale!r}")
        self.seed = int(seed)
        cards = np.array([max(1, math.ceil(c * table_scale)) for c in CARDINALITY_SETS[tables]], dtype=np.int64)
        if max_cardinality is not None:
            cards = np.minimum(cards, int(max_cardinality))
        self.cardinalities = cards
        self.zipf_exponent = float(zipf_exponent)
        self.id_weight_scale = float(id_weight_scale)
        hidden = np.random.default_rng([self.seed, 0x5EED])
        self._dense_weights = hidden.normal(0.0, 0.3, NUM_DENSE)
        self._dense_scale = hidden.uniform(0.5, 3.0, NUM_DENSE)  # mean log-count per column
        self._bias = -1.6  # about Criteo's click rate (~0.25) once the id weights spread the logits

    def id_weights(self, ranks: np.ndarray) -> np.ndarray:
        """Hidden weight of each categorical value, ranks uint64 [B, 26] -> float64 [B, 26]."""
        col = np.arange(NUM_SPARSE, dtype=np.uint64)
        h = fmix64(ranks.astype(np.uint64) ^ fmix64(col + np.uint64(self.seed) * np.uint64(NUM_SPARSE + 1)))
        u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))  # uniform [0, 1)
        # Uniform with the requested standard deviation; only the 8 most informative columns carry signal,
        # as in real logs where a few features dominate.
        w = (u - 0.5) * (self.id_weight_scale * np.sqrt(12.0))
        w[:, 8:] *= 0.25
        return w

    def key_chunks(self, chunk_rows: int) -> Iterator[np.ndarray]:
        """Every key the data can draw (each column's ranks below its cardinality, the key of ``batch``'s
        ``sparse``), column by column in rank order, in int64 chunks of at most ``chunk_rows``: the rows a
        preload creates (``xdl-ec train --synthetic-preload``)."""
        chunk_rows = checks.integer("chunk_rows", chunk_rows, 1)
        for column, cardinality in enumerate(self.cardinalities.tolist()):
            for start in range(0, cardinality, chunk_rows):
                stop = min(start + chunk_rows, cardinality)
                yield column_keys(column, np.arange(start, stop, dtype=np.uint64))

    def batch(self, index: int, batch_size: int, split: str = "train") -> Batch:
        """Batch number ``index`` of a split (deterministic in seed, split, batch_size and index)."""
        return self._draw(index, batch_size, split)[0]

    def hidden_logits(self, index: int, batch_size: int, split: str = "train") -> np.ndarray:
        """The hidden model's logits float64 [B] behind the labels of ``batch(index, batch_size, split)``."""
        return self._draw(index, batch_size, split)[1]

    def _draw(self, index: int, batch_size: int, split: str) -> tuple[Batch, np.ndarray]:
        if split not in _SPLITS:
            raise ValueError(f"split: must be 'train' or 'eval', got {split!r}")
        batch_size = checks.integer("batch_size", batch_size, 1)
        index = checks.integer("index", index, 0)
        rng = np.random.default_rng([self.seed, _SPLITS[split], int(batch_size), int(index)])
        ranks = _bounded_zipf(rng.random((batch_size, NUM_SPARSE)), self.cardinalities[None, :], self.zipf_exponent)
        # Counts: geometric around each column's scale; I2 may go negative, and ~10% of values are missing (0).
        raw = np.floor(rng.exponential(np.expm1(self._dense_scale), (batch_size, NUM_DENSE)))
        raw[:, 1] -= 2.0
        raw[rng.random((batch_size, NUM_DENSE)) < 0.1] = 0.0
        dense = dense_transform(raw)
        centred = dense - self._dense_scale.astype(np.float32)
        logit = self._bias + self.id_weights(ranks).sum(axis=1) + centred @ self._dense_weights
        label = (rng.random(batch_size) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
        return Batch(dense=dense, sparse=categorical_keys(ranks), label=label), logit

    def batches(self, batch_size: int, num_batches: int, split: str = "train") -> Iterator[Batch]:
        """``num_batches`` consecutive batches of a split."""
        num_batches = checks.integer("num_batches", num_batches, 0)
        for i in range(int(num_batches)):
            yield self.batch(i, batch_size, split)

    def dataset(self, batch_size: int, num_batches: int, split: str = "train") -> "tf.data.Dataset":
        """The same batches as a ``tf.data.Dataset`` of (dense, sparse, label)."""
        import tensorflow as tf

        self.batch(0, batch_size, split)  # validate arguments eagerly
        return tf.data.Dataset.from_generator(
            lambda: (tuple(b) for b in self.batches(batch_size, num_batches, split)),
            output_signature=tf_signature(),
        )
