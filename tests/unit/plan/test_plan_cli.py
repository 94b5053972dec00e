"""``xdl-ec plan``: the JSON's schema (the issue's keys, the memory breakdown), the shipped constants and where they
came from, --script with --rows TABLE=N, and bad values as one-line usage errors naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xdl_ec.cli import main
from xdl_ec.plan.measured_constants import SHIPPED, STRATEGIES, MeasuredConstants

SCRIPT = """
import xdl_ec

def job():
    wide = xdl_ec.Table("wide", dim=32, optimizer="adam")
    narrow = xdl_ec.Table("narrow", dim=8, optimizer="sgd")
    return xdl_ec.Job(
        tables=[wide, narrow],
        features=[xdl_ec.Feature("a", wide), xdl_ec.Feature("b", narrow)],
        model_fn=lambda: None,
        input_fn=lambda worker, workers: iter(()),
    )
"""


def plan_json(capsys: pytest.CaptureFixture, *flags: str) -> dict:
    assert main(["plan", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_shipped_constants_come_from_a_sweep() -> None:
    constants = MeasuredConstants.load(SHIPPED)
    assert constants.provenance["command"].startswith("xdl-ec bench --sweep-mtbf ")
    assert set(constants.costs) == set(STRATEGIES) and constants.samples_per_sec > 0
    assert 0 < constants.row_memory.index_rows_per_byte < 1 and constants.bytes_per_server > 0


def test_json_schema(capsys: pytest.CaptureFixture) -> None:
    out = plan_json(
        capsys,
        "--rows",
        "100000000",
        "--dim",
        "16",
        "--optimizer",
        "adagrad",
        "--memory-per-server",
        "4G",
        "--mtbf",
        "14h",
        "--samples-per-sec",
        "50000",
    )
    assert {"servers", "code", "memory_per_server_bytes", "overhead", "recommendation"} <= set(out)
    assert isinstance(out["servers"], int) and out["servers"] >= 1
    assert set(out["code"]) == {"k", "r"} and out["code"]["k"] >= 1 and out["code"]["r"] >= 1
    memory = out["memory_per_server_bytes"]
    assert set(memory) == {"rows", "optimizer_state", "key_index", "parity", "disk_tier", "slack", "total"}
    assert memory["total"] == sum(v for k, v in memory.items() if k != "total") <= 4 << 30
    assert set(out["overhead"]) == {"ec", "ckpt", "cpr"}
    assert all(isinstance(v, float) for v in out["overhead"].values())
    assert out["recommendation"]["strategy"] in ("ec", "ckpt") and out["recommendation"]["why"]
    assert memory["parity"] > 0 if out["recommendation"]["strategy"] == "ec" else memory["parity"] == 0


def test_more_memory_needs_fewer_servers(capsys: pytest.CaptureFixture) -> None:
    small = plan_json(capsys, "--rows", "50000000", "--memory-per-server", "2G", "--mtbf", "30h")
    large = plan_json(capsys, "--rows", "50000000", "--memory-per-server", "16G", "--mtbf", "30h")
    assert large["strategies"]["ckpt"]["servers"] < small["strategies"]["ckpt"]["servers"]


def test_script_tables(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out = plan_json(
        capsys,
        "--script",
        str(script),
        "--rows",
        "wide=1000000",
        "--rows",
        "narrow=2000000",
        "--memory-per-server",
        "1G",
        "--mtbf",
        "14h",
    )
    ckpt = out["strategies"]["ckpt"]["memory_per_server_bytes"]
    servers = out["strategies"]["ckpt"]["servers"]
    wide, narrow = -(-1_000_000 // servers), -(-2_000_000 // servers)
    assert ckpt["optimizer_state"] == wide * 4 * 64  # adam: two floats per value; sgd: none
    assert ckpt["rows"] == wide * (12 + 4 * 32) + narrow * (12 + 4 * 8)
    assert main(["plan", "--script", str(script), "--rows", "wide=5", "--memory-per-server", "1G", "--mtbf", "1h"]) == 2
    assert "missing: narrow" in capsys.readouterr().err
    assert (
        main(
            [
                "plan",
                "--script",
                str(script),
                "--rows",
                "wide=5",
                "--rows",
                "wide=6",
                "--rows",
                "narrow=1",
                "--memory-per-server",
                "1G",
                "--mtbf",
                "1h",
            ]
        )
        == 2
    )
    assert "'wide' given twice" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--rows", "-5"], "--rows: expected a positive whole number"),
        (["--rows", "lots"], "--rows: expected a whole number of rows"),
        (["--rows", "1000", "--memory-per-server=-4G"], "--memory-per-server: a size cannot be negative"),
        (["--rows", "1000", "--memory-per-server", "4 bananas"], "--memory-per-server: expected a size like 64G"),
        (["--rows", "1000", "--mtbf", "forever"], "--mtbf: expected a duration like 14h"),
        (["--rows", "1000", "--optimizer", "rmsprop"], "--optimizer: unknown name 'rmsprop'"),
        (["--rows", "1000", "--dim", "70000"], "--dim: must be an int in [1, 65536]"),
        (["--rows", "t=1000"], "--rows: without --script give one --rows N"),
        (["--rows", "1000000000000", "--memory-per-server", "1M", "--max-servers", "10"], "raise --memory-per-server"),
        (["--rows", "1000", "--constants", "/nonexistent.json"], "constants: cannot read /nonexistent.json"),
    ],
)
def test_bad_values_are_usage_errors(flags: list, message: str, capsys: pytest.CaptureFixture) -> None:
    base = {"--memory-per-server": "4G", "--mtbf": "14h"}
    for flag, value in base.items():
        if not any(f.split("=")[0] == flag for f in flags):
            flags = [*flags, flag, value]
    assert main(["plan", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
