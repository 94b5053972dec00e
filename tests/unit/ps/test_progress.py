"""Progress: tqdm's bar on a terminal only; elsewhere plain lines, after the first step and then every ``every``
seconds, with the samples/s and mean loss since the line before."""

from __future__ import annotations

import io
from typing import List

from xdl_ec.ps.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_when_the_stream_is_not_a_terminal() -> None:
    stream, clock = io.StringIO(), Clock()
    progress = Progress(6, True, stream=stream, every=10.0, clock=clock)
    losses: List[float] = [0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    for step, loss in enumerate(losses, 1):
        clock.now = 2.0 + (step - 1) * 4.0  # the first step ends at 2 s, then one every 4 s
        progress.update(100 * step, loss)
    progress.close()
    # step 1 at 2 s; step 4 at 14 s (12 s after the line before: 300 samples); step 6 at 22 s is only 8 s later
    assert stream.getvalue().splitlines() == ["step 1/6: loss 0.7000", "step 4/6: 25 samples/s, loss 0.5000"]


def test_the_models_extra_outputs_follow_the_loss_as_means_since_the_line_before() -> None:
    stream, clock = io.StringIO(), Clock()
    progress = Progress(3, True, stream=stream, every=10.0, clock=clock)
    for step, accuracy in enumerate([0.5, 0.6, 0.8], 1):
        clock.now = 10.0 * step
        progress.update(100 * step, 0.5, {"accuracy": accuracy})
    progress.close()
    # step 2 is 10 s after step 1's line: its mean is its own; step 3's likewise
    assert stream.getvalue().splitlines() == [
        "step 1/3: loss 0.5000, accuracy 0.5000",
        "step 2/3: 10 samples/s, loss 0.5000, accuracy 0.6000",
        "step 3/3: 10 samples/s, loss 0.5000, accuracy 0.8000",
    ]


def test_without_a_total_and_disabled() -> None:
    stream, clock = io.StringIO(), Clock()
    progress = Progress(None, True, stream=stream, every=0.0, clock=clock)
    clock.now = 1.0
    progress.update(10, 0.5)
    clock.now = 2.0
    progress.update(30, None)
    assert stream.getvalue().splitlines() == ["step 1: loss 0.5000", "step 2: 20 samples/s"]
    quiet = io.StringIO()
    off = Progress(3, False, stream=quiet, every=0.0)
    off.update(1, 0.1)
    off.close()
    assert quiet.getvalue() == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_bar() -> None:
    stream = Terminal()
    progress = Progress(4, True, stream=stream)
    progress.update(10, 0.5)
    progress.close()
    assert "0/4 [" in stream.getvalue() and "\r" in stream.getvalue() and "loss" not in stream.getvalue()
