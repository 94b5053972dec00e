"""`xdl-ec train --script FILE.py`: a user's job on the command line, every existing flag that is not about the
built-in model, and a clear error for every way a script can be wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.paths import REPO_ROOT
from xdl_ec.cli import main

EXAMPLES = REPO_ROOT / "examples"


def train(tmp_path: Path, *flags: str) -> dict:
    path = tmp_path / "report.json"
    assert main(["train", *flags, "--no-progress", "--report", str(path)]) == 0
    return json.loads(path.read_text())


def test_a_script_job_trains_in_one_process_and_on_servers(tmp_path: Path) -> None:
    script = str(EXAMPLES / "user_item_tags.py")
    here = train(tmp_path, "--script", script, "--steps", "6", "--deterministic", "--seed", "2")
    servers = train(tmp_path, "--script", script, "--steps", "6", "--deterministic", "--seed", "2", "--servers", "3")
    assert here["steps"] == 6 and here["model_digest"] == servers["model_digest"]
    assert [t["name"] for t in here["job"]["tables"]] == ["users", "items", "tags"]
    assert "auc" in here and len(servers["servers"]) == 3


def test_the_criteo_dlrm_script_is_the_built_in_job(tmp_path: Path) -> None:
    built_in = train(tmp_path, "--synthetic", "--steps", "8", "--deterministic")
    script = train(tmp_path, "--script", str(EXAMPLES / "criteo_dlrm.py"), "--steps", "8", "--deterministic")
    assert script["model_digest"] == built_in["model_digest"] and script["auc"] == built_in["auc"]


def write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "job_script.py"
    path.write_text(body)
    return str(path)


@pytest.mark.parametrize(
    "body,message",
    [
        ("def job():\n    raise KeyError('users table')\n", "job() raised KeyError: 'users table' (at "),
        ("def job():\n    return 42\n", "job() must return an xdl_ec.Job, got int"),
        ("x = 1\n", "defines no job() function"),
        ("import no_such_module_here\n", "importing it raised ModuleNotFoundError"),
    ],
)
def test_a_broken_script_is_one_clear_line(
    tmp_path: Path, body: str, message: str, capsys: pytest.CaptureFixture
) -> None:
    assert main(["train", "--script", write(tmp_path, body), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_built_in_flags_are_refused_with_a_script(capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "--script", str(EXAMPLES / "user_item_tags.py"), "--emb-dim", "8", "--model", "mlp"]) == 2
    err = capsys.readouterr().err
    assert "--model, --emb-dim: describe the built-in model" in err
    assert main(["train", "--script", "/no/such/file.py"]) == 2
    assert "--script: no such file: /no/such/file.py" in capsys.readouterr().err


def test_bench_runs_a_script_job_through_the_same_kills(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        f"""import sys
sys.path.insert(0, {str(REPO_ROOT / "tests")!r})
from support.examples import load_example
example = load_example("user_item_tags")

def job():
    return example.make_job(example.ClickLog(batch_size=64, batches=30, eval_batches=2))
""",
    )
    out = tmp_path / "bench"
    assert main(["bench", "--quick", "--script", script, "--only", "ec-2+1", "--out", str(out), "--no-progress"]) == 0
    results = json.loads((out / "results.json").read_text())
    rows = {r["label"]: r for r in results["rows"]}
    assert [t["name"] for t in results["train"]["job"]["tables"]] == ["users", "items", "tags"]
    assert rows["ec-2+1"]["status"] == "ok" and rows["ec-2+1"]["report"]["failures"]
    assert rows["ec-2+1"]["summary"]["same_model_as_reference"]


def test_table_flags_are_the_rules_of_a_scripts_tables_and_its_saves_keep_them(tmp_path: Path) -> None:
    script = str(EXAMPLES / "user_item_tags.py")
    flags = ["--script", script, "--steps", "6", "--deterministic", "--seed", "2"]
    plain = train(tmp_path, *flags)
    bounded = train(tmp_path, *flags, "--admit-min-count", "2", "--max-rows", "4096", "--save-dir", str(tmp_path / "s"))
    for table in bounded["job"]["tables"]:
        assert table["admit"]["min_count"] == 2 and table["evict"]["max_rows"] == 4096, table
    assert sum(t["not_admitted_lookups"] for t in bounded["tables"].values()) > 0
    assert bounded["model_digest"] != plain["model_digest"]
    # the save names the script and the flags: its job is rebuilt with the same rules (else a SaveMismatch)
    import xdl_ec

    model = xdl_ec.load(tmp_path / "s")
    assert {t.name: t.admit.min_count for t in model.job.tables} == {"users": 2, "items": 2, "tags": 2}


def test_table_flags_with_a_script_need_a_rule(capsys: pytest.CaptureFixture) -> None:
    script = str(EXAMPLES / "user_item_tags.py")
    assert main(["train", "--script", script, "--evict-every-steps", "10", "--no-progress"]) == 2
    assert "--evict-every-steps: set how a rule counts or when it runs; give the rule too" in capsys.readouterr().err
    assert main(["train", "--script", script, "--max-rows", "10", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "the table flags do not fit its tables" in err and "below one block" in err
