"""The disk tier under the parity a server holds, and a spill dir that fills (issue #48).

Under ``--ft ec`` a budgeted server's held parity lives in the same tier as its shards (the budget split k : r
between them): an ``ec`` run with a server killed under a tiny budget trains the unbudgeted model bit for bit,
with parity on disk. A spill dir that fills during training stops the run at a step boundary with a clear error
naming the dir, after a resumable save, and ``--resume`` with room trains the uninterrupted model; a dir already
full is a clear error before training."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Iterator, List

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.cli import main  # noqa: E402
from xdl_ec.sparse.memory_budget import MemoryBudget  # noqa: E402

TRAIN = ["train", "--synthetic", "--deterministic", "--seed", "3"]


def _report(path: Path) -> Any:
    return json.loads(path.read_text())


def test_budget_is_split_between_shards_and_held_parity(tmp_path: Path) -> None:
    budget = MemoryBudget(3000, str(tmp_path))
    assert budget.share(2) == 1500 and budget.parity_share(2) == 0
    held = budget.holding_parity((2, 1))
    assert held.share(2) == 1000 and held.parity_share(2) == 500  # k : r of what each holds
    assert budget.holding_parity(None) is budget
    with pytest.raises(ValueError, match="parity code"):
        budget.holding_parity((0, 1))


def test_ec_with_a_kill_under_a_tiny_budget_trains_the_same_model_with_parity_on_disk(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    spill.mkdir()
    cluster = ["--steps", "30", "--servers", "3", "--ft", "ec", "--code", "2,1", "--fail-at", "20:1"]
    assert main([*TRAIN, *cluster, "--report", str(tmp_path / "plain.json")]) == 0
    budgeted = [*TRAIN, *cluster, "--memory-budget", "256K", "--spill-dir", str(spill)]
    assert main([*budgeted, "--report", str(tmp_path / "tiered.json")]) == 0
    plain, tiered = _report(tmp_path / "plain.json"), _report(tmp_path / "tiered.json")
    assert tiered["model_digest"] == plain["model_digest"]
    assert len(tiered["failures"]) == 1  # the kill happened, and its server was rebuilt
    parity = tiered["parity_tier"]
    assert parity["rows_on_disk"] > parity["rows_in_memory"] > 0  # most parity records on disk
    assert parity["disk_write_bytes"] > 0 and parity["disk_read_bytes"] > 0
    assert "parity_tier" not in plain
    assert list(spill.iterdir()) == []  # spill files and reserves are unlinked when made


STEPS = ["--steps", "40"]


@pytest.fixture(scope="module")
def plain_digest(tmp_path_factory: Any) -> str:
    """The unbudgeted run's model_digest (one process; a server run's is the same)."""
    path = tmp_path_factory.mktemp("plain") / "plain.json"
    assert main([*TRAIN, *STEPS, "--report", str(path)]) == 0
    return str(_report(path)["model_digest"])


def _mount(tmp_path: Path, size: str) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        # lazily: a stopped run's spill files are closed when its objects are collected, which may be later
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs: a spill dir that fills during the synthetic run in one process."""
    yield from _mount(tmp_path, "3m")


@pytest.fixture
def small_fs_for_servers(tmp_path: Path) -> Iterator[Path]:
    """A 7 MiB tmpfs: room for three servers' reserves, not for their spill files to the end of the run."""
    yield from _mount(tmp_path, "7m")


def test_a_spill_dir_that_fills_stops_at_a_boundary_and_resume_trains_the_same_model(
    tmp_path: Path, small_fs: Path, plain_digest: str, capsys: Any
) -> None:
    steps = STEPS
    saves = tmp_path / "saves"
    budget = ["--memory-budget", "256K"]
    capsys.readouterr()
    code = main([*TRAIN, *steps, *budget, "--spill-dir", str(small_fs), "--save-dir", str(saves)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert str(small_fs) in err and "stopped at the boundary of step" in err and "--resume" in err
    stopped = int(err.split("stopped at the boundary of step ")[1].split(",")[0])
    assert 0 < stopped < 40  # the disk filled during training, not before it or after it
    assert str(saves) in err
    room = tmp_path / "room"
    room.mkdir()
    resumed = [*TRAIN, *steps, *budget, "--spill-dir", str(room), "--resume", str(saves)]
    assert main([*resumed, "--report", str(tmp_path / "resumed.json")]) == 0
    report = _report(tmp_path / "resumed.json")
    assert report["resumed_from"]["step"] == stopped
    assert report["model_digest"] == plain_digest


def test_servers_whose_spill_dir_fills_stop_with_a_clear_error_and_resume_from_the_last_save(
    tmp_path: Path, small_fs_for_servers: Path, plain_digest: str, capsys: Any
) -> None:
    saves = tmp_path / "saves"
    run = [*TRAIN, *STEPS, "--servers", "3", "--memory-budget", "256K"]
    capsys.readouterr()
    code = main([*run, "--spill-dir", str(small_fs_for_servers), "--save-dir", str(saves), "--save-every", "5"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert str(small_fs_for_servers) in err and "no space left" in err.lower() and "--resume" in err
    assert "Traceback" not in err
    room = tmp_path / "room"
    room.mkdir()
    assert main([*run, "--spill-dir", str(room), "--resume", str(saves), "--report", str(tmp_path / "r.json")]) == 0
    report = _report(tmp_path / "r.json")
    assert 0 < report["resumed_from"]["step"] < 40
    assert report["model_digest"] == plain_digest


@pytest.mark.parametrize("servers", [[], ["--servers", "3", "--ft", "ec", "--code", "2,1"]])
def test_a_full_spill_dir_is_a_clear_error_before_training(small_fs: Path, servers: List[str], capsys: Any) -> None:
    (small_fs / "filler").write_bytes(b"\0" * (2900 << 10))  # leaves ~100 KiB
    code = main([*TRAIN, *servers, "--steps", "2", "--memory-budget", "256K", "--spill-dir", str(small_fs)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert str(small_fs) in err and "full" in err
