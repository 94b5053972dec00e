"""Table groups (issue #49) in real runs: a job whose tables of one dim step together (one unique, pull, push and TF
op per group) ends at the same model, bit for bit, as the same job stepping table by table (``table_groups=False``);
tables of different optimizers and rules share a group, and a table alone in its dim and the tables a group cannot
take (several features, ragged ids, sequences) step on their own beside the group."""

from __future__ import annotations

from typing import Any, Dict, Iterator

import numpy as np
import pytest
import tensorflow as tf

import xdl_ec

SIZE = 64


def _batch(seed: int) -> Dict[str, Any]:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, SIZE)  # ragged: 0-3 ids per example
    lengths = rng.integers(1, 5, SIZE)
    return {
        "label": (rng.random(SIZE) < 0.4).astype(np.float32),
        "dense": rng.normal(size=(SIZE, 3)).astype(np.float32),
        "user": rng.zipf(1.3, SIZE) % 500,  # one id per example
        "tags": rng.zipf(1.3, (SIZE, 3)) % 50,  # fixed multi-hot, pooled by mean
        "pair": rng.integers(0, 30, (SIZE, 2)),  # fixed multi-hot, not pooled
        "city": rng.integers(0, 20, SIZE),  # dim 4: a table alone in its dim
        "ad": rng.integers(0, 40, SIZE),  # "ad" and "ad_clicked" share a table: not grouped
        "ad_clicked": rng.integers(0, 40, SIZE),
        "words": (rng.integers(0, 60, int(counts.sum())), np.concatenate([[0], np.cumsum(counts)])),  # ragged
        "history": (rng.integers(0, 70, (SIZE, 4)), lengths),  # a sequence
    }


def _input(worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
    return (_batch(b) for b in range(worker, 24, num_workers))


class WideModel(tf.keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1)

    def call(self, embedded: Dict[str, Any], dense: Any, training: bool = False) -> Any:
        # [B, n, dim] summed over n (a sequence's length is 1 when the model is built); masks left out
        parts = [
            v if v.shape.rank == 2 else tf.reduce_sum(v, axis=1) for k, v in embedded.items() if v.dtype != tf.bool
        ]
        return self.out(self.hidden(tf.concat([*parts, dense], axis=1)))


def _job(table_groups: bool) -> xdl_ec.Job:
    users = xdl_ec.Table("users", dim=8, optimizer=xdl_ec.optim.Adagrad(0.05), seed=1)
    tags = xdl_ec.Table(
        "tags",
        dim=8,
        optimizer=xdl_ec.optim.Adam(0.01),
        seed=2,
        admit=xdl_ec.Admit(min_count=2),
        evict=xdl_ec.Evict(ttl_steps=3, every_steps=2),
    )
    pairs = xdl_ec.Table("pairs", dim=8, optimizer=xdl_ec.optim.SGD(0.1), seed=3)
    cities = xdl_ec.Table("cities", dim=4, optimizer=xdl_ec.optim.Ftrl(0.1), seed=4)
    ads = xdl_ec.Table("ads", dim=8, optimizer=xdl_ec.optim.Adagrad(0.05), seed=5)
    words = xdl_ec.Table("words", dim=8, optimizer=xdl_ec.optim.Momentum(0.05), seed=6)
    history = xdl_ec.Table("history", dim=4, optimizer=xdl_ec.optim.Adagrad(0.05), seed=7)
    features = [
        xdl_ec.Feature("user", users),
        xdl_ec.Feature("tags", tags, combiner="mean"),
        xdl_ec.Feature("pair", pairs),
        xdl_ec.Feature("city", cities),
        xdl_ec.Feature("ad", ads),
        xdl_ec.Feature("ad_clicked", ads),
        xdl_ec.Feature("words", words, combiner="sum"),
        xdl_ec.Feature("history", history, sequence=True, max_length=4),
    ]
    return xdl_ec.Job(
        tables=[users, tags, pairs, cities, ads, words, history],
        features=features,
        model_fn=WideModel,
        input_fn=_input,
        dense_learning_rate=0.01,
        eval_fn=lambda: (_batch(s) for s in range(100, 103)),
        table_groups=table_groups,
    )


def test_the_groups_a_batch_forms() -> None:
    job = _job(True)
    batch = xdl_ec.model.feature_batch.FeatureBatch.prepare(_batch(0), job.features, "test", grouped=True)
    (group,) = batch.groups  # dim 8's; "cities" is alone in dim 4 ("history" is a sequence): no group there
    assert group.tables == ("users", "tags", "pairs") and group.modes == ("single", "mean", "none")
    assert set(batch.keys) == {group.name, "cities", "ads", "words", "history"}


def test_one_process_grouped_and_ungrouped_end_at_the_same_model() -> None:
    grouped = _job(True).fit(deterministic=True, seed=3)
    ungrouped = _job(False).fit(deterministic=True, seed=3)
    assert grouped["model_digest"] == ungrouped["model_digest"]
    assert grouped["auc"] == ungrouped["auc"]
    assert grouped["steps"] == ungrouped["steps"] == 24


@pytest.mark.parametrize("ft", ["none", "ec"])
def test_on_servers_grouped_and_ungrouped_end_at_the_same_model(ft: str) -> None:
    kill = {"ft": "ec", "code": (2, 1), "fail_at": ["10:1"]} if ft == "ec" else {}
    cluster = xdl_ec.Cluster(servers=3, **kill)
    grouped = _job(True).fit(cluster=cluster, deterministic=True, seed=3)
    reference = _job(False).fit(deterministic=True, seed=3)
    assert grouped["model_digest"] == reference["model_digest"]


@pytest.mark.parametrize("resume_on", ["one-process", "servers"])
def test_a_grouped_runs_save_resumes_in_one_process_and_on_servers(tmp_path: Any, resume_on: str) -> None:
    # the saved signature carries no groups: a worker on servers resumes a grouped run's save
    _job(True).fit(steps=10, deterministic=True, seed=3, save_dir=tmp_path)
    cluster = xdl_ec.Cluster(servers=2) if resume_on == "servers" else None
    resumed = _job(True).fit(deterministic=True, seed=3, resume=tmp_path, cluster=cluster)
    assert resumed["model_digest"] == _job(False).fit(deterministic=True, seed=3)["model_digest"]
