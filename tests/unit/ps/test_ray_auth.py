"""The Ray that xdl-ec starts (connect_ray): it requires Ray's token and prestarts no idle task workers;
connecting to a cluster of several nodes without authentication warns once."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from xdl_ec.ps import backend


@pytest.mark.ray
def test_a_ray_xdl_ec_starts_requires_the_token() -> None:
    """In a fresh process without RAY_AUTH_MODE (the user's default): connect_ray starts Ray in token mode, and a
    client without the token is refused."""
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    script = (
        "import os, ray\n"
        "from xdl_ec.ps.backend import connect_ray\n"
        "connect_ray(num_cpus=1)\n"
        "from ray._private.authentication.authentication_utils import is_token_auth_enabled\n"
        "print('mode', os.environ['RAY_AUTH_MODE'], is_token_auth_enabled())\n"
        "print('answer', ray.get(ray.remote(lambda: 41 + 1).remote()))\n"
        "address = ray.get_runtime_context().gcs_address\n"
        "import subprocess, sys\n"
        "probe = subprocess.run([sys.executable, '-P', '-c', 'import ray; ray.init(address=%r)' % address],\n"
        "                       env={**os.environ, 'RAY_AUTH_MODE': 'disabled'}, capture_output=True, text=True,\n"
        "                       timeout=120)\n"
        "print('stranger refused', probe.returncode != 0 and 'Authentication' in probe.stderr)\n"
        "ray.shutdown()\n"
    )
    done = subprocess.run([sys.executable, "-P", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mode token True" in done.stdout and "answer 42" in done.stdout, done.stdout
    assert "stranger refused True" in done.stdout, done.stdout


@pytest.mark.ray
def test_a_ray_xdl_ec_starts_has_no_idle_task_workers() -> None:
    """Roles are actors with processes of their own: the Ray connect_ray starts prestarts no task workers (Ray's
    default starts one per CPU, ray::IDLE processes under the raylet, right at ray.init)."""
    pytest.importorskip("ray")
    script = (
        "import os, time, ray\n"
        "from xdl_ec.ps.backend import connect_ray\n"
        "connect_ray(num_cpus=2)\n"
        "raylet = ray._private.worker._global_node.all_processes['raylet'][0].process.pid\n"
        "def idle():\n"
        "    found = []\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "        try:\n"
        "            comm = open(f'/proc/{pid}/comm').read().strip()\n"
        "            parent = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "        except (OSError, ValueError, IndexError):\n"
        "            continue\n"
        "        if parent == raylet and comm.startswith('ray::IDLE'):\n"
        "            found.append(pid)\n"
        "    return found\n"
        "seen = []\n"
        "for _ in range(10):\n"
        "    seen += idle()\n"
        "    time.sleep(0.2)\n"
        "print('idle workers', len(seen))\n"
        "ray.shutdown()\n"
    )
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run([sys.executable, "-P", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "idle workers 0" in done.stdout, done.stdout


def test_a_multi_node_cluster_without_auth_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    from ray._private.authentication import authentication_utils

    monkeypatch.setattr(backend, "_warned_unauthenticated", False)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    nodes = [{"Alive": True}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    token = [False]
    monkeypatch.setattr(authentication_utils, "is_token_auth_enabled", lambda: token[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not backend.warn_if_unauthenticated_cluster()  # one node: nothing to reach from outside
        nodes.append({"Alive": True})
        token[0] = True
        assert not backend.warn_if_unauthenticated_cluster()  # two nodes with the token
        token[0] = False
        nodes.append({"Alive": False})
        assert backend.warn_if_unauthenticated_cluster()
        assert not backend.warn_if_unauthenticated_cluster()  # once
    assert len(caught) == 1 and "has 2 nodes and no authentication" in str(caught[0].message)
    assert "RAY_AUTH_MODE=token" in str(caught[0].message)
