"""``--ft cpr``: only the lost server reloads its shard from its own full + partial saves; the run goes on to the
end and reports what it lost (updates, samples) and its accuracy."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from support.ft_runs import make_trainer  # noqa: E402
from support.ft_runs import run as run_trainer
from support.ft_runs import small_config as base_config  # noqa: E402
from support.paths import REPO_ROOT  # noqa: E402
from xdl_ec.ft.configs import CprConfig  # noqa: E402
from xdl_ec.ft.cpr_strategy import PartialRecovery  # noqa: E402
from xdl_ec.ft.factory import make_strategy  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule  # noqa: E402
from xdl_ec.ps import ClusterConfig  # noqa: E402

STEPS = 16
RUN = dict(synthetic_rows=4000, steps=STEPS, seed=11)


def small_config(**kwargs):  # noqa: ANN201
    return base_config(**{**RUN, **kwargs})


@pytest.mark.parametrize("mode", ["mfu", "ssu"])
def test_runs_to_the_end_reporting_lost_updates_samples_and_auc(mode: str, tmp_path: Path, failure_free: Any) -> None:
    strategy = make_strategy(CprConfig(interval_steps=3, mode=mode, directory=str(tmp_path)))
    report = run_trainer(
        make_trainer(small_config(), ClusterConfig(servers=3, workers=2), strategy, FailureSchedule.from_flags(["6:1"]))
    )
    assert report["ft"] == "cpr" and report["steps"] == STEPS // 2 and report["samples"] == STEPS * 64
    [failure] = report["failures"]
    assert (failure["step"], failure["role"], failure["index"]) == (6, "server", 1)
    # a full save after step 0, a partial one after step 3: steps 1..5 (two workers each) lost some or all of
    # their updates to server 1
    assert report["lost_samples"] == failure["lost_samples"] == 5 * 2 * 64
    assert report["lost_updates"] > 0
    assert report["cpr"]["mode"] == mode and report["cpr"]["saves"] == 3 and report["cpr"]["full_saves"] == 1
    assert report["checkpoint_seconds"] > 0
    assert report["auc"] is not None and 0.0 <= report["auc"] <= 1.0 and np.isfinite(report["logloss"])
    # nothing was rolled back, so the lost updates show in the model
    assert report["model_digest"] != failure_free(3, 2, **RUN)["model_digest"]
    assert (tmp_path / "server-0001").is_dir()


def test_full_save_every_step_loses_nothing_and_matches_the_failure_free_run(tmp_path: Path, failure_free: Any) -> None:
    """With a full save at every step boundary the reloaded shard is exactly the lost one: the retried step then
    ends in the failure-free digest (the partial-recovery path is bit-exact; only staleness loses updates)."""
    strategy = PartialRecovery(interval_steps=1, full_every=1, directory=str(tmp_path))
    report = run_trainer(
        make_trainer(
            small_config(), ClusterConfig(servers=3, workers=1), strategy, FailureSchedule.from_flags(["5:2", "9:0"])
        )
    )
    assert [f["index"] for f in report["failures"]] == [2, 0]
    assert report["lost_updates"] == 0 and report["lost_samples"] == 0
    assert report["model_digest"] == failure_free(3, 1, **RUN)["model_digest"]


def test_a_longer_interval_loses_more_updates(tmp_path: Path) -> None:
    lost = []
    for interval in (2, 6):
        strategy = PartialRecovery(interval_steps=interval, full_every=1, directory=str(tmp_path / str(interval)))
        report = run_trainer(
            make_trainer(small_config(), ClusterConfig(servers=2), strategy, FailureSchedule.from_flags(["12:1"]))
        )
        lost.append(report["lost_updates"])
        assert report["lost_samples"] == ((12 - 1) % interval) * 64
    assert 0 < lost[0] < lost[1]


def test_interval_from_pls_and_mtbf() -> None:
    strategy = PartialRecovery(pls=0.01, mtbf=100.0)
    trainer = make_trainer(small_config(steps=2), ClusterConfig(servers=4), strategy)
    try:
        assert strategy.interval_seconds == pytest.approx(2 * 4 * 100.0 * 0.01)
    finally:
        trainer.close()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(), "give --mtbf, or --cpr-interval"),
        (dict(mtbf=10.0, pls=1.5), "target_pls must be < 1"),
        (dict(interval_steps=2, mode="lru"), "--cpr-mode: must be one of"),
    ],
)
def test_bad_configuration_is_a_clear_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PartialRecovery(**kwargs)


def test_seeded_mtbf_failures_hit_servers_and_the_run_finishes(tmp_path: Path) -> None:
    strategy = PartialRecovery(interval_steps=2, directory=str(tmp_path))
    schedule = FailureSchedule(mtbf=0.005, seed=4)  # a failure at nearly every step boundary
    report = run_trainer(make_trainer(small_config(steps=8), ClusterConfig(servers=2), strategy, schedule))
    assert report["steps"] == 8 and len(report["failures"]) >= 2
    assert all(f["role"] == "server" and f["index"] in (0, 1) for f in report["failures"])
    fired = [k.index for k, _ in schedule.fired]
    assert fired == [f["index"] for f in report["failures"]]
    assert fired == [index for _, index in schedule.mtbf_times(len(fired))]  # the seed picks the victims


def test_lost_updates_count_exactly_the_row_updates_since_the_save(tmp_path: Path) -> None:
    from xdl_ec import _core
    from xdl_ec.builtin.criteo_job import open_training_data, train_batch_stream

    config = small_config()
    strategy = PartialRecovery(interval_steps=4, full_every=1, directory=str(tmp_path))
    report = run_trainer(make_trainer(config, ClusterConfig(servers=2), strategy, FailureSchedule.from_flags(["11:1"])))
    # full saves after steps 0, 4 and 8: the failure before step 11 loses server 1's updates of steps 9 and 10,
    # one per distinct key of each batch that server 1 owns
    batches = list(train_batch_stream(open_training_data(config), config, 10))
    expected = sum(
        int(np.count_nonzero(_core.server_of(np.unique(b.sparse.reshape(-1)), 2) == 1)) for b in batches[8:10]
    )
    assert expected > 0 and report["lost_updates"] == expected
    assert report["lost_samples"] == 2 * 64


def test_lost_samples_count_each_sample_once_and_never_exceed_the_samples_trained(tmp_path: Path) -> None:
    """One full save (step 0), then server 1 lost before step 6, server 2 before step 8 and server 1 again before
    step 12: server 1 loses samples 0..5*64, server 2 samples 0..7*64 (2*64 not counted yet), server 1 again the
    samples since its reload, 5*64..11*64 (4*64 not counted yet). Summing each failure's window since the save
    (the old upper bound) would count 5 + 7 + 11 = 23 batches out of 16 trained."""
    strategy = PartialRecovery(interval_steps=100, directory=str(tmp_path))
    report = run_trainer(
        make_trainer(
            small_config(),
            ClusterConfig(servers=3, workers=1),
            strategy,
            FailureSchedule.from_flags(["6:1", "8:2", "12:1"]),
        )
    )
    assert [(f["index"], f["step"]) for f in report["failures"]] == [(1, 6), (2, 8), (1, 12)]
    assert [f["lost_samples"] for f in report["failures"]] == [5 * 64, 2 * 64, 4 * 64]
    assert report["lost_samples"] == 11 * 64 <= report["samples"] == STEPS * 64
    assert report["cpr"]["saves"] == 1


@pytest.mark.ray
def test_cpr_on_ray_reloads_the_killed_actor_shard_and_finishes(tmp_path: Path, failure_free: Any) -> None:
    ray = pytest.importorskip("ray")
    from xdl_ec.ps.backend import ray_runtime_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=ray_runtime_env())
    try:
        strategy = PartialRecovery(interval_steps=3, directory=str(tmp_path))
        report = run_trainer(
            make_trainer(
                small_config(),
                ClusterConfig(servers=3, workers=2, backend="ray"),
                strategy,
                FailureSchedule.from_flags(["6:1"]),
            )
        )
    finally:
        ray.shutdown()
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 1)]
    assert report["steps"] == STEPS // 2 and report["samples"] == STEPS * 64
    assert report["lost_updates"] > 0 and report["lost_samples"] == 5 * 2 * 64
    assert report["model_digest"] != failure_free(3, 2, **RUN)["model_digest"] and report["auc"] is not None


def test_cli_cpr_run_with_ssu_reports_its_losses(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "xdl_ec",
            "train",
            "--synthetic",
            "--synthetic-rows",
            "2000",
            "--steps",
            "8",
            "--batch-size",
            "64",
            "--servers",
            "2",
            "--ft",
            "cpr",
            "--cpr-interval",
            "3",
            "--cpr-mode",
            "ssu",
            "--fail-at",
            "6:0",
            "--no-progress",
            "--report",
            str(report_path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "cpr: server 0 lost at step 6" in proc.stdout and "row updates lost" in proc.stdout
    report = json.loads(report_path.read_text())
    assert report["cpr"]["mode"] == "ssu" and report["lost_updates"] > 0 and report["lost_samples"] == 5 * 64
