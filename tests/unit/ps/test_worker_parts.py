"""The worker's parts, each on its own over real tables and servers in this process: its input's positions and
fresh keys, its model built once with the first batch's shapes, a batch's rows assembled from a prefetched part and
the rest, pushes in flight (acks read later, a replaced server's pushes sent again and applied once), and a worker
over tables in this process refusing the calls that need servers."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import xdl_ec  # noqa: E402
from xdl_ec.job.local_tables import LocalTables  # noqa: E402
from xdl_ec.model.dense_model import ModelError  # noqa: E402
from xdl_ec.model.feature_batch import FeatureBatch  # noqa: E402
from xdl_ec.model.job_spec import JobSpec  # noqa: E402
from xdl_ec.ps.backend import LocalBackend  # noqa: E402
from xdl_ec.ps.batch_rows import BatchRows, NoRows  # noqa: E402
from xdl_ec.ps.client import PSClient  # noqa: E402
from xdl_ec.ps.pushes_in_flight import PushesInFlight  # noqa: E402
from xdl_ec.ps.server import ParameterServer  # noqa: E402
from xdl_ec.ps.worker import RunSettings, Worker  # noqa: E402
from xdl_ec.ps.worker_input import WorkerInput  # noqa: E402
from xdl_ec.ps.worker_model import WorkerModel  # noqa: E402

USERS = xdl_ec.Table("users", dim=4, optimizer=xdl_ec.optim.Adagrad(0.05))
USER = xdl_ec.Feature("user", USERS)
BATCHES = 6


def batch(seed: int, width: int = 2) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "label": (rng.random(16) < 0.5).astype(np.float32),
        "dense": rng.normal(size=(16, width)).astype(np.float32),
        "user": rng.integers(0, 40, 16),
    }


def input_fn(worker: int, count: int) -> Iterator[Dict[str, np.ndarray]]:
    return (batch(b) for b in range(worker, BATCHES, count))


class Model(tf.keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.out = tf.keras.layers.Dense(1)

    def call(self, embedded: Any, dense: Any, training: bool = False) -> Any:
        return self.out(tf.concat([embedded["user"], dense], axis=1))


JOB = JobSpec((USERS,), (USER,), Model, input_fn)


def prepared(seed: int, width: int = 2) -> FeatureBatch:
    return FeatureBatch.prepare(batch(seed, width), [USER], f"batch {seed}", [], None)


def test_the_input_counts_the_batches_trained_marks_fresh_keys_and_seeks_back() -> None:
    stream = WorkerInput(JOB, 0, 1, track_fresh=True)
    try:
        first = stream.current
        assert first is not None and stream.position == 0
        following = stream.read_next()
        assert following is not None and stream.position == 1  # read ahead: the current batch is not trained yet
        keys, before = following.keys["users"], first.keys["users"]
        np.testing.assert_array_equal(following.fresh["users"], ~np.isin(keys, before))
        stream.current = following  # its step is over
        assert stream.position == 1
        while stream.current is not None:
            stream.current = stream.read_next()
        assert stream.position == BATCHES
        again = stream.seek(1)
        assert again is not None and stream.position == 1
        np.testing.assert_array_equal(again.keys["users"], keys)
    finally:
        stream.close()


def test_the_model_is_built_once_with_the_first_batch_and_names_a_batch_of_other_shapes() -> None:
    model = WorkerModel(JOB, 3, seed=0, apply_dense=False, report_dense=False)
    model.build_for(None)
    with pytest.raises(RuntimeError, match="worker 3: its model is built with its first batch"):
        model.state()
    first = prepared(0)
    model.build_for(first)
    dense = model.built_dense
    model.build_for(prepared(1))
    assert model.built_dense is dense and model.signature == first.signature()
    model.check_following(first, prepared(1))  # same shapes: nothing to say
    with pytest.raises(ModelError, match="differ from the first batch's"):
        model.check_following(first, prepared(2, width=3))
    weights, variables, iterations = model.state()
    assert iterations == 0 and len(weights) == len(dense.model.trainable_variables)


def test_a_batchs_rows_are_its_prefetched_fresh_part_and_the_rest_as_one_pull_would_give() -> None:
    tables = LocalTables(JOB.tables)
    reference = LocalTables(JOB.tables)
    rows = BatchRows(tables, {"users": 4})
    first, following = prepared(0), prepared(1)
    following.fresh["users"] = ~np.isin(following.keys["users"], first.keys["users"])
    np.testing.assert_array_equal(rows.of(first)["users"], reference.pull(rows.requests(first))["users"])
    rows.expect(rows.prefetch_fresh(following))
    rows.settle()
    np.testing.assert_array_equal(rows.of(following)["users"], reference.pull(rows.requests(following))["users"])
    following.fresh["users"][:] = False  # every key was in the batch before: nothing to prefetch
    assert isinstance(rows.prefetch_fresh(following), NoRows)


def _servers(count: int) -> List[Any]:
    backend = LocalBackend()
    return [backend.start("server", i, ParameterServer, i, [USERS], count) for i in range(count)]


def test_pushes_are_acknowledged_later_and_a_replaced_servers_are_sent_again_and_applied_once() -> None:
    handles, twin = _servers(2), _servers(2)
    client, twin_client = PSClient(handles, worker=0), PSClient(twin, worker=0)
    pushes = PushesInFlight(0, client)
    keys = np.arange(10, dtype=np.int64)
    steps = [{"users": (keys, np.full((10, 4), g, np.float32))} for g in (1.0, -0.5)]
    pushes.push_async(steps[0], 1, 1, None)
    assert pushes.unacked == 2 and pushes.last_step == 1
    assert pushes.flush(write_back=False) == 2 and pushes.unacked == 0
    pushes.push_async(steps[1], 2, 1, None)
    pushes.forget_server(1)  # server 1 replaced (here: by itself): its push is sent again before the next one
    assert pushes.unacked == 1
    requests = [handle.call("stats").result(5)["requests"] for handle in handles]
    assert pushes.flush(write_back=False) == 1
    assert [handle.call("stats").result(5)["requests"] - n for handle, n in zip(handles, requests)] == [0, 1]
    for step, grads in enumerate(steps, 1):  # the twin: each push sent once
        twin_client.push(grads, step)
    rows = client.pull({"users": (keys, 4)})["users"]
    np.testing.assert_array_equal(rows, twin_client.pull({"users": (keys, 4)})["users"])  # applied once
    assert [handle.call("push_state", 0).result(5)[1] for handle in handles] == client.sent_seqs() == [2, 2]
    for handle in handles + twin:
        handle.drop()


def test_a_worker_over_tables_in_this_process_trains_and_refuses_the_calls_that_need_servers() -> None:
    worker = Worker(0, 1, JOB, RunSettings(seed=1), [], False, client=LocalTables(JOB.tables), apply_dense=True)
    try:
        result = worker.train_step(1, None, 1)
        assert result is not None and result.samples == 16 and result.has_next
        assert worker.position == 1 and worker.stats()["steps"] == 1
        assert worker.seek(BATCHES) is False and worker.train_step(2, None, 1) is None
        for call, args in (("set_server", (0, None)), ("enable_push_log", ()), ("call_latency", (1,))):
            with pytest.raises(RuntimeError, match=f"{call}: worker 0 trains on tables in this process"):
                getattr(worker, call)(*args)
    finally:
        worker.close()
