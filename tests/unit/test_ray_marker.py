"""tests/conftest.py fails a test that starts Ray without the ``ray`` marker, whether the test's own process starts it
or a process the test runs does, and leaves a marked test and one that only imports Ray alone. Run in a pytest of
its own over probe tests, with this repository's conftest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

pytestmark = pytest.mark.ray

PROBES = """
import subprocess, sys
import pytest
import ray

START = "import ray; ray.init(num_cpus=1, include_dashboard=False); ray.shutdown()"

def test_unmarked_in_process():
    exec(START)

def test_unmarked_in_a_child_process():
    subprocess.run([sys.executable, "-c", START], check=True)

@pytest.mark.ray
def test_marked_in_process():
    exec(START)

def test_unmarked_that_only_imports_ray():
    assert not ray.is_initialized()
"""


def test_a_test_that_starts_ray_fails_without_the_marker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text((REPO_ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_probes.py").write_text(PROBES)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    lines = run.stdout.splitlines()
    assert run.returncode == 1, run.stdout + run.stderr
    for test in ("test_unmarked_in_process", "test_unmarked_in_a_child_process"):
        assert f"FAILED test_probes.py::{test}" in "\n".join(lines), run.stdout
        assert f"test_probes.py::{test} started Ray without the 'ray' marker" in run.stdout
    for test in ("test_marked_in_process", "test_unmarked_that_only_imports_ray"):
        assert f"PASSED test_probes.py::{test}" in "\n".join(lines), run.stdout
