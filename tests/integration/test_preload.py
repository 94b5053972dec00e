"""A bulk preload of a table's rows before training (``Job.fit(preload=...)``, ``xdl-ec train --synthetic-preload``;
issue #48's benchmark 2 loads 188M rows this way).

The invariant a preload keeps: every preloaded key gets the row a step's first pull would create (its initializer's,
a function of the table's seed and the key alone, with fresh optimizer state), so every step reads what it reads
without the preload. Hence the preloaded run's rows of every key the lazy run touched equal the lazy run's, its other
rows are their initializer's, and its dense model is the lazy run's. The reference digest of a preloaded run is the
one-process preloaded run's: a preload on ec servers under a budget (most rows on disk), with a server killed after
it, trains that model bit for bit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.builtin.criteo_job import TABLE_NAME, TrainConfig, criteo_job, synthetic_preload  # noqa: E402
from xdl_ec.cli import main  # noqa: E402
from xdl_ec.data.synthetic import SyntheticCriteo  # noqa: E402
from xdl_ec.sparse.table import EmbeddingTable  # noqa: E402

CARDINALITY = 300  # every column's cap: 26 columns, 4,200 ids (a few columns have fewer values)
CONFIG: Dict[str, Any] = dict(synthetic=True, synthetic_max_cardinality=CARDINALITY, synthetic_rows=4000, seed=3)


def _config(**extra: Any) -> TrainConfig:
    return TrainConfig(**{**CONFIG, **extra})


def _rows(export_parts: Any) -> Dict[int, np.ndarray]:
    rows = {}
    for part in export_parts:
        for k, v, s in zip(part["keys"], part["values"], part["state"]):
            rows[int(k)] = np.concatenate([v, s])
    return rows


def test_key_chunks_are_every_id_the_data_draws() -> None:
    gen = SyntheticCriteo(3, max_cardinality=CARDINALITY)
    chunks = list(gen.key_chunks(1000))
    assert max(c.size for c in chunks) <= 1000
    keys = np.concatenate(chunks)
    assert keys.size == int(gen.cardinalities.sum()) == np.unique(keys).size
    drawn = gen.batch(0, 2000).sparse.reshape(-1)
    assert np.isin(drawn, keys).all()


def test_criteo_1tb_tables_and_their_scale() -> None:
    full = SyntheticCriteo(0, tables="criteo-1tb")
    assert int(full.cardinalities.sum()) == 187_767_399 and int(full.cardinalities.max()) == 39_979_771
    small = SyntheticCriteo(0, tables="criteo-1tb", table_scale=0.001)
    assert small.cardinalities.tolist()[:3] == [39885, 40, 18]  # rounded up, at least 1
    with pytest.raises(ValueError, match="tables: must be one of"):
        SyntheticCriteo(0, tables="criteo")
    with pytest.raises(ValueError, match=r"table_scale: must be in \(0, 1\]"):
        SyntheticCriteo(0, table_scale=1.5)


def test_preload_needs_synthetic_data_and_known_tables() -> None:
    with pytest.raises(ValueError, match="synthetic_preload: .* needs synthetic=True"):
        TrainConfig(data="x.tsv", synthetic_preload=True)
    job = criteo_job(_config())
    with pytest.raises(ValueError, match="preload: the job has no table 'nope'"):
        job.fit(steps=1, preload={"nope": lambda: iter([])})


@pytest.mark.slow
def test_a_preloaded_run_reads_what_the_lazy_run_reads() -> None:
    config = _config()
    lazy_job = criteo_job(config)
    lazy = lazy_job.fit(steps=15, deterministic=True, seed=3)
    loaded_job = criteo_job(config)
    loaded = loaded_job.fit(steps=15, deterministic=True, seed=3, preload=synthetic_preload(config))
    ids = int(SyntheticCriteo(3, max_cardinality=CARDINALITY).cardinalities.sum())
    assert loaded["preload"][TABLE_NAME]["rows"] == ids == loaded["embedding_rows"]
    assert lazy["embedding_rows"] < ids  # the lazy run left ids untouched: the preload made their rows
    assert loaded["final_loss"] == lazy["final_loss"]
    for mine, theirs in zip(loaded_job.model.dense.model.weights, lazy_job.model.dense.model.weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())  # the same dense model
    lazy_rows = _rows(lazy_job.model.exports()[0])
    loaded_rows = _rows(loaded_job.model.exports()[0])
    assert set(lazy_rows) < set(loaded_rows)
    for key, row in lazy_rows.items():
        np.testing.assert_array_equal(loaded_rows[key], row)
    untouched = np.array(sorted(set(loaded_rows) - set(lazy_rows)), dtype=np.int64)
    fresh = EmbeddingTable.from_config(loaded_job.spec.tables[0])
    fresh.pull(untouched)  # a first pull creates each row: its initializer's, with fresh optimizer state
    fresh_rows = _rows([fresh.export()])
    for key in untouched.tolist():
        np.testing.assert_array_equal(loaded_rows[key], fresh_rows[key])


def test_ec_with_a_kill_after_a_preload_under_a_budget_trains_the_one_process_model(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    spill.mkdir()
    # 2,000 values a column (31,187 ids): most of them past the servers' budgets whatever a step's batch holds
    train = ["train", "--synthetic", "--synthetic-max-cardinality", "2000", "--synthetic-rows", "4000"]
    train += ["--synthetic-preload", "--deterministic", "--seed", "3", "--steps", "16"]
    assert main([*train, "--report", str(tmp_path / "here.json")]) == 0
    cluster = ["--servers", "3", "--ft", "ec", "--code", "2,1", "--fail-at", "6:1"]
    budget = ["--memory-budget", "64K", "--spill-dir", str(spill)]
    assert main([*train, *cluster, *budget, "--report", str(tmp_path / "ec.json")]) == 0
    here, ec = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("here", "ec"))
    assert ec["model_digest"] == here["model_digest"]
    assert len(ec["failures"]) == 1 and ec["failures"][0]["step"] == 6  # the kill came after the preload
    assert ec["preload"][TABLE_NAME]["rows"] == here["preload"][TABLE_NAME]["rows"] == here["embedding_rows"]
    tier = ec["tables"][TABLE_NAME]
    assert tier["rows_on_disk"] > tier["rows_in_memory"]  # the preloaded rows went to the spill files


@pytest.mark.slow
def test_a_resumed_run_is_not_preloaded_again(tmp_path: Path) -> None:
    config = _config()
    first = criteo_job(config).fit(
        steps=6, deterministic=True, seed=3, save_dir=tmp_path / "saves", preload=synthetic_preload(config)
    )
    assert first["preload"][TABLE_NAME]["rows"] == first["embedding_rows"]
    resumed = criteo_job(config).fit(
        steps=10, deterministic=True, seed=3, resume=tmp_path / "saves", preload=synthetic_preload(config)
    )
    assert "preload" not in resumed  # the save held the preloaded rows
    whole = criteo_job(config).fit(steps=10, deterministic=True, seed=3, preload=synthetic_preload(config))
    assert resumed["model_digest"] == whole["model_digest"]
