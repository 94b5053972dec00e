"""HyperParameters fill the native config struct of the same field names (renamed where the core's differ), and the
core's own validation runs on what they filled."""

from __future__ import annotations

import dataclasses

import pytest

from xdl_ec import _core
from xdl_ec.settings.hyperparameter import HyperParameters


@dataclasses.dataclass(frozen=True)
class AdagradSettings(HyperParameters):
    kind = _core.OptimizerKind.ADAGRAD
    core_names = {"initial_accumulator_value": "initial_accumulator"}
    learning_rate: float
    initial_accumulator_value: float


def test_fill_copies_every_field_under_the_core_name() -> None:
    config = AdagradSettings(0.05, 0.3)._fill(_core.OptimizerConfig())
    assert config.kind == _core.OptimizerKind.ADAGRAD
    assert config.learning_rate == pytest.approx(0.05) and config.initial_accumulator == pytest.approx(0.3)


def test_fill_runs_the_cores_validation() -> None:
    with pytest.raises(ValueError, match="learning_rate"):
        AdagradSettings(-1.0, 0.1)._fill(_core.OptimizerConfig())
