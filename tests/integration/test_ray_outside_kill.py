"""A server process SIGKILLed from outside the job on Ray (issue #17): ec recovers it exactly, and the failure's
detection time is counted from the kill (Ray's record of the death), not from the call that failed."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from support.ft_runs import make_trainer, small_config
from xdl_ec.builtin.criteo_job import criteo_job
from xdl_ec.ft.ec_strategy import ErasureCoded
from xdl_ec.ps import ClusterConfig

pytestmark = pytest.mark.ray

STEPS, KILL_AFTER = 400, 20
KILL_DELAY = 0.2  # seconds after KILL_AFTER steps: the kill lands while steps run, not at a boundary


def test_a_server_killed_from_outside_is_rebuilt_and_its_detection_timed_from_the_kill() -> None:
    pytest.importorskip("ray")
    config = small_config(steps=STEPS, synthetic_rows=30000)
    reference = criteo_job(config).fit(deterministic=True, seed=config.seed)["model_digest"]
    trainer = make_trainer(config, ClusterConfig(servers=3, backend="ray"), strategy=ErasureCoded(2, 1))
    try:
        trainer.fit(KILL_AFTER)
        victim = trainer.scheduler.servers[1].actor
        import ray

        pid = ray.get(victim.__ray_call__.remote(lambda self: os.getpid()), timeout=30)
        killed_at = []

        def kill() -> None:
            time.sleep(KILL_DELAY)
            os.kill(pid, signal.SIGKILL)
            killed_at.append(time.monotonic())

        threading.Thread(target=kill, daemon=True).start()
        report = trainer.fit(STEPS - KILL_AFTER)
        detected_by = time.monotonic()
        digest = trainer.digest()
    finally:
        trainer.close()
    (failure,) = report["failures"]
    assert failure["role"] == "server" and failure["index"] == 1
    assert digest == reference
    # counted from the kill: more than zero, no more than the time from the kill to the end of the run
    assert 0.0 < failure["detect_seconds"] <= detected_by - killed_at[0] + 0.05
