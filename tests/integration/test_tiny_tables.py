"""Tables with fewer ids than servers: some servers hold no row of any table, so no step ever calls them. A loss of
such a server that r covers must not stop the run (it was found only by the reads after training, where nothing
recovers): under ec the run ends at the failure-free digest, under ckpt and cpr it completes."""

from __future__ import annotations

from typing import Any, Dict, Iterator

import numpy as np
import pytest
import tensorflow as tf

import xdl_ec

STEPS = 12


def tiny_job(ids: int) -> xdl_ec.Job:
    """Two tables of ``ids`` ids each (1 or 2: fewer than the 3 servers), a linear model over them."""
    ads = xdl_ec.Table("ads", dim=4, optimizer=xdl_ec.optim.Adagrad(0.05), seed=1)
    users = xdl_ec.Table("users", dim=4, optimizer=xdl_ec.optim.Adam(0.01), seed=2)

    def batch(seed: int, size: int = 16) -> Dict[str, Any]:
        rng = np.random.default_rng(seed)
        return {
            "label": (rng.random(size) < 0.5).astype(np.float32),
            "dense": rng.normal(size=(size, 2)).astype(np.float32),
            "ad": rng.integers(0, ids, size),
            "user": rng.integers(0, ids, size),
        }

    def input_fn(worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        return (batch(b) for b in range(worker, STEPS, num_workers))

    class Linear(tf.keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.out = tf.keras.layers.Dense(1)

        def call(self, embedded: Dict[str, tf.Tensor], dense: tf.Tensor, training: bool = False) -> tf.Tensor:
            return self.out(tf.concat([embedded["ad"], embedded["user"], dense], axis=1))

    features = [xdl_ec.Feature("ad", ads), xdl_ec.Feature("user", users)]
    return xdl_ec.Job(tables=[ads, users], features=features, model_fn=Linear, input_fn=input_fn)


@pytest.mark.parametrize("ids", [1, 2])
@pytest.mark.parametrize("killed", [0, 1, 2])
def test_under_ec_a_covered_loss_of_any_server_ends_at_the_failure_free_digest(ids: int, killed: int) -> None:
    job = tiny_job(ids)
    free = job.fit(cluster=xdl_ec.Cluster(servers=3), deterministic=True)
    lost = job.fit(cluster=xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), fail_at=[f"6:{killed}"]), deterministic=True)
    assert lost["model_digest"] == free["model_digest"]
    assert [f["index"] for f in lost["failures"]] == [killed]


@pytest.mark.parametrize("ft", [{"ft": "ckpt", "ckpt_interval": "4"}, {"ft": "cpr", "cpr_interval": 4}])
def test_under_ckpt_and_cpr_a_server_without_rows_lost_does_not_stop_the_run(ft: Dict[str, Any]) -> None:
    job = tiny_job(1)
    report = job.fit(cluster=xdl_ec.Cluster(servers=3, fail_at=["6:1"], **ft), deterministic=True)
    assert report["steps"] == STEPS
    assert [f["index"] for f in report["failures"]] == [1]
