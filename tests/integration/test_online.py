"""Online training (issue #36): progressive validation, the AUC and log loss of each batch scored by its own step
before the update, the same in one process and on servers."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402

tags = load_example("user_item_tags")
esmm = load_example("esmm")
LOG = tags.ClickLog(batch_size=64, batches=12, eval_batches=2)


def test_progressive_figures_are_the_steps_own_pre_update_scores_and_match_on_servers(capsys) -> None:  # noqa: ANN001
    here = tags.make_job(LOG).fit(deterministic=True, seed=3, progress=True)
    progressive = here["progressive"]
    assert set(progressive) == {"auc", "logloss", "samples"} and progressive["samples"] == 12 * 64
    assert 0.0 <= progressive["auc"] <= 1.0
    # the step's loss is the mean cross-entropy of the same pre-update probabilities: over equal batches their
    # mean is the window's log loss (float32 step arithmetic)
    losses = [row[3] for row in here["timeline"]]
    assert progressive["logloss"] == pytest.approx(float(np.mean(losses)), rel=1e-5)
    assert "progressive AUC" in capsys.readouterr().err  # the progress line (not a terminal: plain lines)
    servers = tags.make_job(LOG).fit(cluster=xdl_ec.Cluster(servers=2), deterministic=True, seed=3)
    assert servers["model_digest"] == here["model_digest"]
    assert servers["progressive"] == progressive


def test_two_workers_score_every_sample_and_several_heads_get_their_own_figures() -> None:
    two = tags.make_job(LOG).fit(cluster=xdl_ec.Cluster(servers=2, workers=2), deterministic=True, seed=3)
    assert two["progressive"]["samples"] == 12 * 64
    log = esmm.ImpressionLog(batch_size=64, batches=10, eval_batches=2)
    report = esmm.make_job(log).fit(deterministic=True, seed=1)
    progressive = report["progressive"]
    assert set(progressive["heads"]) == {"buy", "click"} and progressive["samples"] == 10 * 64
    assert progressive["auc"] == progressive["heads"]["buy"]["auc"]  # the first head by name, as evaluation
    assert all(0.0 <= h["auc"] <= 1.0 and h["logloss"] > 0 for h in progressive["heads"].values())
