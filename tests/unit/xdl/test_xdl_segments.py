"""XDL's segments in the port: xdl_ec.xdl.SparseTensor(ids, values, segments) (or a (values, row_splits) pair) with
one segment per example is a variable-length feature; with k segments per example of n ids each (XDL's per-id
segments of a padded history: n = 1) a fixed-width feature whose rows the model combines per segment, so
xdl_ec.xdl.embedding returns [B * k, dim] as in XDL. Checked against numpy, against the same model written with
fixed ids, and bad segments are refused naming the batch and entry."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import xdl_ec.xdl as xdl  # noqa: E402 - the spelling of a ported script
from xdl_ec.model.feature_batch import InputError  # noqa: E402
from xdl_ec.sparse import init  # noqa: E402
from xdl_ec.xdl import api  # noqa: E402
from xdl_ec.xdl.xdl_model import XdlPortError  # noqa: E402

B, T, DIM = 4, 3, 2


def history(index: int, per: int = 1) -> np.ndarray:
    return np.random.default_rng([index, 7]).integers(0, 30, (B, T, per)).astype(np.int64)


def segments_of(ids: np.ndarray) -> xdl.SparseTensor:
    """XDL's form of ids [B, T, n]: flat, one segment per (example, position) of n ids."""
    per = ids.shape[2]
    return xdl.SparseTensor(
        ids.reshape(-1), np.ones(ids.size, np.float32), np.arange(per, ids.size + 1, per, dtype=np.int32)
    )


def batch(index: int, form: str = "segments", per: int = 1) -> dict:
    rng = np.random.default_rng(index)
    ids = history(index, per)
    if form == "segments":
        hist = segments_of(ids)
    elif form == "row_splits":
        hist = (ids.reshape(-1), np.arange(0, ids.size + 1, per, dtype=np.int64))
    else:
        hist = ids.reshape(B, T * per)
    return {
        "label": rng.integers(0, 2, B).astype(np.float32),
        "hist": hist,
        "deep": rng.normal(size=(B, 3)).astype(np.float32),
    }


def reader_of(form: str, per: int = 1):  # noqa: ANN201
    return lambda worker, num_workers: (batch(i, form, per) for i in range(worker, 6, num_workers))


SEEN: list = []


def history_model(combiner: str, fixed: bool = False):  # noqa: ANN201
    """XDL's model of a history: one row per segment, reshaped to [B, T, dim]; ``fixed``: the same model over
    ids [B, T * n] looked up without a combiner and combined here."""

    def model(b):  # noqa: ANN001, ANN202
        if fixed:
            rows = xdl.embedding("items", b["hist"], xdl.TruncatedNormal(stddev=0.5), DIM, 30, combiner=None)
            per = rows.shape[1] // T
            rows = tf.reshape(rows, (-1, per, DIM))
            rows = {
                "sum": tf.reduce_sum(rows, 1),
                "mean": tf.reduce_mean(rows, 1),
                "sqrtn": tf.reduce_sum(rows, 1) / np.sqrt(per),
            }[combiner]
        else:
            rows = xdl.embedding("items", b["hist"], xdl.TruncatedNormal(stddev=0.5), DIM, 30, combiner=combiner)
        SEEN.append(rows)
        seq = tf.reshape(rows, [-1, T, DIM])  # XDL's reshape of per-id rows by the history's shape
        x = tf.concat([tf.reshape(seq, [-1, T * DIM]), b["deep"]], 1)
        return xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(x, 1))

    return model


