"""SIGINT on Ray (issue #19): ``xdl-ec train --backend ray`` interrupted while it recovers two lost servers exits
with status 130 within seconds, and every process it started (Ray's own included) is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, Set

import pytest

from support.interrupt import interrupt_when_recovering

pytestmark = pytest.mark.ray

RAY_PROCESSES = ("raylet", "gcs_server", "ray::", "default_worker.py", "dashboard", "log_monitor")


def ray_pids() -> Set[int]:
    """Processes of any Ray instance on this machine."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return {int(line.split(None, 1)[0]) for line in out.splitlines()
            if any(name in line for name in RAY_PROCESSES) and "ps -eo" not in line}


def test_sigint_mid_recovery_on_ray_stops_the_run_and_its_ray(tmp_path: Any) -> None:
    pytest.importorskip("ray")
    before = ray_pids()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "RAY_AUTH_MODE": "disabled"}
    cmd = [sys.executable, "-P", "-m", "xdl_ec", "train", "--synthetic", "--synthetic-rows", "60000",
           "--batch-size", "512", "--steps", "400", "--emb-dim", "32", "--no-progress", "--servers", "5",
           "--backend", "ray", "--ft", "ec", "--code", "3,2", "--rebuild-share", "0.01", "--fail-at", "30:0",
           "--fail-at", "30:3"]
    status, seconds, stderr, _ = interrupt_when_recovering(cmd, env, cwd=str(tmp_path), start_timeout=300)
    assert status == 130, stderr[-3000:]
    assert seconds < 10.0, f"SIGINT took {seconds:.1f} s to stop the run"
    left: Set[int] = set()
    for _ in range(100):  # Ray's processes see their driver go and exit on their own: give them a few seconds
        left = ray_pids() - before
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"Ray processes left after the interrupted run: {sorted(left)}"
