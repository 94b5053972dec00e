"""The built-in Criteo job: its TrainConfig checked when made (each error names the setting), described and rebuilt
as a save's source, and a few steps of it on synthetic rows, the same model twice."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Dict

import pytest

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job, job_from_description, layer_sizes

SMALL: Dict[str, Any] = dict(
    synthetic=True, synthetic_rows=600, batch_size=32, steps=3, emb_dim=4, progress=False, deterministic=True
)


@pytest.mark.parametrize(
    "settings,message",
    [
        ({}, r"^data: give exactly one of a Criteo file \(data\), a stream directory \(stream\) or synthetic=True$"),
        ({"synthetic": True, "data": "x.tsv"}, r"^data: give exactly one of"),
        ({"synthetic": True, "emb_dim": 0}, r"^emb_dim: must be an int >= 1, got 0$"),
        ({"synthetic": True, "lr": -0.1}, r"^lr: must be a finite number in \(0.0, inf\]"),
        ({"synthetic": True, "eval_fraction": 1.0}, r"^eval_fraction: must be a finite number in \[0.0, 1.0\)"),
        ({"synthetic": True, "model": "wide"}, r"^model: must be one of "),
        ({"synthetic": True, "optimizer": "rmsprop"}, r"rmsprop"),
        ({"synthetic": True, "seed": -1}, r"^seed: must be an int >= 0, got -1$"),
        ({"synthetic": True, "admit_min_count": 0}, r"^Admit: min_count: must be an int >= 1, got 0$"),
    ],
)
def test_a_bad_setting_is_an_error_naming_it(settings: Dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**settings)


def test_layer_sizes_parse_and_refuse_what_is_not_a_size_list() -> None:
    assert layer_sizes("64,32, 16") == (64, 32, 16) and layer_sizes(" ") == ()
    for text in ("64,,32", "64,-1", "a"):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"positive integers like 64,32, got {text!r}"):
            layer_sizes(text)


def test_the_description_rebuilds_the_same_job() -> None:
    config = TrainConfig(**SMALL)
    job = job_from_description(config.describe())
    assert job.tables[0].dim == 4 and [f.name for f in job.features] == [criteo_job(config).features[0].name]
    assert dataclasses.asdict(TrainConfig(**config.describe())) == config.describe()


def test_a_few_steps_on_synthetic_rows_train_the_same_model_twice() -> None:
    first = criteo_job(TrainConfig(**SMALL)).fit(steps=3, deterministic=True, seed=3)
    assert first["steps"] == 3 and first["samples"] == 3 * 32 and "auc" in first  # the hold-out split
    again = criteo_job(TrainConfig(**SMALL)).fit(steps=3, deterministic=True, seed=3)
    assert again["model_digest"] == first["model_digest"]
    no_holdout = criteo_job(TrainConfig(**SMALL, eval_fraction=0.0))
    assert no_holdout.spec.eval_fn is None
