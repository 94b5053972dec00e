"""The synthetic Criteo-shaped generator: format, determinism, skew and a learnable hidden model."""

from __future__ import annotations

import numpy as np
import pytest

from xdl_ec.data import CRITEO_KAGGLE_CARDINALITIES, SyntheticCriteo
from xdl_ec.data.schema import categorical_keys
from xdl_ec.model.metrics import auc


def test_format_and_determinism() -> None:
    a = SyntheticCriteo(seed=3, max_cardinality=1000)
    b = SyntheticCriteo(seed=3, max_cardinality=1000)
    x, y = a.batch(5, 256), b.batch(5, 256)
    assert x.dense.shape == (256, 13) and x.dense.dtype == np.float32
    assert x.sparse.shape == (256, 26) and x.sparse.dtype == np.int64
    assert x.label.shape == (256,) and x.label.dtype == np.float32
    for u, v in zip(x, y):
        np.testing.assert_array_equal(u, v)
    assert np.all(x.dense >= 0)
    assert set(np.unique(x.label)) <= {0.0, 1.0}
    # Another seed, index or split changes the data.
    assert not np.array_equal(x.sparse, SyntheticCriteo(seed=4, max_cardinality=1000).batch(5, 256).sparse)
    assert not np.array_equal(x.sparse, a.batch(6, 256).sparse)
    assert not np.array_equal(x.sparse, a.batch(5, 256, "eval").sparse)
    assert [bt.label.tolist() for bt in a.batches(16, 3)] == [a.batch(i, 16).label.tolist() for i in range(3)]


def test_cardinalities_caps_and_zipf_skew() -> None:
    gen = SyntheticCriteo(seed=0, max_cardinality=5000, zipf_exponent=1.2)
    assert gen.cardinalities.tolist() == [min(c, 5000) for c in CRITEO_KAGGLE_CARDINALITIES]
    sparse = np.concatenate([gen.batch(i, 4096).sparse for i in range(4)])
    for col, card in enumerate(gen.cardinalities):
        assert len(np.unique(sparse[:, col])) <= card
    # Every key is a valid value of its column.
    col = 8  # cardinality 3
    allowed = categorical_keys(np.tile(np.arange(3, dtype=np.uint64)[:, None], (1, 26)))[:, col]
    assert set(np.unique(sparse[:, col])) <= set(allowed.tolist())
    # Zipf: on a 5000-value column the most frequent value is far above uniform's share and the top 1% of
    # values carry a large share of the rows.
    _, counts = np.unique(sparse[:, 2], return_counts=True)
    counts = np.sort(counts)[::-1]
    assert counts[0] / sparse.shape[0] > 0.05
    assert counts[:50].sum() / sparse.shape[0] > 0.4


def test_labels_follow_the_hidden_model() -> None:
    gen = SyntheticCriteo(seed=1, max_cardinality=10000)
    rate = np.mean([gen.batch(i, 2048).label.mean() for i in range(4)])
    assert 0.1 < rate < 0.45
    # The hidden model ranks the labels well (the data carry learnable signal), and its logits are those of
    # the same batch.
    b = gen.batch(2, 8192)
    logits = gen.hidden_logits(2, 8192)
    assert auc(b.label, logits) > 0.7
    assert abs(b.label.mean() - np.mean(1 / (1 + np.exp(-logits)))) < 0.02


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="seed"):
        SyntheticCriteo(seed=-1)
    with pytest.raises(ValueError, match="max_cardinality"):
        SyntheticCriteo(max_cardinality=0)
    with pytest.raises(ValueError, match="zipf_exponent"):
        SyntheticCriteo(zipf_exponent=0.0)
    gen = SyntheticCriteo()
    with pytest.raises(ValueError, match="batch_size"):
        gen.batch(0, 0)
    with pytest.raises(ValueError, match="split"):
        gen.batch(0, 4, "test")
    with pytest.raises(ValueError, match="index"):
        gen.batch(-1, 4)
