"""Serving export: a trained job as a SavedModel that a process with TensorFlow alone (xdl_ec never imported, its op
library never loaded) loads and runs to the same probabilities as ``TrainedModel.predict``, for every feature kind
(single, fixed multi-hot with and without a combiner, variable-length), salted and shared ids, with and without
dense input, and ids the tables never saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402
from support.serving import PLAIN_TF  # noqa: E402
from xdl_ec.job.serving_export import ExportError, export_saved_model, tf_keys  # noqa: E402

example = load_example("user_item_tags")
LOG = example.ClickLog(batch_size=64, batches=6, eval_batches=2)
INT64 = np.iinfo(np.int64)
UNSEEN = np.array([10**12, -1, -(10**15), INT64.min, INT64.max, 2**40 + 7], np.int64)

# A second job covering what user_item_tags does not: fixed multi-hot ids with no combiner (rows kept per id), with
# "sqrtn" and "mean", a "sum" over variable-length ids with empty rows, shared ids (a history looked up in the item
# table's rows), and no dense input.
ITEMS, GENRES, WORDS, HISTORY = 50, 12, 30, 3


def kinds_batch(rng: np.random.Generator, size: int) -> Dict[str, Any]:
    counts = rng.integers(0, 4, size)  # 0: an example without words pools to zeros
    splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    item = rng.integers(0, ITEMS, size)
    history = rng.integers(0, ITEMS, (size, HISTORY))
    return {
        "label": (item % 3 == 0).astype(np.float32),
        "item": item,
        "history": history,
        "genres": rng.integers(0, GENRES, (size, 2)),
        "slots": rng.integers(0, GENRES, (size, 3)),
        "words": (rng.integers(0, WORDS, int(splits[-1])), splits),
    }


def kinds_input(worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
    rng = np.random.default_rng(worker)
    return (kinds_batch(rng, 32) for _ in range(5))


def kinds_model() -> Any:
    class KindsModel(tf.keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.history = tf.keras.layers.Dense(4, activation="tanh", name="history")
            self.out = tf.keras.layers.Dense(1, name="logit")

        def call(self, embedded, dense, training=False):  # noqa: ANN001, ANN201 - the job API's call
            history = self.history(tf.reshape(embedded["history"], [-1, HISTORY * 8]))
            return self.out(
                tf.concat([embedded["item"], history, embedded["genres"], embedded["slots"], embedded["words"]], axis=1)
            )

    return KindsModel()


def concat_model() -> Any:
    class Concat(tf.keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.out = tf.keras.layers.Dense(1)

        def call(self, embedded, dense, training=False):  # noqa: ANN001, ANN201
            return self.out(tf.concat([embedded[k] for k in sorted(embedded)], axis=1))

    return Concat()


def kinds_job() -> xdl_ec.Job:
    items = xdl_ec.Table("items", dim=8, optimizer=xdl_ec.optim.Adagrad(0.1), seed=1)
    genres = xdl_ec.Table("genre words", dim=4, optimizer=xdl_ec.optim.Adam(0.01), seed=2)
    features = [
        xdl_ec.Feature("item", items, shared_ids=True),
        xdl_ec.Feature("history", items, shared_ids=True),
        xdl_ec.Feature("genres", genres, combiner="sqrtn"),
        xdl_ec.Feature("slots", genres, combiner="mean"),
        xdl_ec.Feature("words", genres, combiner="sum"),
    ]
    return xdl_ec.Job(
        tables=[items, genres], features=features, model_fn=kinds_model, input_fn=kinds_input, dense_learning_rate=0.01
    )


def serving_inputs(batch: Dict[str, Any]) -> Dict[str, np.ndarray]:
    """A job's dict batch as the signature's inputs: no label; (values, row_splits) as <name>_values/_row_splits."""
    inputs = {}
    for name, value in batch.items():
        if name == "label":
            continue
        if isinstance(value, tuple):
            inputs[f"{name}_values"], inputs[f"{name}_row_splits"] = (np.asarray(v, np.int64) for v in value)
        else:
            inputs[name] = np.asarray(value, np.float32 if name == "dense" else np.int64)
    return inputs


def uit_batches() -> List[Dict[str, Any]]:
    seen = next(iter(LOG.holdout()))
    n = len(seen["label"])
    unseen = dict(
        seen,
        user=np.resize(UNSEEN, n),
        item=np.resize(UNSEEN[::-1], n),
        tags=(np.resize(UNSEEN, seen["tags"][0].size), seen["tags"][1]),
    )
    # half seen, half unseen ids, and a batch of one example without tags
    mixed = dict(seen, user=np.where(np.arange(n) % 2 == 0, seen["user"], 10**13 + np.arange(n)))
    one = {
        "label": np.zeros(1, np.float32),
        "dense": seen["dense"][:1],
        "user": seen["user"][:1],
        "item": seen["item"][:1],
        "tags": (np.zeros(0, np.int64), np.zeros(2, np.int64)),
    }
    return [seen, unseen, mixed, one]


def kinds_batches() -> List[Dict[str, Any]]:
    seen = kinds_batch(np.random.default_rng(0), 32)  # the first training batch of worker 0
    other = kinds_batch(np.random.default_rng(99), 16)
    unseen = dict(
        other,
        item=np.resize(UNSEEN, 16),
        history=np.resize(UNSEEN, (16, HISTORY)),
        genres=np.resize(UNSEEN[::-1], (16, 2)),
    )
    return [seen, other, unseen]


@pytest.fixture(scope="module")
def trained() -> Dict[str, xdl_ec.Job]:
    jobs = {"user_item_tags": example.make_job(LOG), "kinds": kinds_job()}
    for j in jobs.values():
        j.fit(deterministic=True, seed=3)
    return jobs


@pytest.fixture(scope="module")
def exported(trained: Dict[str, xdl_ec.Job], tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("serving")
    return {name: export_saved_model(j.model, root / name / "model") for name, j in trained.items()}


BATCHES = {"user_item_tags": uit_batches, "kinds": kinds_batches}

# Run by a fresh interpreter: TensorFlow only (PLAIN_TF); the op library's absence is read from the process' maps.
SERVE = PLAIN_TF + textwrap.dedent("""

    for model_dir, batches_file, out_file in zip(*[iter(sys.argv[1:])] * 3):
        serve = tf.saved_model.load(model_dir).signatures["serving_default"]
        with np.load(batches_file) as batches:
            count = len({k.split("/")[0] for k in batches.files})
            inputs = [{k.split("/", 1)[1]: tf.constant(batches[k]) for k in batches.files if k.startswith(f"{b}/")}
                      for b in range(count)]
        np.savez(out_file, *[serve(**x)["probability"].numpy() for x in inputs])
    assert "xdl_ec" not in sys.modules, "xdl_ec was imported"
    with open("/proc/self/maps") as maps:
        assert "_tf_ops" not in maps.read(), "xdl_ec's op library was loaded"
    print("served without xdl_ec")
