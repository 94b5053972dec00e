"""The streamed digest (issue #48's end of a fit): a cluster's ``model_digest`` taken from its servers' key-order
exports merged a chunk at a time is the digest of every server's whole export, the same bytes, with several tables
and servers, under ``--ft none`` and ``ec`` with a server killed and rebuilt, budgeted or not; in one process a
budgeted run streams its tables too."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List, Optional

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from support.examples import load_example  # noqa: E402
from support.ft_runs import make_trainer, small_config  # noqa: E402
from xdl_ec.builtin.criteo_job import criteo_job  # noqa: E402
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ft.failure_injector import FailureInjector  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.job.local_run import LocalRun  # noqa: E402
from xdl_ec.model.digest import model_digest  # noqa: E402
from xdl_ec.model.key_order_merge import merge_key_order  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402
from xdl_ec.sparse.memory_budget import MemoryBudget  # noqa: E402

STEPS = 6
example = load_example("user_item_tags")  # three tables (dims 16, 16, 8)
LOG = example.ClickLog(batch_size=64, batches=STEPS, eval_batches=1)


@pytest.mark.parametrize(
    "servers,ec,kills,budget",
    [
        (3, False, [], None),
        (3, True, [Kill(3, "server", 1)], None),
        (4, True, [Kill(2, "server", 0)], "256K"),
    ],
)
def test_the_streamed_digest_is_the_digest_of_the_whole_exports(
    tmp_path: Path, servers: int, ec: bool, kills: List[Kill], budget: Optional[str]
) -> None:
    memory = None if budget is None else MemoryBudget(budget, str(tmp_path))
    trainer = PSTrainer(
        example.make_job(LOG).spec,
        ClusterConfig(servers=servers, workers=1, memory=memory),
        RunSettings(3, True),
        ErasureCoded(2, 1) if ec else None,
        FailureInjector(FailureSchedule(kills)) if kills else None,
    )
    try:
        trainer.fit()
        tables = [t.name for t in trainer.job.tables]
        assert len(tables) > 1
        whole = trainer.digest_of([trainer.scheduler.exports(t) for t in tables])
        assert trainer.digest() == whole  # the default chunks
        # chunks far smaller than a server's rows: every server's stream is many chunks, merged across servers
        small = [merge_key_order(trainer.scheduler.key_order_exports(t, chunk_rows=97)) for t in tables]
        assert trainer.digest_streamed(small) == whole
        merged = list(merge_key_order(trainer.scheduler.key_order_exports(tables[0], chunk_rows=97)))
        keys = np.concatenate([m["keys"] for m in merged])
        assert np.all(np.diff(keys) > 0) and keys.size == sum(
            e["keys"].size for e in trainer.scheduler.exports(tables[0])
        )
        assert max(m["keys"].size for m in merged) <= 97 * servers
    finally:
        trainer.close()


def test_a_budgeted_run_in_one_process_streams_the_same_digest(tmp_path: Path) -> None:
    config = small_config(steps=STEPS)
    run = LocalRun(criteo_job(config).spec, RunSettings(config.seed, True), memory=MemoryBudget("64K", str(tmp_path)))
    try:
        run.fit(STEPS)
        dense = run.worker.built_dense
        whole = model_digest(
            [[t.export()] for t in run.tables.tables.values()], dense.model.weights, dense.optimizer.variables
        )
        assert run.digest() == whole
    finally:
        run.close()
        run.tables.close()


def test_a_server_export_in_key_order_starts_at_row_zero(tmp_path: Any) -> None:
    trainer = make_trainer(small_config(steps=2), ClusterConfig(servers=2, workers=1))
    try:
        trainer.fit()
        from xdl_ec.ps.api import ServerAPI
        from xdl_ec.ps.remote import Remote

        server = Remote(trainer.scheduler.servers[0], ServerAPI)
        table = trainer.job.tables[0].name
        with pytest.raises(ValueError, match="no key-order export under way at row 5; start one at row 0"):
            server.export_key_order(table, 5, 10).result(60.0)
        first = server.export_key_order(table, 0, 10).result(60.0)
        assert first["rows"] > 10 and np.all(np.diff(first["keys"]) > 0)
    finally:
        trainer.close()
