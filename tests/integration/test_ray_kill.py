"""An injected kill on Ray returns once the role's process is gone. Ray calls a killed actor dead within milliseconds
while its process lives on for up to a second and keeps serving its direct links: a worker "killed before step t"
then trained step t, and the driver's retry applied that step's pushes twice (a wrong model on Ray under load)."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

from xdl_ec.ps.backend import RayBackend  # noqa: E402


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def test_a_killed_roles_process_is_gone_when_the_kill_returns() -> None:
    class Pid:  # defined here: Ray ships it by value (the actors cannot import the tests)
        def pid(self) -> int:
            return os.getpid()

        def ping(self) -> int:  # the liveness probe the kill waits on
            return 0

    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc: a process's end is not visible here")
    backend = RayBackend()
    try:
        for index in range(4):  # the process outlived Ray's word in 15 of 15 probes: one would do, four make sure
            handle = backend.start("worker", index, Pid)
            pid = ray.get(handle.actor.pid.remote(), timeout=120)
            assert _running(pid)
            backend.kill(handle)
            assert not _running(pid), f"worker {index}'s process {pid} still runs after its kill returned"
    finally:
        backend.shutdown()
