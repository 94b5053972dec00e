"""The Ray that xdl-ec starts runs its roles at nice 0, not at Ray's default 15 for workers: a role is
the job's own work (the worker's TF step, the servers' pulls and pushes), and at nice 15 it got a fraction of the CPU
one process gets on a busy machine (docs/results/table-groups-ray-2026-12-07.md)."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

from xdl_ec.ps.backend import RayBackend  # noqa: E402


def test_a_role_on_the_ray_xdl_ec_starts_runs_at_nice_0() -> None:
    class Niceness:  # defined here: Ray ships it by value (the actors cannot import the tests)
        def niceness(self) -> int:
            return os.nice(0)

    if ray.is_initialized():
        pytest.skip("a Ray this process started earlier: its workers' niceness is its own")
    backend = RayBackend()
    try:
        handle = backend.start("server", 0, Niceness)
        assert ray.get(handle.actor.niceness.remote(), timeout=120) == 0
    finally:
        backend.shutdown()
