"""StepOutputs: the means of a model's extra outputs over the last steps, for the report."""

from __future__ import annotations

import pytest

from xdl_ec.model.step_outputs import StepOutputs


def test_means_cover_the_last_steps_and_each_name_over_the_steps_that_gave_it() -> None:
    outputs = StepOutputs(last=2)
    assert outputs.report() == {} and outputs.latest is None
    outputs.add({"accuracy": 0.1})
    outputs.add({})  # a step without outputs counts for nothing
    outputs.add({"accuracy": 0.5, "aux": 2.0})
    outputs.add({"accuracy": 0.7})
    assert outputs.means() == {"accuracy": pytest.approx(0.6), "aux": 2.0}
    assert outputs.latest == {"accuracy": 0.7}
    assert outputs.report() == {"outputs": outputs.means()}
