"""The trained model of a budgeted cluster run (issue #48's end of a fit): the driver copies the servers' rows as the
streamed digest reads them into tables under the same budget (the rest in the spill dir), so a table larger than
RAM stays so; predictions, evaluation, exports and a save of it are the in-RAM model's, and its spill files go with
it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402
from xdl_ec.job.local_tables import LocalTables  # noqa: E402
from xdl_ec.sparse.memory_budget import MemoryBudget  # noqa: E402

example = load_example("user_item_tags")
LOG = example.ClickLog(batch_size=256, batches=4, eval_batches=1)
BUDGET = "96K"  # the driver's copy holds a fraction of the larger tables' rows in RAM


def _fit(cluster: xdl_ec.Cluster) -> "tuple[xdl_ec.Job, dict]":
    job = example.make_job(LOG)
    return job, job.fit(cluster=cluster, deterministic=True, seed=3)


def test_a_budgeted_cluster_runs_model_is_the_in_memory_one(tmp_path: Path) -> None:
    plain_job, plain = _fit(xdl_ec.Cluster(servers=3))
    job, budgeted = _fit(xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), memory_budget=BUDGET, spill_dir=str(tmp_path)))
    try:
        assert budgeted["model_digest"] == plain["model_digest"]
        model, reference = job.model, plain_job.model
        assert model is not None and reference is not None
        on_disk = 0
        for name, table in model.tables.tables.items():
            assert table.tiered  # the driver's copy keeps the budget too
            on_disk += table.tier_counts()["rows_on_disk"]
            assert len(table) == len(reference.tables.tables[name])
        assert on_disk > 0
        for a, b in zip(model.exports(), reference.exports()):
            a_rows, b_rows = a[0], b[0]
            order_a, order_b = np.argsort(a_rows["keys"]), np.argsort(b_rows["keys"])
            for field in ("keys", "values", "state"):
                assert np.array_equal(a_rows[field][order_a], b_rows[field][order_b])
        holdout = list(LOG.holdout())
        assert job.evaluate(holdout) == plain_job.evaluate(holdout)
        for batch in holdout:
            assert np.array_equal(job.predict(batch), plain_job.predict(batch))
        saved = xdl_ec.load(job.save(tmp_path / "saves"), job=example.make_job(LOG))
        try:
            assert saved.exports()[0][0]["keys"].size == len(reference.tables.tables["users"])
        finally:
            saved.close()
    finally:
        job._close_model()
        plain_job._close_model()
    assert list(tmp_path.glob("*.spill*")) == [] and not any(p.is_file() for p in tmp_path.iterdir())


def test_a_copy_into_a_spill_dir_gone_is_a_clear_error(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    spill.mkdir()
    memory = MemoryBudget("64K", str(spill))
    spill.rmdir()  # removed after the run checked it: the copy's tables cannot make their files
    job = example.make_job(LOG)
    with pytest.raises((ValueError, RuntimeError), match=str(spill)):
        LocalTables(job.spec.tables, memory, reserve=False)
