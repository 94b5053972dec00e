"""XDL's DIN ported by renames (examples/xdl_din.py: per-id segments of the history, batch normalization, Dice
slopes by tf.compat.v1.get_variable, a test graph by tf_wrapper(is_training=False)) trains as a job: in one
process and on three erasure-coded servers with one killed, to the same model; from `xdl-ec train --script`; it
learns the planted signal; and the SavedModel serves what the trained model predicts, on the test graph."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import EXAMPLES, load_example  # noqa: E402
from support.ray_session import ray_session  # noqa: E402
from xdl_ec.cli import main  # noqa: E402

tf = pytest.importorskip("tensorflow")

example = load_example("xdl_din")
LOG = example.SyntheticLog(batch_size=32, batches=12, eval_batches=2)
_RUNS: dict = {}


def run(cluster: "xdl_ec.Cluster | None" = None) -> dict:
    key = repr(cluster)
    if key not in _RUNS:
        job = example.make_job(LOG)
        _RUNS[key] = (job.fit(cluster=cluster, deterministic=True, seed=3), job)
    return _RUNS[key][0]


def test_the_ported_din_is_the_job_the_trace_finds() -> None:
    job = example.make_job(LOG)
    assert [(t.name, t.dim) for t in job.tables] == [("uid_embedding", 8), ("mid_embedding", 8), ("cat_embedding", 8)]
    # the history's per-id segments: one row per id, T of them per example
    assert [(f.name, f.table.name, f.combiner) for f in job.features] == [
        ("uid", "uid_embedding", "sum"),
        ("mid", "mid_embedding", "sum"),
        ("cat", "cat_embedding", "sum"),
        ("mid_his", "mid_embedding", None),
        ("cat_his", "cat_embedding", None),
    ]
    model = job.spec.model_fn()
    paths = [v.path for v in model.weights]
    assert sorted(p for p in paths if "alpha" in p) == [
        "xdl_model/tf_model__dice_1__alphadice_1",
        "xdl_model/tf_model__dice_2__alphadice_2",
    ]
    assert [v.path for v in model.non_trainable_weights] == ["bn1/moving_mean", "bn1/moving_variance"]


def test_a_killed_server_under_ec_ends_at_the_one_process_model() -> None:
    here = run()
    killed = run(xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), fail_at=["6:1"]))
    assert [(f["role"], f["index"]) for f in killed["failures"]] == [("server", 1)]
    assert killed["model_digest"] == here["model_digest"] and killed["auc"] == here["auc"]
    assert here["steps"] == 12 and here["eval_samples"] == 2 * 32


def test_training_moves_the_statistics_and_evaluation_reads_them() -> None:
    run()
    job = _RUNS[repr(None)][1]
    model = job.model.dense.model
    [bn] = [layer for layer in model.made_layers if isinstance(layer, tf.keras.layers.BatchNormalization)]
    assert not np.allclose(bn.moving_mean.numpy(), 0.0) and not np.allclose(bn.moving_variance.numpy(), 1.0)
    embedded = {
        name: tf.random.stateless_normal((8, *shape), (1, 2))
        for name, shape in (("uid", (8,)), ("mid", (8,)), ("cat", (8,)), ("mid_his", (6, 8)), ("cat_his", (6, 8)))
    }
    mask = tf.ones((8, 6))
    # training: bn1 on the batch's statistics (and Dice, as XDL's, on the batch's always); evaluation: bn1 on the
    # moving ones, which the call leaves as they are
    moving = [bn.moving_mean.numpy(), bn.moving_variance.numpy()]
    inference = model(embedded, mask).numpy()
    np.testing.assert_array_equal(bn.moving_mean.numpy(), moving[0])
    assert not np.allclose(model(embedded, mask, training=True).numpy(), inference, atol=1e-3)
    assert not np.allclose(bn.moving_mean.numpy(), moving[0])
    bn.moving_mean.assign(moving[0])  # the trained model as it was, for the tests after this one
    bn.moving_variance.assign(moving[1])


def test_the_saved_model_serves_the_predictions(tmp_path: Path) -> None:
    run()
    job = _RUNS[repr(None)][1]
    batch = next(iter(job.spec.input_fn(0, 1)))
    serve = tf.saved_model.load(job.model.export(str(tmp_path / "served"))).signatures["serving_default"]
    inputs = {k: tf.constant(v) for k, v in batch.items() if k != "label"}
    np.testing.assert_allclose(serve(**inputs)["probability"].numpy(), job.model.predict(batch), rtol=1e-5, atol=1e-6)


def test_the_ported_din_learns() -> None:
    report = example.make_job(example.SyntheticLog(batches=150, eval_batches=8)).fit(deterministic=True, seed=3)
    assert report["auc"] > 0.68


def test_xdl_ec_train_runs_the_ported_din(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    assert (
        main(
            [
                "train",
                "--script",
                str(EXAMPLES / "xdl_din.py"),
                "--steps",
                "4",
                "--deterministic",
                "--seed",
                "3",
                "--servers",
                "3",
                "--no-progress",
                "--report",
                str(path),
            ]
        )
        == 0
    )
    cli = json.loads(path.read_text())
    here = example.make_job().fit(steps=4, deterministic=True, seed=3)
    assert cli["steps"] == 4 and cli["model_digest"] == here["model_digest"] and cli["auc"] == here["auc"]


# slow (not in CI's 20 minutes): the local backend's test of the same rebuild runs in CI, and Ray's transport
# under a kill is test_ft_ec's and test_memory_budget_ray's
@pytest.mark.slow
@pytest.mark.ray
def test_the_ported_din_on_ray_with_ec_and_a_killed_server_ends_at_the_one_process_model() -> None:
    """On Ray actors: the script's module (its SparseTensor batches, its is_training=False wrapper) travels with the
    job."""
    pytest.importorskip("ray")
    with ray_session():
        report = example.make_job(LOG).fit(
            cluster=xdl_ec.Cluster(servers=3, backend="ray", ft="ec", code=(2, 1), fail_at=["6:1"]),
            deterministic=True,
            seed=3,
        )
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 1)]
    assert report["model_digest"] == run()["model_digest"]
