"""The CLI's own texts, without training: argparse errors (one line and a pointer to --help), a resumed run's
summary lines, and what a signal's stop says when nothing was saved."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

import pytest

from xdl_ec import cli
from xdl_ec.cli import signals, train_report
from xdl_ec.job.stop_request import RunStopped


def test_argument_errors_are_the_error_and_one_line_pointing_at_help(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.build_parser().parse_args(["train", "--code", "5,5"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "xdl-ec train: error: argument --code: expected K,R (data and parity servers per stripe) like 4,1: need "
        "k >= 1, 1 <= r <= 4 and k + r <= 32, got k=5, r=5",
        "run 'xdl-ec train --help' for every flag",
    ]
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["trian"])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("xdl-ec: error: argument COMMAND: invalid choice: 'trian'")
    assert err[1] == "run 'xdl-ec --help' for every flag"


def test_a_resumed_run_pairs_this_runs_samples_with_this_runs_steps(tmp_path: Path) -> None:
    report = {"steps": 200, "resumed_from": {"directory": str(tmp_path / "s-50"), "step": 50, "samples": 12800}}
    assert train_report.steps_text(report) == "150 steps this run (steps 51-200)"
    assert train_report.steps_text({"steps": 200}) == "200 steps"
    assert (
        train_report.steps_text({"steps": 50, "resumed_from": report["resumed_from"]})
        == "0 steps this run (the save was at step 50 already)"
    )
    assert (
        train_report.saves_text(report) == f"resumed the save of step 50 in {tmp_path / 's-50'}; this run is not saved "
        f"(add --save-dir DIR)"
    )
    saves = {"directory": str(tmp_path), "last_step": 1200}
    assert train_report.saves_text({"saves": saves}) == f"saves go to {tmp_path} (newest: step 1,200)"
    assert train_report.saves_text({"steps": 3}) is None


def args_of(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**{"save_dir": None, "resume": None, **given})


def test_a_stop_without_a_save_says_how_to_get_one(tmp_path: Path) -> None:
    argv = ["train", "--synthetic", "--steps", "200"]
    assert signals.stop_message("train", argv, args_of(), RunStopped(signal.SIGINT, 57)) == [
        "xdl-ec train: interrupted (SIGINT), stopped at step 57; nothing saved: run with --save-dir DIR to be able "
        "to resume"
    ]
    assert signals.stop_message(
        "train", argv, args_of(save_dir=str(tmp_path / "none")), signals.Interrupted(signal.SIGTERM)
    ) == [f"xdl-ec train: interrupted (SIGTERM); nothing saved yet in {tmp_path / 'none'}"]
    assert signals.stop_message("verify", argv, args_of(), KeyboardInterrupt()) == [
        "xdl-ec verify: interrupted (SIGINT)"
    ]


def test_the_resume_command_replaces_an_earlier_resume() -> None:
    argv = ["train", "--resume", "old", "--steps", "9", "--resume=older", "--save-dir", "new"]
    assert signals.without_flag(argv, "--resume") == ["train", "--steps", "9", "--save-dir", "new"]
