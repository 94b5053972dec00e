"""``--ft ckpt``: periodic job checkpoints and a global rollback. A server killed mid-run (for real: its object
dropped) is replaced, every server and the dense state roll back to the last checkpoint, the readers rewind, and
the replay ends in the failure-free run's model_digest (sync, --deterministic, one-process backend). A restarted
worker continues from its reader position."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from support.ft_runs import (  # noqa: E402
    make_trainer,
    small_config,  # noqa: E402
)
from support.ft_runs import run as run_trainer
from support.paths import REPO_ROOT  # noqa: E402
from xdl_ec.ft.ckpt_strategy import Checkpointing  # noqa: E402
from xdl_ec.ft.configs import CkptConfig  # noqa: E402
from xdl_ec.ft.factory import make_strategy  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule  # noqa: E402
from xdl_ec.keep.checkpoint import CheckpointStore  # noqa: E402
from xdl_ec.ps import ClusterConfig  # noqa: E402

STEPS = 10


@pytest.mark.parametrize("workers", [1, 2])
def test_server_killed_mid_run_rolls_back_and_replays_to_the_failure_free_digest(
    workers: int, tmp_path: Path, failure_free: Any
) -> None:
    strategy = Checkpointing("3", str(tmp_path / "ckpt"))
    report = run_trainer(
        make_trainer(
            small_config(), ClusterConfig(servers=3, workers=workers), strategy, FailureSchedule.from_flags(["5:1"])
        )
    )
    steps = STEPS // workers
    assert report["ft"] == "ckpt" and report["steps"] == steps
    [failure] = report["failures"]
    assert failure["step"] == 5 and failure["role"] == "server" and failure["index"] == 1
    # checkpoints after steps 0 and 3: the failure at step 5 re-trains step 4 (one batch per worker)
    assert report["lost_samples"] == workers * 64 == failure["lost_samples"]
    assert report["samples"] == (steps + 1) * workers * 64
    assert report["checkpoint_seconds"] > 0 and report["checkpoint"]["saves"] == 1 + steps // 3
    assert report["model_digest"] == failure_free(3, workers)["model_digest"]
    assert (tmp_path / "ckpt").is_dir() and CheckpointStore(tmp_path / "ckpt").latest() is not None


def test_two_failures_and_a_restarted_worker_still_end_exact(tmp_path: Path, failure_free: Any) -> None:
    strategy = make_strategy(CkptConfig(interval="2", directory=str(tmp_path)))
    schedule = FailureSchedule.from_flags(["2:0", "4:2"], ["3:1"])
    report = run_trainer(make_trainer(small_config(), ClusterConfig(servers=3, workers=2), strategy, schedule))
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 0), ("worker", 1), ("server", 2)]
    assert report["model_digest"] == failure_free(3, 2)["model_digest"]


def test_failure_before_any_periodic_save_rolls_back_to_step_zero(tmp_path: Path, failure_free: Any) -> None:
    report = run_trainer(
        make_trainer(
            small_config(),
            ClusterConfig(servers=2),
            Checkpointing("100", str(tmp_path)),
            FailureSchedule.from_flags(["4:1"]),
        )
    )
    assert report["lost_samples"] == 3 * 64  # steps 1..3 re-trained from the step-0 checkpoint
    assert report["model_digest"] == failure_free(2, 1)["model_digest"]


def test_two_rollbacks_to_one_checkpoint_count_each_retrained_sample_once(tmp_path: Path, failure_free: Any) -> None:
    """Both failures roll back to the step-0 checkpoint: the first re-trains steps 1..2, the second the steps 1..4
    trained again since, and the samples trained beyond the failure-free run are exactly those."""
    report = run_trainer(
        make_trainer(
            small_config(),
            ClusterConfig(servers=2),
            Checkpointing("100", str(tmp_path)),
            FailureSchedule.from_flags(["3:0", "5:1"]),
        )
    )
    assert [f["lost_samples"] for f in report["failures"]] == [2 * 64, 4 * 64]
    assert report["lost_samples"] == report["samples"] - STEPS * 64
    assert report["model_digest"] == failure_free(2, 1)["model_digest"]


def test_auto_interval_uses_youngs_formula_from_the_measured_save_cost(tmp_path: Path) -> None:
    strategy = Checkpointing("auto", str(tmp_path), mtbf=3600.0)
    report = run_trainer(make_trainer(small_config(steps=4), ClusterConfig(servers=2), strategy))
    cost = report["checkpoint"]["save_seconds"]
    assert cost > 0 and report["checkpoint"]["interval_seconds"] == pytest.approx((2 * cost * 3600.0) ** 0.5)
    assert report["failures"] == [] and report["lost_samples"] == 0


def test_corrupt_checkpoint_is_a_clear_error_naming_the_file(tmp_path: Path) -> None:
    from xdl_ec.ps import Unrecoverable  # noqa: F401 - the rollback error type

    strategy = Checkpointing("100", str(tmp_path))
    trainer = make_trainer(small_config(), ClusterConfig(servers=2), strategy, FailureSchedule.from_flags(["3:0"]))
    latest = CheckpointStore(tmp_path).latest()
    victim = next(latest.server(1).directory.glob("*.values.npy"))
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{victim.name}: sha256 mismatch"):
        run_trainer(trainer)


def test_cli_ckpt_run_reports_the_failure(tmp_path: Path) -> None:
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
            "6",
            "--batch-size",
            "64",
            "--servers",
            "2",
            "--ft",
            "ckpt",
            "--ckpt-interval",
            "2",
            "--ckpt-dir",
            str(tmp_path / "c"),
            "--fail-at",
            "4:1",
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
    assert "ckpt: server 1 lost at step 4" in proc.stdout
    report = json.loads(report_path.read_text())
    assert report["ft"] == "ckpt" and report["failures"][0]["index"] == 1 and report["lost_samples"] == 64


def test_restarted_workers_continue_from_their_reader_position(tmp_path: Path, failure_free: Any) -> None:
    """Only workers die: no rollback, each new worker takes over its predecessor's reader position, so no sample
    is lost or trained twice and the model is the failure-free one."""
    strategy = Checkpointing("100", str(tmp_path))
    report = run_trainer(
        make_trainer(
            small_config(),
            ClusterConfig(servers=3, workers=2),
            strategy,
            FailureSchedule.from_flags([], ["2:1", "4:0"]),
        )
    )
    assert [(f["role"], f["index"], f["step"]) for f in report["failures"]] == [("worker", 1, 2), ("worker", 0, 4)]
    assert report["lost_samples"] == 0 and report["samples"] == STEPS * 64
    assert [w["steps"] for w in report["workers"]] == [2, 4]  # the new workers trained steps 4-5 and 2-5
    assert report["model_digest"] == failure_free(3, 2)["model_digest"]


def test_async_mode_recovers_and_trains_every_batch_once(tmp_path: Path) -> None:
    strategy = Checkpointing("4", str(tmp_path))
    report = run_trainer(
        make_trainer(
            small_config(deterministic=False),
            ClusterConfig(servers=2, workers=2, mode="async"),
            strategy,
            FailureSchedule.from_flags(["6:1"], ["3:0"]),
        )
    )
    assert [f["role"] for f in report["failures"]] == ["worker", "server"]
    assert report["samples"] == STEPS * 64 + report["lost_samples"]
    # async step numbers are handed out at dispatch: a step that failed in flight leaves its number unused
    assert STEPS <= report["steps"] <= STEPS + 2 and np.isfinite(report["final_loss"])
    # the driver held new steps for the save due after step 4: the rollback went there, not to step 0
    assert report["checkpoint"]["saves"] >= 3 and report["lost_samples"] < 5 * 64


@pytest.mark.ray
def test_ckpt_on_ray_kills_the_actor_process_and_replays_exactly(tmp_path: Path, failure_free: Any) -> None:
    ray = pytest.importorskip("ray")
    from xdl_ec.ps.backend import ray_runtime_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=ray_runtime_env())
    try:
        report = run_trainer(
            make_trainer(
                small_config(),
                ClusterConfig(servers=3, workers=2, backend="ray"),
                Checkpointing("2", str(tmp_path)),
                FailureSchedule.from_flags(["4:1"]),
            )
        )
    finally:
        ray.shutdown()
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 1)]
    assert report["lost_samples"] == 2 * 64
    assert report["model_digest"] == failure_free(3, 2)["model_digest"]


def test_a_server_and_a_worker_lost_in_the_same_step_and_a_seconds_interval(tmp_path: Path, failure_free: Any) -> None:
    strategy = Checkpointing("0.001s", str(tmp_path))  # a save at every step boundary
    report = run_trainer(
        make_trainer(
            small_config(), ClusterConfig(servers=3, workers=2), strategy, FailureSchedule.from_flags(["3:2"], ["3:1"])
        )
    )
    assert sorted((f["role"], f["index"]) for f in report["failures"]) == [("server", 2), ("worker", 1)]
    assert report["checkpoint"]["saves"] == 1 + STEPS // 2 and report["lost_samples"] == 0
    assert report["model_digest"] == failure_free(3, 2)["model_digest"]
