"""The job API: a job with three tables of different dims, a variable-length feature and dense features trains in
one process and on parameter servers to the same model; fault tolerance, worker restarts and bad input hold for
any job, not only the built-in one."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402

example = load_example("user_item_tags")
LOG = example.ClickLog(batch_size=64, batches=12, eval_batches=3)
_RUNS: dict = {}


def job(log=LOG) -> xdl_ec.Job:  # noqa: ANN001
    return example.make_job(log)


def run(cluster: "xdl_ec.Cluster | None" = None, log=LOG, **fit) -> dict:  # noqa: ANN001
    key = (cluster, log, tuple(sorted(fit.items())))
    if key not in _RUNS:
        _RUNS[key] = job(log).fit(cluster=cluster, deterministic=True, seed=3, **fit)
    return _RUNS[key]


def test_one_process_and_one_worker_on_servers_end_at_the_same_model() -> None:
    here = run()
    servers = run(xdl_ec.Cluster(servers=3))
    assert here["model_digest"] == servers["model_digest"]
    assert here["steps"] == servers["steps"] == 12 and here["samples"] == 12 * 64
    assert here["auc"] == servers["auc"] and here["eval_samples"] == 3 * 64
    assert [t["name"] for t in here["job"]["tables"]] == ["users", "items", "tags"]
    assert [t["dim"] for t in here["job"]["tables"]] == [16, 16, 8]


def test_the_digest_covers_every_table() -> None:
    trained = job()
    trained.fit(deterministic=True, seed=3)
    rows = trained.model.tables.tables
    assert all(len(rows[t]) > 0 for t in ("users", "items", "tags"))
    base = trained.model.exports()
    from xdl_ec.model.digest import model_digest

    dense = trained.model.dense
    before = model_digest(base, dense.model.weights, dense.optimizer.variables)
    tags = base[2][0]
    tags["values"][0, 0] += 1.0
    assert model_digest(base, dense.model.weights, dense.optimizer.variables) != before


def test_two_sync_workers_are_deterministic_and_split_the_input() -> None:
    a = run(xdl_ec.Cluster(servers=2, workers=2))
    b = job().fit(cluster=xdl_ec.Cluster(servers=2, workers=2), deterministic=True, seed=3)
    assert a["model_digest"] == b["model_digest"]
    assert a["steps"] == 6 and a["samples"] == 12 * 64 and [w["steps"] for w in a["workers"]] == [6, 6]


def test_steps_stop_early_and_evaluate_predict_use_the_trained_model() -> None:
    trained = job()
    report = trained.fit(steps=5, deterministic=True, seed=3)
    assert report["steps"] == 5 and report["samples"] == 5 * 64
    holdout = list(LOG.holdout())
    metrics = trained.evaluate(holdout)
    assert metrics["eval_samples"] == 3 * 64 and 0.0 <= metrics["auc"] <= 1.0
    probs = trained.predict(holdout[0])
    assert probs.shape == (64,) and np.all((probs > 0) & (probs < 1))
    rows_before = {t: len(x) for t, x in trained.model.tables.tables.items()}
    unseen = dict(holdout[0], user=np.full(64, 10**12, np.int64))
    trained.predict(unseen)  # unseen ids read the zero row and insert nothing
    assert {t: len(x) for t, x in trained.model.tables.tables.items()} == rows_before


def test_a_killed_worker_restarts_at_its_reader_position() -> None:
    reference = run(xdl_ec.Cluster(servers=3, ft="ckpt", ckpt_interval="4"))
    report = job().fit(
        cluster=xdl_ec.Cluster(servers=3, ft="ckpt", ckpt_interval="4", fail_worker_at=["6"]),
        deterministic=True,
        seed=3,
    )
    assert [f["role"] for f in report["failures"]] == ["worker"]
    assert report["model_digest"] == reference["model_digest"]


def test_ckpt_rollback_replays_any_job_exactly() -> None:
    reference = run(xdl_ec.Cluster(servers=3))
    report = job().fit(
        cluster=xdl_ec.Cluster(servers=3, ft="ckpt", ckpt_interval="4", fail_at=["7:1"]), deterministic=True, seed=3
    )
    assert report["model_digest"] == reference["model_digest"]
    assert report["failures"][0]["lost_samples"] == 2 * 64  # steps 5 and 6 re-trained after the step-4 save


def test_cpr_recovers_any_job_losing_only_the_dead_servers_updates() -> None:
    report = job().fit(
        cluster=xdl_ec.Cluster(servers=3, ft="cpr", cpr_interval=4, fail_at=["7:1"]), deterministic=True, seed=3
    )
    assert report["steps"] == 12 and report["lost_updates"] > 0 and report["failures"][0]["index"] == 1


# slow (out of CI): it needs an access to reach a missing block before the background rebuild does, which the
# machine's load decides: on two xdist workers beside the rest of the suite the rebuild won in both runs of CI's
# command (and a boundary-paced rebuild under a CPU hog too)
@pytest.mark.slow
def test_an_access_decodes_the_missing_blocks_it_touches_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 8 slots: the pushes and pulls reaching a replacement touch several of its missing blocks at once,
    which are decoded in one round of reads (not one fault each); the run ends at the failure-free model."""
    import dataclasses

    from xdl_ec.ft.shard_restore import ShardRestore

    decoded: list = []
    own_blocks = ShardRestore.decode_own_blocks

    def record(self, table, blocks, servers, down):  # noqa: ANN001, ANN202
        decoded.append(len(blocks))
        return own_blocks(self, table, blocks, servers, down)

    monkeypatch.setattr(ShardRestore, "decode_own_blocks", record)
    base = job()
    tables = {t.name: dataclasses.replace(t, block_slots=8) for t in base.tables}
    small = xdl_ec.Job(
        list(tables.values()),
        [dataclasses.replace(f, table=tables[f.table.name]) for f in base.features],
        example.make_model,
        LOG.train,
    )
    reference = small.fit(cluster=xdl_ec.Cluster(servers=3), deterministic=True, seed=3)
    report = small.fit(
        cluster=xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), fail_at=["7:1"]), deterministic=True, seed=3
    )
    assert [f["index"] for f in report["failures"]] == [1]
    assert report["model_digest"] == reference["model_digest"]
    assert max(decoded) >= 2, decoded


