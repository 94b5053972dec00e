"""The backstop under ec (issue #15 part 4): incremental saves in the background cover what parity cannot: more
than r servers lost at once stops the run naming the save to resume from, and resuming from it ends at the
failure-free model; so does losing the driver process itself (SIGKILL, on Ray)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402
from support.paths import REPO_ROOT  # noqa: E402
from xdl_ec.cli import main  # noqa: E402
from xdl_ec.ps.fault_tolerance import Unrecoverable  # noqa: E402

example = load_example("user_item_tags")
LOG = example.ClickLog(batch_size=64, batches=16, eval_batches=2)
STEPS, SEED = 16, 3
EC = dict(servers=3, ft="ec", code=(2, 1))


def job() -> xdl_ec.Job:
    return example.make_job(LOG)


@pytest.fixture(scope="module")
def failure_free_digest() -> str:
    return job().fit(steps=STEPS, deterministic=True, seed=SEED)["model_digest"]


def test_losing_more_than_r_servers_names_the_backstop_and_resuming_ends_at_the_failure_free_model(
    tmp_path: Path, failure_free_digest: str
) -> None:
    doomed = xdl_ec.Cluster(**EC, fail_at=["11:0", "11:1"])  # r + 1 = 2 servers at once
    with pytest.raises(
        Unrecoverable,
        match=rf"resume from the backstop: .*--resume {tmp_path} \(its newest save is "
        rf"of step 9",
    ):
        job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=doomed, save_dir=tmp_path, backstop_every="3")
    # the step-9 save is an increment over the full save of step 3: all three are kept, nothing else
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "STOPPED.json",
        "ckpt-000001-step-000000000003",
        "ckpt-000002-step-000000000006",
        "ckpt-000003-step-000000000009",
    ]
    assert json.loads((tmp_path / "STOPPED.json").read_text())["step"] == 10
    report = job().fit(
        steps=STEPS,
        deterministic=True,
        seed=SEED,
        cluster=xdl_ec.Cluster(**EC),
        resume=tmp_path,
        save_dir=tmp_path,
        backstop_every="3",
    )
    assert report["resumed_from"]["step"] == 9 and report["samples"] == (STEPS - 9) * LOG.batch_size
    assert report["retrained_samples"] == (10 - 9) * LOG.batch_size  # the stopped run had trained step 10
    assert report["model_digest"] == failure_free_digest
    increments = report["saves"]["increments"]
    assert [(i["step"], i["full"]) for i in increments] == [(12, True), (15, False), (16, False)]
    assert increments[1]["rows"] < increments[0]["rows"]  # an increment writes the rows changed, not the table
    # a full save deletes the chains before it
    assert sorted(p.name for p in tmp_path.glob("ckpt-*"))[0] == "ckpt-000004-step-000000000012"


def test_an_increment_resumes_with_the_newest_row_of_every_key(tmp_path: Path, failure_free_digest: str) -> None:
    job().fit(
        steps=STEPS, deterministic=True, seed=SEED, cluster=xdl_ec.Cluster(**EC), save_dir=tmp_path, backstop_every="2"
    )
    newest = sorted(p for p in tmp_path.iterdir())[-1]
    assert json.loads((newest / "MANIFEST.json").read_text())["extra"]["backstop"]["full"] is False
    model = xdl_ec.load(tmp_path, job=job())  # the chain replayed into one model, in this process
    reference = job()
    reference.fit(steps=STEPS, deterministic=True, seed=SEED)
    from xdl_ec.model.digest import model_digest

    assert (
        model_digest(model.exports(), model.dense.model.weights, model.dense.optimizer.variables)
        == failure_free_digest
        == model_digest(
            reference.model.exports(), reference.model.dense.model.weights, reference.model.dense.optimizer.variables
        )
    )


def test_a_broken_chain_is_refused_naming_the_missing_save(tmp_path: Path) -> None:
    import shutil

    job().fit(
        steps=6, deterministic=True, seed=SEED, cluster=xdl_ec.Cluster(**EC), save_dir=tmp_path, backstop_every="2"
    )
    shutil.rmtree(sorted(tmp_path.iterdir())[0])  # the full save the increments build on
    with pytest.raises(ValueError, match="builds on .*ckpt-000001-step-000000000002, which is missing"):
        job().fit(steps=STEPS, deterministic=True, seed=SEED, resume=tmp_path)


def test_backstop_settings_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ValueError, match="backstop_every: needs save_dir"):
        job().fit(steps=2, cluster=xdl_ec.Cluster(**EC), backstop_every="2")
    with pytest.raises(ValueError, match="backstop_every: backs up parameter servers"):
        job().fit(steps=2, save_dir=tmp_path, backstop_every="2")
    assert (
        main(
            [
                "train",
                "--synthetic",
                "--steps",
                "2",
                "--save-dir",
                str(tmp_path),
                "--backstop-every",
                "2",
                "--save-every",
                "2",
                "--servers",
                "3",
            ]
        )
        == 2
    )
    assert "not both" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.ray
def test_the_driver_killed_on_ray_resumes_from_the_backstop(tmp_path: Path) -> None:
    """The driver process (dense state, the run's only copy of it) SIGKILLed mid-run on Ray; the same command with
    --resume ends at the failure-free digest."""
    pytest.importorskip("ray")
    script = str(REPO_ROOT / "examples" / "user_item_tags.py")
    saves = tmp_path / "saves"
    common = ["train", "--script", script, "--steps", "40", "--deterministic", "--seed", "1", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "RAY_AUTH_MODE": "disabled"}
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xdl_ec",
            *common,
            "--servers",
            "3",
            "--backend",
            "ray",
            "--ft",
            "ec",
            "--code",
            "2,1",
            "--save-dir",
            str(saves),
            "--backstop-every",
            "3",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        cwd=tmp_path,
    )  # not the checkout: its xdl_ec has no built extension
    try:
        deadline = time.monotonic() + 240
        while not any(p.name.startswith("ckpt-") for p in saves.glob("ckpt-*")):
            assert driver.poll() is None, driver.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no backstop save within 240 s"
            time.sleep(0.2)
        driver.send_signal(signal.SIGKILL)  # the driver only: its Ray processes see it go
        driver.wait(30)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    report_path = tmp_path / "resumed.json"
    assert main([*common, "--servers", "2", "--resume", str(saves), "--report", str(report_path)]) == 0
    resumed = json.loads(report_path.read_text())
    reference_path = tmp_path / "reference.json"
    assert main([*common, "--report", str(reference_path)]) == 0
    assert resumed["resumed_from"]["step"] >= 3 and resumed["steps"] == 40
    assert resumed["model_digest"] == json.loads(reference_path.read_text())["model_digest"]


def test_more_than_r_servers_lost_mid_resize_fall_back_to_the_backstop(
    tmp_path: Path, failure_free_digest: str
) -> None:
    """Issue #38: during a resize's background move, more than r losses fall back to the backstop as they do
    without one: the run stops naming its newest save, and resuming it (at the count the resize asked) ends at the
    failure-free model."""
    from xdl_ec.ps.move_hooks import MoveHooks

    killed: list = []

    def kill_two(name: str, trainer: object, move: object) -> None:
        if name == "precopy" and not killed:
            killed.append(trainer.step)  # type: ignore[attr-defined]
            for index in (0, 1):  # r + 1 = 2 old servers at once, mid-move
                trainer.scheduler.kill("server", index)  # type: ignore[attr-defined]

    doomed = xdl_ec.Cluster(**EC, resize_at=["8:4"])
    observed = job()
    observed.move_hooks = MoveHooks(kill_two, rows=96)
    with pytest.raises(Unrecoverable, match=rf"resume from the backstop: .*--resume {tmp_path}"):
        observed.fit(steps=STEPS, deterministic=True, seed=SEED, cluster=doomed, save_dir=tmp_path, backstop_every="3")
    assert killed, "the move never reached a pre-copy boundary"
    report = job().fit(
        steps=STEPS,
        deterministic=True,
        seed=SEED,
        cluster=xdl_ec.Cluster(servers=4, ft="ec", code=(2, 1)),
        resume=tmp_path,
        save_dir=tmp_path,
        backstop_every="3",
    )
    assert report["resumed_from"]["step"] in (6, 9)
    assert report["model_digest"] == failure_free_digest
