"""Tables larger than memory (issue #48): a run whose tables keep only a budget of RAM, the rest of their rows in
spill files, trains the unbudgeted run's model bit for bit, in one process and on servers, under ``--ft none`` and
``ec`` with a server killed (rebuilt from the survivors' rows and parity, read through their tiers); its report has
the tier's counts; a bad budget or spill dir is a clear error before training."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.ft_runs import make_trainer, small_config  # noqa: E402
from xdl_ec.builtin.criteo_job import criteo_job  # noqa: E402
from xdl_ec.cli import main  # noqa: E402
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ps import ClusterConfig  # noqa: E402
from xdl_ec.sparse.memory_budget import MemoryBudget  # noqa: E402

STEPS = 8
BUDGET = "48K"  # a few hundred of the ~20k rows of small_config's table: nearly every row lives on disk
TIER_KEYS = {"rows_in_memory", "rows_on_disk", "disk_bytes", "disk_read_bytes", "disk_write_bytes", "memory_hit_rate"}


def _check_tier(report: Any) -> None:
    for entry in report["tables"].values():
        assert TIER_KEYS <= set(entry)
        assert entry["rows_on_disk"] > entry["rows_in_memory"] > 0
        assert entry["disk_read_bytes"] > 0 and entry["disk_write_bytes"] > 0
        assert 0.0 <= entry["memory_hit_rate"] < 1.0


def test_fit_in_one_process_with_a_budget_trains_the_same_model(tmp_path: Path) -> None:
    config = small_config(steps=STEPS)
    plain = criteo_job(config).fit(deterministic=True, seed=config.seed)
    budgeted = criteo_job(config).fit(deterministic=True, seed=config.seed, memory_budget=BUDGET, spill_dir=tmp_path)
    assert budgeted["model_digest"] == plain["model_digest"]
    _check_tier(budgeted)
    assert budgeted["memory"]["budget_bytes"] == 48 << 10 and budgeted["memory"]["peak_rss_bytes"] > 0
    assert "memory" not in plain and "tables" not in plain
    assert list(tmp_path.iterdir()) == []  # the spill files are unlinked when made


@pytest.mark.parametrize("kills", [[], [Kill(4, "server", 1)]])
def test_servers_with_a_budget_train_the_same_model_under_ec(
    failure_free: Any, tmp_path: Path, kills: List[Kill]
) -> None:
    strategy = ErasureCoded(2, 1)
    trainer = make_trainer(
        small_config(steps=STEPS),
        ClusterConfig(servers=3, workers=1, memory=MemoryBudget(BUDGET, str(tmp_path))),
        strategy=strategy,
        failures=FailureSchedule(kills),
    )
    try:
        trainer.fit()
        digest = trainer.digest()
        report = trainer.report()
        assert strategy.verify() == []  # parity agrees with the records, which were read through the tiers
    finally:
        trainer.close()
    assert digest == failure_free(3, 1, steps=STEPS)["model_digest"]
    _check_tier(report)
    assert all(s["memory"]["budget_bytes"] == 48 << 10 for s in report["servers"])


def test_cluster_without_ft_with_a_budget_trains_the_same_model(failure_free: Any, tmp_path: Path) -> None:
    config = small_config(steps=STEPS)
    cluster = xdl_ec.Cluster(servers=3, memory_budget=BUDGET, spill_dir=str(tmp_path))
    report = criteo_job(config).fit(cluster=cluster, deterministic=True, seed=config.seed)
    assert report["model_digest"] == failure_free(3, 1, steps=STEPS)["model_digest"]
    _check_tier(report)


def test_bad_budgets_and_spill_dirs_are_clear_errors(tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(ValueError, match="give both"):
        xdl_ec.Cluster(servers=2, memory_budget="1G")
    with pytest.raises(ValueError, match="does not exist"):
        xdl_ec.Cluster(servers=2, memory_budget="1G", spill_dir=str(tmp_path / "missing"))
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        MemoryBudget("1G", str(a_file))
    with pytest.raises(ValueError, match="expected a size"):
        MemoryBudget("lots", str(tmp_path))
    # the core's minimum (64 rows with their optimizer state), named
    with pytest.raises(ValueError, match="below the minimum of"):
        criteo_job(small_config(steps=2)).fit(memory_budget=1000, spill_dir=tmp_path)
    # the CLI: before training, naming the flag's directory
    missing = tmp_path / "nowhere"
    code = main(["train", "--synthetic", "--steps", "2", "--memory-budget", "1G", "--spill-dir", str(missing)])
    assert code != 0
    assert str(missing) in capsys.readouterr().err
    code = main(["train", "--synthetic", "--steps", "2", "--memory-budget", "1G"])
    assert code != 0
    assert "give both" in capsys.readouterr().err


def test_cli_trains_with_a_budget_in_one_process(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    spill = tmp_path / "spill"
    spill.mkdir()
    args = ["train", "--synthetic", "--steps", "6", "--deterministic", "--seed", "3"]
    assert main([*args, "--report", str(tmp_path / "plain.json")]) == 0
    assert main([*args, "--memory-budget", "256K", "--spill-dir", str(spill), "--report", str(report_path)]) == 0
    plain = json.loads((tmp_path / "plain.json").read_text())
    budgeted = json.loads(report_path.read_text())
    assert budgeted["model_digest"] == plain["model_digest"]
    assert budgeted["memory"]["budget_bytes"] == 256 << 10
    assert all(TIER_KEYS <= set(entry) for entry in budgeted["tables"].values())