""")


def test_the_saved_model_serves_predict_in_a_process_without_xdl_ec(
    trained: Dict[str, xdl_ec.Job], exported: Dict[str, Path], tmp_path: Path
) -> None:
    args, expected = [], {}
    for name, path in exported.items():
        batches = BATCHES[name]()
        expected[name] = [trained[name].predict(b) for b in batches]
        flat = {f"{i}/{k}": v for i, b in enumerate(batches) for k, v in serving_inputs(b).items()}
        np.savez(tmp_path / f"{name}_in.npz", **flat)
        args += [str(path), str(tmp_path / f"{name}_in.npz"), str(tmp_path / f"{name}_out.npz")]
    (tmp_path / "serve.py").write_text(SERVE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # -P: the script's folder is not put on sys.path
    done = subprocess.run(
        [sys.executable, "-P", str(tmp_path / "serve.py"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "served without xdl_ec" in done.stdout
    for name, wanted in expected.items():
        with np.load(tmp_path / f"{name}_out.npz") as got:
            served = [got[f"arr_{i}"] for i in range(len(wanted))]
        for i, (s, p) in enumerate(zip(served, wanted)):
            assert s.shape == p.shape, (name, i)
            np.testing.assert_allclose(s, p, rtol=0, atol=1e-6, err_msg=f"{name} batch {i}")
        # the trained rows matter: seen ids do not all predict what unseen ones do
        assert np.ptp(served[0]) > 1e-3, name


def test_unseen_ids_read_the_zero_row(trained: Dict[str, xdl_ec.Job], exported: Dict[str, Path]) -> None:
    serve = tf.saved_model.load(str(exported["user_item_tags"])).signatures["serving_default"]
    batch = uit_batches()[1]  # every id unseen
    got = serve(**{k: tf.constant(v) for k, v in serving_inputs(batch).items()})["probability"].numpy()
    model = trained["user_item_tags"].model.dense.model
    zeros = {
        "user": np.zeros((64, 16), np.float32),
        "item": np.zeros((64, 16), np.float32),
        "tags": np.zeros((64, 8), np.float32),
    }
    logits = model(zeros, tf.constant(batch["dense"]), training=False).numpy()[:, 0]
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-logits)), rtol=0, atol=1e-6)


def test_only_standard_ops_and_no_optimizer_state_are_saved(
    trained: Dict[str, xdl_ec.Job], exported: Dict[str, Path]
) -> None:
    from tensorflow.core.protobuf import saved_model_pb2

    for name, path in exported.items():
        saved = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
        graph = saved.meta_graphs[0].graph_def
        ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
        assert not [op for op in ops if op.startswith("XdlEc")], ops
        assert {"MutableHashTableV2", "LookupTableFindV2", "LookupTableInsertV2", "LookupTableRemoveV2"} <= ops
        # the checkpoint's floats are the rows (+1 zero row per table) and the dense weights: no optimizer slot (the
        # rest: the hash tables' keys and row numbers, int64, and the delta bookkeeping)
        model = trained[name].model
        rows = sum((len(t) + 1) * t.dim for t in model.tables.tables.values())
        weights = sum(int(np.prod(v.shape)) for v in model.dense.model.weights)
        checkpoint = tf.train.load_checkpoint(str(path / "variables" / "variables"))
        saved_floats = sum(
            int(np.prod(shape))
            for key, shape in checkpoint.get_variable_to_shape_map().items()
            if checkpoint.get_variable_to_dtype_map()[key] == tf.float32
        )
        assert saved_floats == rows + weights, name
        described = json.loads((path / "assets.extra" / "serving.json").read_text())
        assert described["outputs"] == {"probability": "float32 [B]"}
    described = json.loads((exported["kinds"] / "assets.extra" / "serving.json").read_text())
    assert described["inputs"] == {
        "item": "int64 [B]",
        "history": "int64 [B, 3]",
        "genres": "int64 [B, 2]",
        "slots": "int64 [B, 3]",
        "words_values": "int64 [nnz]",
        "words_row_splits": "int64 [B + 1]",
    }


def test_a_table_without_rows_serves_zero_rows(trained: Dict[str, xdl_ec.Job], tmp_path: Path) -> None:
    from xdl_ec.job.local_tables import LocalTables
    from xdl_ec.job.trained_model import TrainedModel

    model = trained["kinds"].model
    tables = LocalTables(model.job.tables)
    items = model.tables.tables["items"].export()
    tables.tables["items"].load(items["keys"], items["values"], items["state"])  # "genre words" stays empty
    partial = TrainedModel(model.job, tables, model.dense, model.signature)
    try:
        serve = tf.saved_model.load(str(export_saved_model(partial, tmp_path / "m"))).signatures["serving_default"]
        for batch in kinds_batches():
            got = serve(**{k: tf.constant(v) for k, v in serving_inputs(batch).items()})["probability"].numpy()
            np.testing.assert_allclose(got, partial.predict(batch), rtol=0, atol=1e-6)
    finally:
        tables.close()


@pytest.mark.parametrize("shared_ids", [False, True])
@pytest.mark.parametrize("name", ["user", "tags", "C14"])
def test_tf_keys_equal_feature_keys_bit_for_bit(name: str, shared_ids: bool) -> None:
    feature = xdl_ec.Feature(name, xdl_ec.Table("t", 4), shared_ids=shared_ids)
    rng = np.random.default_rng(len(name))
    ids = np.concatenate(
        [
            rng.integers(INT64.min, INT64.max, 20_000, dtype=np.int64, endpoint=True),
            np.array(
                [
                    0,
                    1,
                    -1,
                    2,
                    -2,
                    INT64.min,
                    INT64.max,
                    INT64.min + 1,
                    INT64.max - 1,
                    feature.salt - (1 << 64) if feature.salt >= 1 << 63 else feature.salt,
                ],
                np.int64,
            ),
        ]
    )
    expected = feature.keys(ids)
    eager = tf_keys(feature, tf.constant(ids)).numpy()
    graph = tf.function(lambda x: tf_keys(feature, x), input_signature=[tf.TensorSpec([None], tf.int64)])(
        tf.constant(ids)
    ).numpy()
    assert eager.dtype == graph.dtype == np.int64
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(graph, expected)
    # a [B, n] shape is kept
    np.testing.assert_array_equal(
        tf_keys(feature, tf.constant(ids[:20].reshape(4, 5))).numpy(), expected[:20].reshape(4, 5)
    )


def test_bad_serving_input_is_an_error_naming_it(exported: Dict[str, Path]) -> None:
    serve = tf.saved_model.load(str(exported["kinds"])).signatures["serving_default"]
    inputs = {k: tf.constant(v) for k, v in serving_inputs(kinds_batches()[1]).items()}
    with pytest.raises(tf.errors.InvalidArgumentError, match="words_row_splits must be B \\+ 1 non-decreasing"):
        serve(**dict(inputs, words_row_splits=inputs["words_row_splits"] + 1))
    with pytest.raises(tf.errors.InvalidArgumentError, match="input slots holds another number of examples"):
        serve(**dict(inputs, slots=inputs["slots"][1:]))


def test_an_untrained_job_or_a_used_directory_is_refused(trained: Dict[str, xdl_ec.Job], tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="needs a trained model .* got NoneType; train the job first"):
        export_saved_model(kinds_job().model, tmp_path / "never")
    assert not (tmp_path / "never").exists()
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match=f"{used} exists and is not empty"):
        export_saved_model(trained["kinds"].model, used)
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    with pytest.raises(ExportError, match="exists and is not a directory"):
        export_saved_model(trained["kinds"].model, a_file)
    assert [p.name for p in used.iterdir()] == ["keep.txt"] and a_file.read_text() == "mine"
    # a feature whose name a signature input cannot carry
    table = xdl_ec.Table("t", 2)
    named = xdl_ec.Job(
        tables=[table],
        features=[xdl_ec.Feature("user-id", table)],
        model_fn=concat_model,
        input_fn=lambda w, n: ({"label": np.ones(4, np.float32), "user-id": np.arange(4)},),
    )
    named.fit(deterministic=True)
    with pytest.raises(ExportError, match="feature 'user-id' gives the input name 'user-id'.*rename the feature"):
        export_saved_model(named.model, tmp_path / "named")
    named.model.close()
    # an empty directory is taken; nothing of the staging is left beside it
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_saved_model(trained["kinds"].model, empty) == empty
    assert (empty / "saved_model.pb").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "empty", "used"]
