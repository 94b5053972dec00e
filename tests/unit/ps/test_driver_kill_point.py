"""The test-only kill point (xdl_ec.ps.driver_kill_point): the driver SIGKILLs itself at the point the environment
names, nowhere else, and a name that is no point is an error (a typo cannot pass a test without its kill)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from xdl_ec.ps import driver_kill_point


def _reach(point: str, wanted: str) -> subprocess.CompletedProcess:
    code = f"from xdl_ec.ps import driver_kill_point as k; k.reached({point!r}); print('alive')"
    env = {**os.environ, driver_kill_point.ENV: wanted}
    return subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_the_named_point_kills_the_process_and_another_does_not() -> None:
    assert _reach("replaced", "replaced").returncode == -signal.SIGKILL
    passed = _reach("replayed", "replaced")
    assert passed.returncode == 0 and passed.stdout.strip() == "alive"


def test_unset_it_does_nothing_and_a_bad_name_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(driver_kill_point.ENV, raising=False)
    driver_kill_point.reached("replaced")
    monkeypatch.setenv(driver_kill_point.ENV, "replace")
    with pytest.raises(ValueError, match="not a kill point"):
        driver_kill_point.reached("replaced")
