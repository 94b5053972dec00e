"""Job: fit in this process (deterministic, its report), predict and evaluate, save, resume and load (TrainedModel),
on a cluster of servers (the same model), and the errors of each when called out of turn."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import xdl_ec
from xdl_ec.keep.saved_run import SaveMismatch


def test_fit_in_this_process_reports_the_run_and_repeats_bit_for_bit(tiny_job: Callable[[], Any]) -> None:
    report = tiny_job().fit(deterministic=True, seed=1)
    assert report["steps"] == 8 and report["samples"] == 8 * 32
    assert np.isfinite(report["final_loss"]) and report["eval_samples"] == 2 * 32 and 0.0 <= report["auc"] <= 1.0
    assert tiny_job().fit(deterministic=True, seed=1)["model_digest"] == report["model_digest"]
    assert tiny_job().fit(deterministic=True, seed=2)["model_digest"] != report["model_digest"]
    assert tiny_job().fit(steps=3, deterministic=True, seed=1)["steps"] == 3


def test_a_cluster_of_servers_trains_the_same_model(tiny_job: Callable[[], Any]) -> None:
    here = tiny_job().fit(deterministic=True, seed=1)["model_digest"]
    on_servers = tiny_job().fit(cluster=xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1)), deterministic=True, seed=1)
    assert on_servers["model_digest"] == here and len(on_servers["servers"]) == 3


def test_predict_and_evaluate_use_the_last_fit(tiny_job: Callable[[], Any], tiny_batch: Callable[[int], Any]) -> None:
    job = tiny_job()
    for call in (lambda: job.predict(tiny_batch(200)), lambda: job.evaluate([tiny_batch(200)])):
        with pytest.raises(ValueError, match="call fit first"):
            call()
    job.fit(deterministic=True)
    probability = job.predict(tiny_batch(200))
    assert probability.shape == (32,) and np.all((probability > 0) & (probability < 1))
    held_out = job.evaluate([tiny_batch(200), tiny_batch(201)])
    assert held_out["eval_samples"] == 64 and set(held_out) >= {"auc", "logloss"}


def test_save_and_load_give_the_trained_model(
    tiny_job: Callable[[], Any], tiny_batch: Callable[[int], Any], tmp_path: Path
) -> None:
    job = tiny_job()
    with pytest.raises(ValueError, match="no trained model yet: call fit first"):
        job.save(tmp_path / "runs")
    job.fit(deterministic=True)
    saved = Path(job.save(tmp_path / "runs"))
    assert saved.parent == tmp_path / "runs"
    model = xdl_ec.load(tmp_path / "runs")  # the save names its script: no job= needed
    try:
        assert np.array_equal(model.predict(tiny_batch(300)), job.predict(tiny_batch(300)))
    finally:
        model.close()
    wider = sys.modules["xdl_ec_script_tiny_job"].job(dim=8)  # the script's job with 8-float rows
    with pytest.raises(SaveMismatch):
        xdl_ec.load(tmp_path / "runs", job=wider)


def test_resume_continues_to_the_model_of_one_uninterrupted_fit(tiny_job: Callable[[], Any], tmp_path: Path) -> None:
    whole = tiny_job().fit(steps=8, deterministic=True, seed=4)
    first = tiny_job().fit(steps=4, deterministic=True, seed=4, save_dir=tmp_path / "runs", save_every="2")
    assert first["steps"] == 4
    resumed = tiny_job().fit(steps=8, deterministic=True, seed=4, resume=tmp_path / "runs")
    assert resumed["model_digest"] == whole["model_digest"]


def test_verify_needs_an_erasure_coded_cluster(tiny_job: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match=r"needs cluster=Cluster\(..., ft='ec'\)"):
        tiny_job().verify(cluster=xdl_ec.Cluster(servers=2))


def test_the_root_save_is_job_save(tiny_job: Callable[[], Any], tmp_path: Path) -> None:
    job = tiny_job()
    job.fit(steps=2, deterministic=True)
    assert Path(xdl_ec.save(job, str(tmp_path / "runs"), keep=1)).parent == tmp_path / "runs"