def _input_with(bad_step: int, **changes):  # noqa: ANN202
    def input_fn(worker: int, num_workers: int):  # noqa: ANN202
        for i, b in enumerate(LOG.train(worker, num_workers), 1):
            yield dict(b, **changes) if i == bad_step else b

    return input_fn


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"age": np.zeros(64, np.int64)}, r"worker 0, step 3: the batch carries undeclared entries \['age'\]"),
        ({"item": np.zeros(64, np.float32)}, r"worker 0, step 3: feature 'item': ids must be integers"),
        ({"tags": (np.array([1, 2]), np.array([0, 5]))}, r"worker 0, step 3: feature 'tags': row_splits do not match"),
    ],
)
@pytest.mark.parametrize("cluster", [None, xdl_ec.Cluster(servers=2)])
def test_a_bad_batch_stops_the_run_before_it_is_applied(changes: dict, message: str, cluster) -> None:  # noqa: ANN001
    bad = xdl_ec.Job(job().tables, job().features, example.make_model, _input_with(3, **changes))
    with pytest.raises(xdl_ec.InputError, match=message):
        bad.fit(cluster=cluster, deterministic=True, seed=3)


def test_an_input_fn_raising_mid_run_is_named() -> None:
    def input_fn(worker: int, num_workers: int):  # noqa: ANN202
        for i, b in enumerate(LOG.train(worker, num_workers), 1):
            if i == 4:
                raise OSError("the log shard vanished")
            yield b

    from xdl_ec.model.input_stream import InputFnError

    with pytest.raises(
        InputFnError, match="worker 0, step 4: input_fn's iterator raised OSError: the log shard vanished"
    ):
        xdl_ec.Job(job().tables, job().features, example.make_model, input_fn).fit(deterministic=True)


@pytest.mark.parametrize(
    "output,message",
    [("many", r"its labels are \[B\], the model's labels \[B, 3\] \(3 classes\)"), ("none", "Keras model")],
)
def test_a_model_that_breaks_the_contract_is_named(output: str, message: str) -> None:
    import tensorflow as tf

    def model_fn():  # noqa: ANN202
        if output == "none":
            return object()

        class Wide(tf.keras.Model):
            def __init__(self) -> None:
                super().__init__()
                self.out = tf.keras.layers.Dense(3)

            def call(self, embedded, dense, training=False):  # noqa: ANN001, ANN201
                return self.out(tf.concat([embedded["user"], dense], axis=1))

        return Wide()

    with pytest.raises(xdl_ec.ModelError, match=message):
        xdl_ec.Job(job().tables, job().features, model_fn, LOG.train).fit(cluster=xdl_ec.Cluster(servers=2))


def test_job_settings_are_checked_when_the_job_is_made() -> None:
    users = xdl_ec.Table("users", 4)
    other_users = xdl_ec.Table("users", 8)
    feature = xdl_ec.Feature("user", users)
    with pytest.raises(ValueError, match="two tables are named 'users'"):
        xdl_ec.Job([users, other_users], [feature], example.make_model, LOG.train)
    with pytest.raises(ValueError, match="its table 'users' is not one of the job's tables"):
        xdl_ec.Job([other_users], [feature], example.make_model, LOG.train)
    with pytest.raises(ValueError, match=r"\['items'\] are looked up by no feature"):
        xdl_ec.Job([users, xdl_ec.Table("items", 4)], [feature], example.make_model, LOG.train)
    with pytest.raises(TypeError, match="model_fn: must be a function"):
        xdl_ec.Job([users], [feature], example.make_model(), LOG.train)
    with pytest.raises(ValueError, match="loss: must be one of"):
        xdl_ec.Job([users], [feature], example.make_model, LOG.train, loss="mse")


@pytest.mark.ray
def test_the_example_job_on_ray_with_ec_and_a_killed_server_ends_at_the_failure_free_model() -> None:
    """Example (1) on Ray actors with --ft ec --code 2,1, server 1's process killed mid-run: the model equals the
    one-process run's (which equals the failure-free run's on servers, see above)."""
    pytest.importorskip("ray")
    import ray

    from xdl_ec.ps.backend import connect_ray

    started = not ray.is_initialized()
    if started:
        connect_ray()
    try:
        report = job().fit(
            cluster=xdl_ec.Cluster(servers=3, backend="ray", ft="ec", code=(2, 1), fail_at=["6:1"]),
            deterministic=True,
            seed=3,
        )
    finally:
        if started:  # the next test file starts its own Ray
            ray.shutdown()
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 1)]
    assert report["model_digest"] == run()["model_digest"]
