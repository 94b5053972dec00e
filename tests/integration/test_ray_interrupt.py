"""SIGINT on Ray (issue #19): ``xdl-ec train --backend ray`` interrupted while it recovers two lost servers exits
with status 130 within seconds, and every process it started (Ray's own included) is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any, Set

import pytest

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
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        for line in proc.stderr:  # the strategy's warning when a recovery starts
            if "recovering" in line:
                break
            assert time.monotonic() < deadline, "no recovery started"
        else:
            pytest.fail(f"the run ended without a recovery: {proc.wait()}")
        time.sleep(0.05)
        interrupted = time.monotonic()
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=60)
        seconds = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert status == 130, proc.stderr.read()[-3000:]
    assert seconds < 10.0, f"SIGINT took {seconds:.1f} s to stop the run"
    left: Set[int] = set()
    for _ in range(100):  # Ray's processes see their driver go and exit on their own: give them a few seconds
        left = ray_pids() - before
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"Ray processes left after the interrupted run: {sorted(left)}"
