"""SIGINT on Ray (issue #19): ``xdl-ec train --backend ray`` interrupted while it recovers two lost servers exits
with status 130 within seconds, and every process it started (Ray's own included) is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, Set

import pytest

from support.interrupt import descendants, interrupt_when_recovering

pytestmark = pytest.mark.ray


def test_sigint_mid_recovery_on_ray_stops_the_run_and_its_ray(tmp_path: Any) -> None:
    pytest.importorskip("ray")
    started: Set[int] = set()  # the run's processes, Ray's included (its local Ray runs below the driver)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "RAY_AUTH_MODE": "disabled"}
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "xdl_ec",
        "train",
        "--synthetic",
        "--synthetic-rows",
        "60000",
        "--batch-size",
        "512",
        "--steps",
        "400",
        "--emb-dim",
        "32",
        "--no-progress",
        "--servers",
        "5",
        "--backend",
        "ray",
        "--ft",
        "ec",
        "--code",
        "3,2",
        "--rebuild-share",
        "0.01",
        "--fail-at",
        "30:0",
        "--fail-at",
        "30:3",
    ]
    status, seconds, stderr, _ = interrupt_when_recovering(
        cmd, env, cwd=str(tmp_path), start_timeout=300, before_interrupt=lambda pid: started.update(descendants(pid))
    )
    assert status == 130, stderr[-3000:]
    assert seconds < 10.0, f"SIGINT took {seconds:.1f} s to stop the run"
    assert started, "the run had started no process of its own"
    left: Set[int] = set()
    for _ in range(100):  # Ray's processes see their driver go and exit on their own: give them a few seconds
        left = {pid for pid in started if alive(pid)}
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"processes of the interrupted run left: {sorted(left)}"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")  # a zombie has exited
