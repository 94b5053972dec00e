"""A reattaching driver reads its run's record whole when a role it names died while no driver ran. Ray rebuilds an
actor handle from the actor's class, which it drops once the driver that started the actor and every detached actor
that driver started are gone: a replacement started by a driver since killed, then killed itself, left a record no
later driver could read (the 60-minute Ray soak stopped there). Kept handles open one by one; that role opens lost."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

from xdl_ec.ps.backend import RayHandle, connect_ray  # noqa: E402
from xdl_ec.ps.kept_handle import KeptHandle, LostHandle  # noqa: E402

NAMESPACE = "xdl-ec-kept-handle-test"

# A driver that starts a detached actor (of a class every process imports), keeps its handle and exits.
STARTER = """
import pickle, sys
import ray
from xdl_ec.ps.backend import RayHandle, connect_ray, use_ray_token
from xdl_ec.ps.kept_handle import KeptHandle
from xdl_ec.ps.run_keeper import RunKeeper
use_ray_token()
connect_ray(sys.argv[1], namespace=sys.argv[2])
actor = ray.remote(num_cpus=0)(RunKeeper).options(name="replacement", lifetime="detached").remote()
ray.get(actor.ping.remote(), timeout=60)
sys.stdout.buffer.write(pickle.dumps(KeptHandle(RayHandle("server", 1, actor))))
"""

# A later driver (a fresh process: nothing of the class cached) that reads the kept handle.
READER = """
import json, pickle, sys
import ray
from xdl_ec.ps.backend import connect_ray, use_ray_token
use_ray_token()
connect_ray(sys.argv[1], namespace=sys.argv[2])
kept = pickle.loads(sys.stdin.buffer.read())
try:
    pickle.loads(kept.actor)
    raw = "opened"
except Exception as err:
    raw = type(err).__name__
handle = kept.open()
print(json.dumps({"raw": raw, "opened": type(handle).__name__, "reason": getattr(handle, "reason", None)}))
"""


def _driver(code: str, address: str, stdin: bytes = b"") -> bytes:
    # this process's xdl_ec, wherever the other driver starts (a relative PYTHONPATH would not follow it)
    path = os.pathsep.join(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    out = subprocess.run(
        [sys.executable, "-P", "-c", code, address, NAMESPACE],
        input=stdin,
        capture_output=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=path),
        check=False,
    )
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    return out.stdout


def test_a_role_started_by_a_dead_driver_and_dead_itself_opens_lost_and_a_live_one_opens() -> None:
    if ray.is_initialized():
        ray.shutdown()
    connect_ray(num_cpus=2, namespace=NAMESPACE)
    try:
        address = ray.get_runtime_context().gcs_address
        kept = pickle.loads(_driver(STARTER, address))  # its driver has exited: the actor lives on, detached
        assert isinstance(kept, KeptHandle) and kept.actor_id
        live = kept.open()
        assert isinstance(live, RayHandle) and ray.get(live.actor.ping.remote(), timeout=60) == 0
        ray.kill(live.actor, no_restart=True)
        deadline = time.monotonic() + 60
        while ray._private.state.actors(kept.actor_id).get("State") != "DEAD":
            assert time.monotonic() < deadline, "the killed actor was not dead within 60 s"
            time.sleep(0.1)
        seen = json.loads(_driver(READER, address, pickle.dumps(kept)))
        assert seen["opened"] == "LostHandle", seen
        # the failure the kept handle avoids: its actor handle alone no longer opens in a driver that reads it now
        assert seen["raw"] != "opened", seen
    finally:
        ray.shutdown()


def test_a_lost_handle_kept_again_stays_lost() -> None:
    again = pickle.loads(pickle.dumps(KeptHandle(LostHandle("worker", 0, None, "gone")))).open()
    assert isinstance(again, LostHandle) and again.role == "worker" and again.index == 0