@pytest.mark.parametrize("per,combiner", [(1, "sum"), (2, "sum"), (3, "mean"), (2, "sqrtn")])
def test_segments_per_position_are_a_fixed_feature_combined_per_segment_as_numpy_does(per: int, combiner: str) -> None:
    job = xdl.xdl_job(history_model(combiner), reader_of("segments", per), xdl.SGD(0.1))
    [feature] = job.features
    assert (feature.name, feature.combiner) == ("hist", None)  # one row per id; the model combines them
    first = next(iter(job.spec.input_fn(0, 1)))
    np.testing.assert_array_equal(first["hist"], history(0, per).reshape(B, T * per))
    model = job.spec.model_fn()
    rows = np.random.default_rng(3).normal(size=(B, T * per, DIM)).astype(np.float32)
    SEEN.clear()
    model({"hist": tf.constant(rows)}, tf.zeros((B, 3)))
    grouped = rows.reshape(B * T, per, DIM)
    expected = {"sum": grouped.sum(1), "mean": grouped.mean(1), "sqrtn": grouped.sum(1) / np.sqrt(per)}[combiner]
    assert SEEN[-1].shape == (B * T, DIM)
    np.testing.assert_allclose(SEEN[-1].numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("per,combiner", [(1, "sum"), (2, "mean")])
def test_a_job_on_segments_trains_the_model_written_on_fixed_ids(per: int, combiner: str) -> None:
    reports = [
        xdl.xdl_job(history_model(combiner, fixed), reader_of(form, per), xdl.SGD(0.5)).fit(deterministic=True, seed=2)
        for form, fixed in (("segments", False), ("row_splits", False), ("fixed", True))
    ]
    assert reports[0]["steps"] == 6
    assert reports[0]["model_digest"] == reports[1]["model_digest"] == reports[2]["model_digest"]


def test_one_segment_per_example_is_a_variable_length_feature() -> None:
    def pooled(b):  # noqa: ANN001, ANN202
        rows = xdl.embedding("items", b["hist"], xdl.Zeros(), DIM, 30, combiner="mean")
        return xdl.losses.sigmoid_cross_entropy(b["label"], xdl.layers.dense(tf.concat([rows, b["deep"]], 1), 1))

    def per_example(form: str):  # noqa: ANN202
        def read(worker: int, num_workers: int):  # noqa: ANN202
            for i in range(worker, 4, num_workers):
                b = batch(i)
                ids = history(i).reshape(-1)[: 2 * B + 1]  # 3, 3, 2 and 1 ids per example
                ends = np.array([3, 6, 8, 9])
                b["hist"] = (
                    xdl.SparseTensor(ids, None, ends) if form == "segments" else (ids, np.concatenate([[0], ends]))
                )
                yield b

        return read

    job = xdl.xdl_job(pooled, per_example("segments"), xdl.SGD(0.5))
    assert job.features[0].combiner == "mean"
    ids, splits = next(iter(job.spec.input_fn(0, 1)))["hist"]
    np.testing.assert_array_equal(splits, [0, 3, 6, 8, 9])
    report = job.fit(deterministic=True, seed=2)
    assert (
        report["model_digest"]
        == xdl.xdl_job(pooled, per_example("pair"), xdl.SGD(0.5)).fit(deterministic=True, seed=2)["model_digest"]
    )


def test_in_process_embedding_of_segments_is_one_combined_row_per_segment() -> None:
    api.clear_tables()
    try:
        ids = np.array([5, 1, 1, 7, 2, 5], np.int64)
        out = xdl.embedding(
            "seg", xdl.SparseTensor(ids, None, np.array([1, 3, 3, 6], np.int32)), init.RandomUniform(-1.0, 1.0), DIM, 10
        )
        rows = api.get_table("seg").pull(ids)
        np.testing.assert_allclose(
            out.numpy(), [rows[0], rows[1] + rows[2], np.zeros(DIM), rows[3] + rows[4] + rows[5]], rtol=1e-6
        )
    finally:
        api.clear_tables()


def _with(hist: object) -> dict:
    b = batch(0)
    b["hist"] = hist
    return b


PER_ID = np.arange(1, B * T + 1, dtype=np.int32)
IDS = history(0).reshape(-1)


@pytest.mark.parametrize(
    "hist,message",
    [
        (
            xdl.SparseTensor(IDS, None, PER_ID - 1),
            r"batch\['hist'\]: SparseTensor segments must be the running end of each segment's ids, non-decreasing "
            r"up to "
            r"the ids' count 12; got 12 segments ending at 11",
        ),
        (xdl.SparseTensor(IDS, None, PER_ID[::-1].copy()), r"segments ending at 1 and decreasing"),
        (
            xdl.SparseTensor(IDS, np.full(B * T, 2.0, np.float32), PER_ID),
            r"values must be None or ones \[12\] \(one per id\): .* weighted ids are not supported",
        ),
        (xdl.SparseTensor(IDS.astype(np.float32), None, PER_ID), r"ids must be a 1-D integer array \(int64\)"),
        (
            xdl.SparseTensor(IDS[:10], None, PER_ID[:10]),
            r"10 segments for 4 examples \(the label's length\): XDL's segments map onto the job as one per example, "
            r"or k "
            r"per example",
        ),
        (
            xdl.SparseTensor(IDS, None, np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 12])),
            r"12 segments for 4 examples .* of the same number of ids each \(got lengths \[0, 1, 2\]\)",
        ),
        ((IDS, np.arange(0, B * T + 1, 5)), r"up to the ids' count 12; got 2 segments ending at 10"),
    ],
)
def test_bad_segments_on_the_first_batch_are_refused_when_the_job_is_made(hist: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        xdl.xdl_job(history_model("sum"), lambda w, n: iter([_with(hist)]), xdl.SGD(0.1))


@pytest.mark.parametrize(
    "hist,message",
    [
        (
            xdl.SparseTensor(IDS, None, PER_ID - 1),
            r"reader\(0, 1\) batch 2: batch\['hist'\]: SparseTensor segments must be "
            r"the running end",
        ),
        (
            segments_of(np.zeros((B, T + 1, 1), np.int64)),
            r"reader\(0, 1\) batch 2: batch\['hist'\]: 4 segments per example of 1 ids each, the first batch had 3 "
            r"of 1 \(the "
            r"model was traced on it\): pad the reader's histories to that length",
        ),
        (
            segments_of(np.zeros((B, T, 2), np.int64)),
            r"3 segments per example of 2 ids each, the first batch had 3 of 1",
        ),
    ],
)
def test_bad_segments_in_a_later_batch_name_the_batch(hist: object, message: str) -> None:
    def read(worker: int, num_workers: int):  # noqa: ANN202
        yield batch(0)
        yield _with(hist)

    job = xdl.xdl_job(history_model("sum"), read, xdl.SGD(0.1))
    with pytest.raises(InputError, match=message):
        list(job.spec.input_fn(0, 1))


def test_segments_need_a_combiner() -> None:
    with pytest.raises(
        XdlPortError,
        match=r"batch\['hist'\] has variable-length ids or segments, which need a "
        r"combiner",
    ):
        xdl.xdl_job(
            lambda b: xdl.losses.sigmoid_cross_entropy(
                b["label"],
                xdl.layers.dense(
                    tf.reshape(xdl.embedding("items", b["hist"], "zeros", DIM, 30, combiner=None), (-1, T * DIM)), 1
                ),
            ),
            reader_of("segments"),
            xdl.SGD(0.1),
        )
