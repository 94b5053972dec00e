"""LocalTables.push_pull_async: a step's push, then the next step's pull, on the tables' own thread; and LocalRun
using it: the run ends at the same model as pushing and pulling on the step's thread, and quiesce hands the tables
back with nothing in flight."""

from __future__ import annotations

import numpy as np
import pytest

import xdl_ec
from xdl_ec.job import local_run
from xdl_ec.job.local_run import LocalRun
from xdl_ec.job.local_tables import LocalTables
from xdl_ec.models import EmbeddingMLP
from xdl_ec.ps.worker import RunSettings


def tables() -> LocalTables:
    return LocalTables([xdl_ec.Table("t", 4, optimizer=xdl_ec.optim.SGD(1.0), initializer=xdl_ec.init.Zeros())])


def test_the_pull_sees_the_push_before_it() -> None:
    local = tables()
    try:
        keys = np.array([3, 5], dtype=np.int64)
        local.pull({"t": (keys, 4)})  # the rows exist, at zero
        grads = np.array([[1, 2, 3, 4], [0, 0, 0, -1]], dtype=np.float32)
        acks, rows = local.push_pull_async({"t": (keys, grads)}, 1, {"t": (np.array([5, 3, 9]), 4)})
        pulled = rows.result(10)["t"]
        assert [a.result(10) for a in acks] and rows.done()
        # SGD(1.0) from zero: the rows are minus the gradients; key 9 is a new row
        np.testing.assert_array_equal(pulled, np.array([[0, 0, 0, 1], [-1, -2, -3, -4], [0, 0, 0, 0]]))
    finally:
        local.close()


def test_a_push_that_fails_fails_its_futures_and_pulls_nothing() -> None:
    local = tables()
    try:
        keys = np.array([3], dtype=np.int64)
        local.pull({"t": (keys, 4)})
        bad = np.zeros((1, 3), dtype=np.float32)  # the table's rows are 4 wide
        acks, rows = local.push_pull_async({"t": (keys, bad)}, 1, {"t": (np.array([11]), 4)})
        with pytest.raises(ValueError):
            rows.result(10)
        with pytest.raises(ValueError):
            acks[0].result(10)
        local.settle()
        assert len(local.tables["t"]) == 1  # key 11 was never pulled: the pull did not run after the failed push
    finally:
        local.close()


def _job(steps: int) -> xdl_ec.Job:
    rng = np.random.default_rng(0)
    table = xdl_ec.Table("t", 4, optimizer=xdl_ec.optim.Adagrad(0.1), seed=1)
    batches = [
        {"ids": rng.zipf(1.3, (32, 3)).astype(np.int64) % 50, "label": rng.integers(0, 2, 32).astype(np.float32)}
        for _ in range(steps)
    ]
    return xdl_ec.Job(
        tables=[table],
        features=[xdl_ec.Feature("ids", table, combiner="sum")],
        model_fn=lambda: EmbeddingMLP(4, (8,)),
        input_fn=lambda worker, workers: iter(batches),
    )


def test_a_local_run_overlaps_the_tables_and_ends_at_the_serial_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same job trained with push and pull on the step's thread (the worker not combining them) and on the
    tables' thread ends at the same digest; every step but the last sends its push with the next step's pull."""
    job = _job(12)
    with monkeypatch.context() as m:  # the worker as before the tables' thread: pull, step, push, one by one
        real = local_run.Worker
        m.setattr(local_run, "Worker", lambda *a, **k: real(*a, **{**k, "prefetch_across_steps": False}))
        serial = LocalRun(job.spec, RunSettings(seed=1, deterministic=True))
        try:
            assert not serial.worker.combine_calls
            serial.fit()
            expected = serial.digest()
        finally:
            serial.close()
    calls = []
    combined = LocalTables.push_pull_async
    monkeypatch.setattr(
        LocalTables, "push_pull_async", lambda self, *a, **k: calls.append(a[1]) or combined(self, *a, **k)
    )
    run = LocalRun(job.spec, RunSettings(seed=1, deterministic=True))
    try:
        assert run.fit()["steps"] == 12
        assert calls == list(range(1, 12))  # the last step has no next one: its push goes alone
        assert run.digest() == expected
    finally:
        run.close()


def test_quiesce_waits_for_the_push_pull_in_flight() -> None:
    run = LocalRun(_job(3).spec, RunSettings(seed=1))
    try:
        run.worker.train_step(1, None, 1, True)
        in_flight = run.worker._pending  # the next step's rows, pulled after this step's push
        assert in_flight is not None and run.worker._unacked
        run.quiesce()
        assert in_flight.rows.done() and not run.worker._unacked
    finally:
        run.close()
