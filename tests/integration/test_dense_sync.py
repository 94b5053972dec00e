"""A cluster's only worker applies its own dense updates and the driver logs its gradients
(:mod:`xdl_ec.ps.dense_sync`): the driver's copy catches up by asking the worker (checked by the optimizer's
iteration count) or by applying its log, and a lost worker loses nothing dense."""

from __future__ import annotations

import os
from typing import Any, List

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from support.ft_runs import make_trainer, small_config  # noqa: E402
from support.ft_runs import run as run_trainer
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ps import (
    ClusterConfig,  # noqa: E402
    dense_sync,  # noqa: E402
)
from xdl_ec.ps.dense_sync import DriverDense  # noqa: E402
from xdl_ec.ps.worker import DenseState  # noqa: E402

BASE = dict(steps=10, seed=5, optimizer="adam")


@pytest.mark.parametrize("log_steps", [3, 64])
def test_a_lost_worker_loses_nothing_dense(failure_free: Any, monkeypatch: pytest.MonkeyPatch, log_steps: int) -> None:
    """ec, worker 0 killed before step 5 and again before step 7: with a log of 3 steps the driver took the
    worker's state once before the first kill and applies the rest of its log itself; the run ends at the
    failure-free digest (the restarted worker got the driver's state whole)."""
    monkeypatch.setattr(dense_sync, "LOG_STEPS", log_steps)
    trainer = make_trainer(
        small_config(**BASE),
        ClusterConfig(servers=3, workers=1),
        ErasureCoded(2, 1),
        FailureSchedule([Kill(5, "worker", 0), Kill(7, "worker", 0)]),
    )
    dense = trainer._dense
    report = run_trainer(trainer)
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("worker", 0), ("worker", 0)]
    assert report["model_digest"] == failure_free(3, 1, **BASE)["model_digest"]
    assert dense.replays >= 2  # each kill: the log applied by the driver
    if log_steps == 3:
        assert dense.fetches >= 1


def test_the_driver_model_taken_to_change_goes_to_the_worker_whole() -> None:
    """Whoever takes the driver's model (a rollback, a resume) may change it: the next step carries it whole."""
    trainer = make_trainer(small_config(**BASE), ClusterConfig(servers=2, workers=1))
    try:
        trainer.fit(3)
        assert trainer._dense.for_step() is None
        model = trainer.dense  # taken: may be changed
        weights, optimizer = model.state()
        weights = [w + np.float32(0.5) for w in weights]
        model.load_state(weights, optimizer)
        state = trainer._dense.for_step()
        assert isinstance(state, DenseState)
        trainer.fit(1)
        w, _, iterations = trainer.result(trainer.worker(0).dense_state())
        assert iterations == 4
        trainer.fit(1)
        assert trainer._dense.for_step() is None
    finally:
        trainer.close()


class _Value:
    def __init__(self, value: int) -> None:
        self._value = value

    def numpy(self) -> int:
        return self._value


class _FakeModel:
    """A DenseModel stand-in: its weight is the sum of the gradients applied, iterations counted."""

    def __init__(self) -> None:
        self.value, self.iterations_count = np.zeros(2, np.float32), 0
        self.optimizer = self

    @property
    def iterations(self) -> Any:
        return _Value(self.iterations_count)

    def apply(self, grads: List[np.ndarray]) -> None:
        self.value = self.value + grads[0]
        self.iterations_count += 1

    def load_state(self, weights: List[np.ndarray], optimizer: List[np.ndarray]) -> None:
        self.value, self.iterations_count = weights[0], int(optimizer[0])

    def state(self) -> tuple:
        return [self.value], [np.int64(self.iterations_count)]

    def weights(self) -> List[np.ndarray]:
        return [self.value]


def test_a_worker_state_with_another_iteration_count_is_not_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker answers a state one step further than the driver's log (a step whose answer was lost): the
    driver applies its own log instead and sends the worker that state."""
    model = _FakeModel()
    worker_state = ([np.full(2, 9, np.float32)], [np.int64(3)], 3)
    dense = DriverDense(model, True, lambda: worker_state)
    dense.answered([[np.ones(2, np.float32)]])
    dense.answered([[np.ones(2, np.float32)]])
    assert dense.current() is model and model.value.tolist() == [2, 2] and dense.replays == 1
    state = dense.for_step()
    assert isinstance(state, DenseState) and state.weights[0].tolist() == [2, 2]
    assert dense.for_step() is None
    # the expected count: the worker's state is taken as it is
    worker_state = ([np.full(2, 7, np.float32)], [np.int64(3)], 3)
    dense._fetch = lambda: worker_state
    dense.answered([[np.ones(2, np.float32)]])
    assert dense.current().value.tolist() == [7, 7] and dense.fetches == 1 and dense.for_step() is None
