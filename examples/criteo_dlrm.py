"""The built-in model as a script: DLRM on Criteo data, written with the public job API only.

It trains exactly what ``xdl-ec train`` trains without ``--script`` (the test suite checks that both end at the
same model_digest): one table for the 26 categorical columns (their ids are salted per column by the reader, so
the job shares them: one fixed multi-hot feature [B, 26] without a combiner), the DLRM body, Adagrad rows.

    xdl-ec train --script examples/criteo_dlrm.py --servers 5 --ft ec --code 4,1
    CRITEO=../shared/data/criteo_kaggle_train_head10k.tsv.gz xdl-ec train --script examples/criteo_dlrm.py

Without $CRITEO it trains on seeded synthetic Criteo-shaped data.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator

import xdl_ec
from xdl_ec.data.source import TrainingData
from xdl_ec.models import DLRM

EMB_DIM, BATCH, EPOCHS = 16, 128, 3


def open_data() -> TrainingData:
    path = os.environ.get("CRITEO")
    return TrainingData.from_file(path) if path else TrainingData.synthetic(60_000, max_cardinality=100_000)


def as_batch(b: Any) -> Dict[str, Any]:
    return {"label": b.label, "dense": b.dense, "categorical": b.sparse}


def train_input(worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
    """Worker i of W takes batches i, i + W, ... of EPOCHS passes over the train split."""
    data = open_data()
    stream = (b for _ in range(EPOCHS) for b in data.train_batches(BATCH))
    return (as_batch(b) for i, b in enumerate(stream) if i % num_workers == worker)


def holdout() -> Iterator[Dict[str, Any]]:
    return (as_batch(b) for b in open_data().eval_batches(4096))


def job() -> xdl_ec.Job:
    table = xdl_ec.Table(
        "criteo_categorical",
        EMB_DIM,
        optimizer=xdl_ec.optim.Adagrad(0.02),
        initializer=xdl_ec.init.RandomUniform(-0.05, 0.05),
        seed=0,
    )
    return xdl_ec.Job(
        tables=[table],
        features=[xdl_ec.Feature("categorical", table, shared_ids=True)],
        model_fn=lambda: DLRM(EMB_DIM, bottom_mlp=(64,), top_mlp=(64, 32), name="dlrm"),
        input_fn=train_input,
        eval_fn=holdout,
    )
