"""One request per server and step (``combine_calls``): with one worker a step's push and the next step's pull
travel together (ParameterServer.push_pull), and the model is the same as with separate calls and as the
one-process trainer's; several sync workers keep separate calls (another worker's push may come between)."""

from __future__ import annotations

import os
from typing import Any, Dict

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.ft_runs import make_trainer, small_config  # noqa: E402
from support.ft_runs import run as run_trainer
from xdl_ec.builtin.criteo_job import criteo_job  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer  # noqa: E402
from xdl_ec.ps import worker as worker_module  # noqa: E402

STEPS = 7
_INIT = worker_module.Worker.__init__


def _run(monkeypatch: pytest.MonkeyPatch, combine: bool, workers: int = 1, cache: Any = None) -> Dict[str, Any]:
    original = _INIT

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["combine_calls"] = combine
        original(self, *args, **kwargs)

    monkeypatch.setattr(worker_module.Worker, "__init__", init)
    config = small_config(steps=STEPS)
    trainer = make_trainer(config, ClusterConfig(servers=3, workers=workers))
    if cache is not None:
        trainer = PSTrainer(trainer.job, trainer.cluster, trainer.settings, caches={"criteo_categorical": cache})
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


@pytest.mark.parametrize("staleness", [0, 4])
def test_a_caching_worker_also_makes_one_request_per_server_and_step(
    monkeypatch: pytest.MonkeyPatch, staleness: int
) -> None:
    cache = xdl_ec.Cache(rows=200, staleness=staleness)
    combined = _run(monkeypatch, True, cache=cache)
    separate = _run(monkeypatch, False, cache=cache)
    if staleness == 0:  # exact: the push of step t is applied before the clocks of step t + 1's keys are read
        assert combined["model_digest"] == separate["model_digest"] == _run(monkeypatch, True)["model_digest"]
    else:  # lines are filled and evicted in another order than with separate calls, but as deterministically
        assert combined["model_digest"] == _run(monkeypatch, True, cache=cache)["model_digest"]
    # the first pull, one push_pull_stale a step, the last push alone; and with S > 0 the write-back of the
    # gradients still held at the end
    last = 1 if staleness else 0
    assert all(STEPS + 1 <= s["requests"] <= STEPS + 1 + last for s in combined["servers"])
    assert all(s["requests"] >= 2 * STEPS for s in separate["servers"])
    assert combined["cache"]["criteo_categorical"]["hits"] > 0


def test_several_sync_workers_keep_separate_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    report = _run(monkeypatch, True, workers=2)
    # each worker pulls its batch after the barrier and pushes at its end (a part for every server): two requests
    # per batch (STEPS batches over (STEPS + 1) // 2 steps)
    assert [s["requests"] for s in report["servers"]] == [2 * STEPS] * 3
    assert report["steps"] == (STEPS + 1) // 2
