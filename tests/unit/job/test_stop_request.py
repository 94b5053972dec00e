"""A stop request: asked by a signal, met at the next step boundary with the run's final save, then RunStopped."""

from __future__ import annotations

import signal
from types import SimpleNamespace
from typing import List

import pytest

from xdl_ec.job.stop_request import RunStopped, StopAtBoundary, StopRequest


def test_a_boundary_before_the_request_goes_on() -> None:
    request = StopRequest()
    finished: List[int] = []
    hook = StopAtBoundary(request, lambda: finished.append(1))
    assert not hook.due(3)
    hook.after_step(SimpleNamespace(step=3))
    assert finished == [] and not request.asked


def test_the_first_boundary_after_the_request_saves_then_stops() -> None:
    request = StopRequest()
    events: List[str] = []
    request.on_boundary.append(lambda: events.append("boundary"))
    hook = StopAtBoundary(request, lambda: events.append("final save"))
    request.ask(signal.SIGTERM)
    assert request.asked and hook.due(5)
    with pytest.raises(RunStopped) as stopped:
        hook.after_step(SimpleNamespace(step=5))
    assert events == ["boundary", "final save"]
    assert (stopped.value.signum, stopped.value.step) == (signal.SIGTERM, 5)
    assert isinstance(stopped.value, KeyboardInterrupt)  # what cleans up after Ctrl-C cleans up after it


def test_clear_forgets_the_signal_and_the_callbacks() -> None:
    request = StopRequest()
    request.ask(signal.SIGINT)
    request.on_boundary.append(lambda: None)
    request.clear()
    assert not request.asked and request.signum is None and request.on_boundary == []
