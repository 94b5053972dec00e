"""FeatureBatch: a batch checked against the job's features, reduced to per-table unique keys and per-feature
positions; every contract break is an InputError naming the feature, the worker and the step."""

from __future__ import annotations

import numpy as np
import pytest

import xdl_ec
from xdl_ec.model.feature_batch import FeatureBatch, InputError

USERS = xdl_ec.Table("users", 4)
TAGS = xdl_ec.Table("tags", 2)
FEATURES = [
    xdl_ec.Feature("user", USERS),
    xdl_ec.Feature("friend", USERS),
    xdl_ec.Feature("tags", TAGS, combiner="mean"),
    xdl_ec.Feature("recent", TAGS, shared_ids=True),
]
WHERE = "worker 1, step 7"


def batch(**changes) -> dict:
    b = {
        "label": np.array([1, 0, 1], np.float32),
        "dense": np.ones((3, 2), np.float32),
        "user": np.array([5, 6, 5]),
        "friend": np.array([6, 9, 9]),
        "tags": (np.array([1, 2, 2, 3]), np.array([0, 2, 2, 4])),
        "recent": np.array([[1, 2], [3, 1], [2, 2]]),
    }
    b.update(changes)
    return {k: v for k, v in b.items() if v is not None}


def test_keys_are_unique_per_table_and_positions_rebuild_every_id() -> None:
    fb = FeatureBatch.prepare(batch(), FEATURES, WHERE)
    assert len(fb) == 3 and fb.dense.shape == (3, 2)
    assert sorted(fb.keys) == ["tags", "users"]
    users = fb.keys["users"]
    assert users.size == np.unique(users).size and np.all(np.diff(users) > 0)
    for name, ids in (("user", [5, 6, 5]), ("friend", [6, 9, 9])):
        feature = next(f for f in FEATURES if f.name == name)
        np.testing.assert_array_equal(users[fb.ids[name].inverse[:, 0]], feature.keys(np.array(ids)))
    # salted: the same id in two features is two rows; id 6 of "user" is not id 6 of "friend"
    assert users.size == 4
    assert (fb.ids["tags"].kind, fb.ids["recent"].kind, fb.ids["user"].kind) == ("ragged", "fixed", "single")
    np.testing.assert_array_equal(fb.ids["tags"].row_splits, [0, 2, 2, 4])
    # shared_ids: the ids are the keys
    np.testing.assert_array_equal(fb.keys["tags"][fb.ids["recent"].inverse], [[1, 2], [3, 1], [2, 2]])
    assert fb.signature() == (
        2,
        (("friend", "single", 1), ("recent", "fixed", 2), ("tags", "ragged", 0), ("user", "single", 1)),
    )


def test_a_tf_ragged_tensor_is_read_like_the_pair() -> None:
    tf = pytest.importorskip("tensorflow")
    ragged = tf.RaggedTensor.from_row_splits(tf.constant([1, 2, 2, 3], tf.int64), tf.constant([0, 2, 2, 4], tf.int64))
    a = FeatureBatch.prepare(batch(tags=ragged), FEATURES, WHERE)
    b = FeatureBatch.prepare(batch(), FEATURES, WHERE)
    np.testing.assert_array_equal(a.ids["tags"].inverse, b.ids["tags"].inverse)
    np.testing.assert_array_equal(a.keys["tags"], b.keys["tags"])


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"friend": None}, r"worker 1, step 7: the batch lacks declared feature\(s\) \['friend'\]"),
        ({"age": np.array([1, 2, 3])}, r"worker 1, step 7: the batch carries undeclared entries \['age'\]"),
        (
            {"user": np.array([1.0, 2.0, 3.0])},
            r"worker 1, step 7: feature 'user': ids must be integers \(int64\), got "
            r"dtype float64",
        ),
        ({"tags": (np.array([1, 2, 3]), np.array([0, 2, 2, 4]))}, r"feature 'tags': row_splits do not match"),
        (
            {"tags": (np.array([1, 2]), np.array([0, 1, 2]))},
            r"feature 'tags': row_splits do not match: need B \+ 1 = 4",
        ),
        ({"user": np.array([1, 2])}, r"feature 'user': ids must be \[B\], \[B, n\] or \[B, T, n\] with B = 3"),
        ({"label": None}, r"lacks 'label'"),
        ({"dense": np.ones((2, 2))}, r"'dense' must be a float array \[B, D\] with B = 3"),
    ],
)
def test_contract_breaks_are_named(changes: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        FeatureBatch.prepare(batch(**changes), FEATURES, WHERE)


def test_variable_length_ids_need_a_combiner_and_batches_must_be_dicts() -> None:
    plain = [xdl_ec.Feature("tags", TAGS)]
    with pytest.raises(InputError, match="feature 'tags': variable-length ids need a combiner"):
        FeatureBatch.prepare({"label": np.ones(3), "tags": (np.array([1]), np.array([0, 1, 1, 1]))}, plain, WHERE)
    with pytest.raises(InputError, match="a batch must be a dict"):
        FeatureBatch.prepare([1, 2, 3], plain, WHERE)


def test_feature_and_table_settings_are_checked_once() -> None:
    with pytest.raises(ValueError, match="combiner: must be one of"):
        xdl_ec.Feature("x", USERS, combiner="max")
    with pytest.raises(ValueError, match="reserved"):
        xdl_ec.Feature("label", USERS)
    with pytest.raises(TypeError, match="table: expected a Table"):
        xdl_ec.Feature("x", "users")
    with pytest.raises(ValueError, match="table 'u': dim: must be an int in"):
        xdl_ec.Table("u", 0)
    with pytest.raises(ValueError, match="table .u.: optimizer: unknown name .adamw."):
        xdl_ec.Table("u", 4, optimizer="adamw")


def test_the_native_unique_is_numpys_unique() -> None:
    """A batch's unique keys come from ``_core.sorted_unique`` (a radix sort): the same arrays as
    ``numpy.unique(keys, return_inverse=True)``, for both signs, the extremes, repeats and every size around the
    switch to the radix sort; another dtype or rank is a clear error."""
    from xdl_ec import _core

    rng = np.random.default_rng(5)
    extremes = np.array([np.iinfo(np.int64).min, -1, 0, 1, np.iinfo(np.int64).max], dtype=np.int64)
    for n in (0, 1, 2, 255, 256, 257, 5000, 53248):
        hashed = (rng.zipf(1.1, n).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
        for keys in (hashed, rng.choice(extremes, n), rng.integers(-50, 50, n)):
            unique, inverse = _core.sorted_unique(keys)
            expected_unique, expected_inverse = np.unique(keys, return_inverse=True)
            assert inverse.dtype == np.int32 and unique.dtype == np.int64
            np.testing.assert_array_equal(unique, expected_unique)
            np.testing.assert_array_equal(inverse, expected_inverse.reshape(-1))
    unique, inverse = _core.sorted_unique(np.array([3, -2, 3], dtype=np.int32))  # int32 ids widen
    assert unique.tolist() == [-2, 3] and inverse.tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match="int64 .*got dtype float64"):
        _core.sorted_unique(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="1-D, got 2 dimensions"):
        _core.sorted_unique(np.zeros((2, 2), dtype=np.int64))
