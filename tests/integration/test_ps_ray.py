"""Parameter servers and workers as Ray actors: bit-identity with the single-process trainer (one worker) and with
the one-process backend (two workers, sync), and a ray.kill'ed server or worker stopping the run within seconds."""

from __future__ import annotations

import os
import threading
import time

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

from support.ft_runs import make_trainer  # noqa: E402
from support.ft_runs import run as run_trainer
from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ps import ClusterConfig, ServerLost, WorkerLost  # noqa: E402
from xdl_ec.ps.backend import ray_runtime_env  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    # Actors import xdl_ec as this process does (a development stage on PYTHONPATH, or the installed package).
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=ray_runtime_env())
    yield
    ray.shutdown()


def small_config(**kwargs) -> TrainConfig:
    base = dict(
        synthetic=True,
        synthetic_rows=3000,
        batch_size=128,
        steps=5,
        deterministic=True,
        progress=False,
        seed=3,
        emb_dim=8,
    )
    base.update(kwargs)
    return TrainConfig(**base)


def test_one_worker_on_ray_matches_the_single_process_trainer() -> None:
    single = criteo_job(small_config()).fit(deterministic=True, seed=3)
    report = run_trainer(make_trainer(small_config(), ClusterConfig(servers=2, workers=1, backend="ray")))
    assert report["model_digest"] == single["model_digest"]
    assert report["final_loss"] == single["final_loss"]
    assert [s["index"] for s in report["servers"]] == [0, 1]
    assert all(s["bytes_in"] > 0 and s["bytes_out"] > 0 for s in report["servers"])
    # the first step's pull and the one worker's later steps were served by the servers' core (without the
    # interpreter); only the first step's push went through Python
    assert all(s["native_requests"] == 5 and s["requests"] == 6 for s in report["servers"]), report["servers"]
    assert ray.is_initialized()  # the backend leaves a Ray it did not start running


def test_two_sync_workers_on_ray_match_the_one_process_backend() -> None:
    config = lambda: small_config(steps=4)  # noqa: E731
    local = run_trainer(make_trainer(config(), ClusterConfig(servers=3, workers=2)))
    on_ray = run_trainer(make_trainer(config(), ClusterConfig(servers=3, workers=2, backend="ray")))
    assert on_ray["model_digest"] == local["model_digest"]
    assert on_ray["samples"] == local["samples"] == 4 * 128
    # sync steps of several workers: their pulls are the core's, their pushes (a step's parts from every worker)
    # Python's
    assert all(s["native_requests"] == 4 and s["requests"] == 8 for s in on_ray["servers"]), on_ray["servers"]


@pytest.mark.parametrize("role,index,error", [("server", 1, ServerLost), ("worker", 0, WorkerLost)])
def test_ray_kill_stops_training_naming_the_role(role: str, index: int, error: type) -> None:
    trainer = make_trainer(
        small_config(steps=2000, synthetic_rows=300_000, deterministic=False),
        ClusterConfig(servers=2, workers=1, backend="ray"),
    )
    handles = trainer.scheduler.servers if role == "server" else trainer.scheduler.workers

    def kill() -> None:
        deadline = time.monotonic() + 60
        while trainer.step < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        ray.kill(handles[index].actor, no_restart=True)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    start = time.monotonic()
    with pytest.raises(error, match=f"{role} {index} was lost") as info:
        run_trainer(trainer)
    assert info.value.index == index
    assert trainer.step < 2000 and time.monotonic() - start < 60
    killer.join()
