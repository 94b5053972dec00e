"""One request per server and step (``combine_calls``): with one worker a step's push and the next step's pull
travel together (ParameterServer.push_pull), and the model is the same as with separate calls and as the
one-process trainer's; several sync workers keep separate calls (another worker's push may come between)."""

from __future__ import annotations

import os
from typing import Any, Dict

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from support.ft_runs import make_trainer, run as run_trainer, small_config  # noqa: E402
from xdl_ec.criteo_job import criteo_job  # noqa: E402
from xdl_ec.ps import ClusterConfig  # noqa: E402
from xdl_ec.ps import worker as worker_module  # noqa: E402

STEPS = 7
_INIT = worker_module.Worker.__init__


def _run(monkeypatch: pytest.MonkeyPatch, combine: bool, workers: int = 1) -> Dict[str, Any]:
    original = _INIT

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["combine_calls"] = combine
        original(self, *args, **kwargs)

    monkeypatch.setattr(worker_module.Worker, "__init__", init)
    trainer = make_trainer(small_config(steps=STEPS), ClusterConfig(servers=3, workers=workers))
    return run_trainer(trainer)


def test_one_request_per_server_and_step_trains_the_same_model(monkeypatch: pytest.MonkeyPatch) -> None:
    combined = _run(monkeypatch, True)
    separate = _run(monkeypatch, False)
    single = criteo_job(small_config(steps=STEPS)).fit(deterministic=True, seed=5)
    assert combined["model_digest"] == separate["model_digest"] == single["model_digest"]
    # combined: the first step's pull, then one push_pull a step (the last step pushes alone)
    assert [s["requests"] for s in combined["servers"]] == [STEPS + 1] * 3
    assert [s["pushes"] for s in combined["servers"]] == [STEPS] * 3
    # separate: at least a pull and a push a step
    assert all(s["requests"] >= 2 * STEPS for s in separate["servers"])


def test_several_sync_workers_keep_separate_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    report = _run(monkeypatch, True, workers=2)
    # each worker pulls its batch after the barrier and pushes at its end (a part for every server): two requests
    # per batch (STEPS batches over (STEPS + 1) // 2 steps)
    assert [s["requests"] for s in report["servers"]] == [2 * STEPS] * 3
    assert report["steps"] == (STEPS + 1) // 2
