"""``xdl-ec bench --sweep-mtbf``: the quick preset at one MTBF and one round writes the sweep's entries with the
issue's keys, mtbf.png, the fleet extrapolation (labelled as one) and plan-constants.json that ``xdl-ec plan``
reads; ec and ckpt end at the failure-free model; bad sweep flags are usage errors that write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xdl_ec.benchmark.fleet_extrapolation import FLEET_MTBF_HOURS, FLEET_SERVERS
from xdl_ec.cli import main
from xdl_ec.cli.command_line import build_parser
from xdl_ec.plan.measured_constants import MeasuredConstants

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KEYS = {"mtbf_s", "strategy", "overhead", "overhead_ci", "lost_samples", "auc_delta", "model_equal"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    flags = ["--quick", "--sweep-mtbf", "0.02", "--rounds", "1", "--out", str(out), "--no-progress"]
    assert main(["bench", *flags, "--only", "ckpt", "--only", "cpr-mfu", "--only", "ec-2+1"]) == 0
    return out


def test_sweep_entries(sweep: Path) -> None:
    results = json.loads((sweep / "results.json").read_text())
    entries = {e["strategy"]: e for e in results["sweep"]}
    assert set(entries) == {"ckpt", "cpr-mfu", "ec-2+1", "none (A/A)"}
    for label, e in entries.items():
        assert KEYS <= set(e), label
        assert e["mtbf_s"] == 0.02 and e["rounds"] == 1, label
        assert e["overhead_ci"][0] <= e["overhead"] <= e["overhead_ci"][1], label
    assert entries["ec-2+1"]["model_equal"] and entries["ec-2+1"]["lost_samples"] == 0
    assert entries["ckpt"]["model_equal"]
    assert entries["none (A/A)"]["model_equal"] and entries["none (A/A)"]["failures"] == 0
    kills = {r["failures"] for r in results["runs"] if r["strategy"] != "none (A/A)"}
    assert kills and min(kills) > 0, "the quick preset at 0.02 s must inject failures"
    assert (sweep / "mtbf.png").read_bytes().startswith(PNG_MAGIC)
    assert "## Fleet" in (sweep / "results.md").read_text()


def test_fleet_extrapolation_is_labelled(sweep: Path) -> None:
    fleet = json.loads((sweep / "results.json").read_text())["fleet"]
    assert "extrapolation" in fleet["note"]
    assert {(r["servers"], r["mtbf_h"]) for r in fleet["rows"]} == {
        (n, h) for n in FLEET_SERVERS for h in FLEET_MTBF_HOURS
    }
    by = {(r["servers"], r["mtbf_h"]): r for r in fleet["rows"]}
    assert by[(1000, 14.0)]["failures_per_hour"] == pytest.approx(1000 / 14.0)
    assert all(by[(1000, 14.0)][s] >= by[(10, 14.0)][s] for s in ("ec", "ckpt", "cpr"))


def test_constants_feed_the_planner(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    path = sweep / "plan-constants.json"
    constants = MeasuredConstants.load(path)
    assert "--sweep-mtbf 0.02 --rounds 1" in constants.provenance["command"]
    assert constants.labels == {"ckpt": "ckpt", "cpr": "cpr-mfu", "ec": "ec-2+1"}
    capsys.readouterr()
    flags = ["--rows", "1000000", "--memory-per-server", "1G", "--mtbf", "14h", "--constants", str(path), "--json"]
    assert main(["plan", *flags]) == 0
    assert json.loads(capsys.readouterr().out)["servers"] >= 1


def test_rounds_default_to_three() -> None:
    args = build_parser().parse_args(["bench", "--sweep-mtbf", "1,2"])
    assert args.sweep_mtbf == [1.0, 2.0] and args.rounds is None  # None: the sweep's 3


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--rounds", "2"], "--rounds: counts the rounds of a sweep"),
        (["--sweep-mtbf", "1", "--mtbf", "3"], "--mtbf: a sweep draws its kills"),
        (["--sweep-mtbf", "1", "--overlap", "2"], "--overlap: a different run"),
    ],
)
def test_bad_sweep_flags(flags: list, message: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "--quick", "--out", str(tmp_path / "out"), "--no-progress", *flags]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("text", ["0", "-1,2", "1,1", "ten"])
def test_bad_sweep_values_are_refused_by_the_parser(text: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--quick", f"--sweep-mtbf={text}"])
    assert exit_info.value.code == 2 and "--sweep-mtbf" in capsys.readouterr().err
