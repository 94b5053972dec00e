"""``xdl-ec bench``: the quick preset writes results.json, results.md and two PNGs with one row per strategy; the
failure schedule is the same for every strategy; ec rebuilds the failure-free model exactly; bad flags are usage
errors; a strategy missing from the build gets a row saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xdl_ec.benchmark import MATRIX
from xdl_ec.benchmark.runner import failure_steps, normal_samples_per_sec
from xdl_ec.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    out = tmp_path_factory.mktemp("bench")
    status = main(["bench", "--quick", "--out", str(out), "--no-progress"])
    return status, out


def test_quick_writes_every_file(quick: tuple) -> None:
    status, out = quick
    assert status == 0
    for name in ("throughput.png", "loss.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
    results = json.loads((out / "results.json").read_text())
    assert [r["label"] for r in results["rows"]] == [v.label for v in MATRIX]
    markdown = (out / "results.md").read_text()
    for row in results["rows"]:
        assert row["status"] == "ok", row.get("error")
        assert f"| {row['label']} |" in markdown
    assert "![samples/s over time](throughput.png)" in markdown


def test_quick_same_failures_for_every_strategy(quick: tuple) -> None:
    results = json.loads((quick[1] / "results.json").read_text())
    schedule = [(k["step"], k["server"]) for k in results["failure_schedule"]]
    assert schedule, "the quick preset's auto MTBF must inject failures"
    rows = {r["label"]: r for r in results["rows"]}
    assert rows["none"]["report"]["injected"] == []
    for label, row in rows.items():
        if label == "none":
            continue
        injected = [(k["step"], k["index"]) for k in row["report"]["injected"]]
        assert injected == schedule, label
        assert row["summary"]["failures"] == len(schedule), label


def test_quick_measures(quick: tuple) -> None:
    results = json.loads((quick[1] / "results.json").read_text())
    rows = {r["label"]: r for r in results["rows"]}
    ref = rows["none"]
    timeline = ref["report"]["timeline"]
    assert len(timeline) == ref["report"]["steps"]
    assert [p[0] for p in timeline] == list(range(1, len(timeline) + 1))
    assert timeline[-1][2] == ref["report"]["samples"]
    for label in ("ec-2+1", "ec-4+1", "ec-4+2"):
        s = rows[label]["summary"]
        assert s["same_model_as_reference"], f"{label}: a rebuilt server must give the failure-free model"
        assert s["lost_samples"] == 0 and s["stored_kind"] == "parity" and s["stored_bytes"] > 0
        assert s["samples_per_sec_during_rebuild"] > 0
    assert rows["ckpt"]["summary"]["same_model_as_reference"]  # replay after rollback is exact
    # ... and re-trains what the rollbacks undid: exactly the samples it trained beyond the reference's
    ckpt = rows["ckpt"]
    assert ckpt["summary"]["lost_samples"] == ckpt["report"]["samples"] - ref["report"]["samples"]
    for label in ("ckpt", "cpr-mfu", "cpr-ssu"):
        assert rows[label]["summary"]["stored_kind"] == "checkpoint" and rows[label]["summary"]["stored_bytes"] > 0
    for label in ("cpr-mfu", "cpr-ssu"):  # nothing re-trained: the lost updates are reported instead
        assert rows[label]["report"]["samples"] == ref["report"]["samples"]
        assert "lost_updates" in rows[label]["report"]
    for row in results["rows"]:
        s = row["summary"]
        assert s["samples_per_sec_normal"] > 0 and s["peak_rss_bytes"] > 0
        assert 0.0 < s["auc"] < 1.0 and s["logloss"] > 0


def test_failure_steps_follow_the_timeline() -> None:
    timeline = [[step, 1.0 + 0.1 * step, 100 * step, 0.5] for step in range(1, 101)]
    kills = failure_steps(timeline, mtbf=2.0, seed=3, servers=6, total_steps=100, min_gap=5)
    assert kills and kills == failure_steps(timeline, 2.0, 3, 6, 100, 5)  # seeded
    steps = [s for s, _, _ in kills]
    assert steps[0] >= 2 and all(b - a >= 5 for a, b in zip(steps, steps[1:])) and steps[-1] <= 100
    assert all(0 <= server < 6 for _, server, _ in kills)
    first_step, _, seconds = kills[0]
    assert first_step >= int(seconds / 0.1) + 1  # not before the step running at its time


def test_normal_rate_leaves_out_failure_windows() -> None:
    timeline = [[1, 1.0, 100, 0.5], [2, 2.0, 200, 0.5], [3, 5.0, 300, 0.5], [4, 6.0, 400, 0.5]]
    report = {
        "timeline": timeline,
        "injected": [{"step": 3, "role": "server", "index": 0, "seconds": 2.5}],
        "failures": [{"step": 3, "index": 0, "role": "server", "detect_seconds": 0.5, "rebuild_seconds": 1.0}],
    }
    assert normal_samples_per_sec(report) == pytest.approx(100.0)  # the 3-second step is out
    assert normal_samples_per_sec({"timeline": timeline}) == pytest.approx(300 / 5.0)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--data", "/nonexistent/criteo.tsv"], "--data: no such file"),
        (["--only", "ec-9+9"], "--only: unknown 'ec-9+9'"),
    ],
)
def test_bad_flags_are_usage_errors(flags: list, message: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "--quick", "--out", str(tmp_path / "out"), "--no-progress", *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_negative_mtbf_is_refused_by_the_parser(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--quick", "--out", str(tmp_path / "out"), "--mtbf", "-1"])
    assert exit_info.value.code == 2
    assert "--mtbf" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_out_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["bench", "--quick", "--out", str(target), "--no-progress"]) == 2
    assert "--out:" in capsys.readouterr().err
