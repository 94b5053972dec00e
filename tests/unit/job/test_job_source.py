"""Where a job comes from: a ``--script`` file's ``job()`` (every way it can fail is one clear ScriptError naming the
file), the built-in job by its description, and what a save's source may name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xdl_ec.builtin.criteo_job import TrainConfig
from xdl_ec.job.job import Job
from xdl_ec.job.job_source import ScriptError, builtin_source, job_of, load_script_job


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "user_job.py"
    path.write_text(body)
    return str(path)


def test_a_script_job_names_its_source_and_keeps_the_table_flags(tiny_script: Path) -> None:
    job = load_script_job(str(tiny_script), {"admit_min_count": 2})
    assert isinstance(job, Job) and job.source == {
        "script": str(tiny_script.resolve()),
        "table_rules": {"admit_min_count": 2},
    }
    assert job.tables[0].admit is not None  # the table declared no rules: the flags' apply
    assert isinstance(job_of(job.source, "a save"), Job)


@pytest.mark.parametrize(
    "body,message",
    [
        (None, r"^--script: no such file: .*absent.py$"),
        ("raise RuntimeError('broken')\n", r"importing it raised RuntimeError: broken"),
        ("x = 1\n", r"defines no job\(\) function \(it must return an xdl_ec.Job\)"),
        (
            "def job():\n    return 1 / 0\n",
            r"job\(\) raised ZeroDivisionError: division by zero \(at .*user_job.py:2\)",
        ),
        ("def job():\n    return 'a job'\n", r"job\(\) must return an xdl_ec.Job, got str"),
    ],
)
def test_a_script_that_gives_no_job_is_a_script_error(tmp_path: Path, body: Any, message: str) -> None:
    path = str(tmp_path / "absent.py") if body is None else _script(tmp_path, body)
    with pytest.raises(ScriptError, match=message):
        load_script_job(path)


def test_table_flags_that_do_not_fit_the_tables_are_a_script_error(tiny_script: Path) -> None:
    with pytest.raises(ScriptError, match="the table flags do not fit its tables"):
        load_script_job(str(tiny_script), {"admit_min_count": -1})


def test_the_built_in_job_is_rebuilt_from_its_description() -> None:
    config = TrainConfig(synthetic=True, steps=3, emb_dim=4)
    job = job_of(builtin_source(config), "a save")
    assert job.source == builtin_source(config) and job.tables[0].dim == 4


@pytest.mark.parametrize(
    "source,message",
    [
        (None, r"built in Python \(it names no script\): pass it, xdl_ec.load\(DIR, job=make_job\(\)\)"),
        ({"notebook": "x"}, r"names its job as \{'notebook': 'x'\}, which this xdl-ec cannot rebuild"),
    ],
)
def test_a_source_that_names_no_job_is_an_error(source: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        job_of(source, "a save")
