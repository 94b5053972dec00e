"""RebuildGovernor: a non-urgent background rebuild's duty, raised while training keeps its speed and cut when it
does not. Step boundaries are scripted (times and samples given, no clock)."""

from __future__ import annotations

import math
from typing import List

import pytest

from xdl_ec.ft import rebuild_governor as rg
from xdl_ec.ft.background_rebuild import BackgroundRebuild
from xdl_ec.ft.rebuild_governor import RebuildGovernor

BATCH = 256
STEP = 0.01  # seconds of a normal step: 25,600 samples/s


def _window(step: float = STEP) -> int:
    """Steps of ``step`` seconds that make one judged window."""
    return max(rg.WINDOW_STEPS, math.floor(rg.WINDOW_SECONDS / step) + 1)


def _steps(governor: RebuildGovernor, t: float, samples: int, seconds: List[float]) -> tuple:
    """Reports a boundary after each step of ``seconds``; returns the (time, samples) of the last."""
    for s in seconds:
        t += s
        samples += BATCH
        governor.step(t, samples)
    return t, samples


def _failed(governor: RebuildGovernor, normal_steps: int = 20) -> tuple:
    """Normal steps, a failure whose recovery pauses training for a second, then the first boundary after it."""
    t, samples = _steps(governor, 0.0, 0, [STEP] * normal_steps)
    governor.start()
    return _steps(governor, t, samples, [1.0])


def test_the_duty_rises_while_training_keeps_its_speed_and_never_passes_one() -> None:
    governor = RebuildGovernor(floor=0.05)
    t, samples = _failed(governor)
    assert governor.normal == pytest.approx(BATCH / STEP)
    assert governor.duty == 0.05
    duties = []
    for _ in range(12):  # windows at the normal speed
        t, samples = _steps(governor, t, samples, [STEP] * _window())
        duties.append(governor.duty)
    assert duties[0] == pytest.approx(0.05 * rg.RAISE)
    assert all(b >= a for a, b in zip(duties, duties[1:]))
    assert duties[-1] == 1.0


def test_the_duty_is_cut_when_training_slows_below_what_it_keeps_and_never_under_the_floor() -> None:
    governor = RebuildGovernor(floor=0.05, keeps=0.95)
    t, samples = _failed(governor)
    for _ in range(4):
        t, samples = _steps(governor, t, samples, [STEP] * _window())
    high = governor.duty
    t, samples = _steps(governor, t, samples, [STEP / 0.9] * _window(STEP / 0.9))  # 90% of the normal speed
    assert governor.duty == pytest.approx(high * rg.BACK_OFF)
    for _ in range(8):
        t, samples = _steps(governor, t, samples, [STEP / 0.5] * _window(STEP / 0.5))
    assert governor.duty == 0.05
    assert governor.cut >= 2


def test_inside_the_margin_the_duty_holds() -> None:
    governor = RebuildGovernor(floor=0.2, keeps=0.95)
    t, samples = _failed(governor)
    slow = STEP / 0.955  # 95.5%: kept, but not above keeps + MARGIN
    t, samples = _steps(governor, t, samples, [slow] * (_window(slow) + 2))
    assert (governor.duty, governor.windows, governor.raised, governor.cut) == (0.2, 1, 0, 0)


def test_the_normal_rate_leaves_out_a_trace_and_the_gap_between_two_fits() -> None:
    governor = RebuildGovernor(floor=0.05)
    t, samples = _steps(governor, 0.0, 0, [2.0] + [STEP] * 10 + [5.0] + [STEP] * 10)
    governor.start()
    assert governor.normal == pytest.approx(BATCH / STEP)


def test_without_normal_steps_measured_the_duty_stays_at_the_floor() -> None:
    governor = RebuildGovernor(floor=0.1)
    t, samples = _failed(governor, normal_steps=2)
    assert governor.normal is None
    _steps(governor, t, samples, [STEP] * 40)
    assert governor.duty == 0.1 and governor.windows == 0


def test_keeps_zero_holds_the_floor_and_stop_ends_the_governing() -> None:
    governor = RebuildGovernor(floor=0.1, keeps=0.0)
    t, samples = _failed(governor)
    t, samples = _steps(governor, t, samples, [STEP] * 40)
    assert governor.duty == 0.1
    governor.stop()
    assert not governor.governing
    _steps(governor, t, samples, [STEP] * 8)  # normal steps again: measured for the next failure
    governor.start()
    assert governor.normal == pytest.approx(BATCH / STEP)


def test_a_recovery_restarted_inside_a_rebuild_keeps_the_normal_rate_of_before_the_first_loss() -> None:
    governor = RebuildGovernor(floor=0.05)
    t, samples = _failed(governor)
    t, samples = _steps(governor, t, samples, [3 * STEP] * 20)  # slowed steps during the rebuild
    governor.start()  # a second loss
    assert governor.normal == pytest.approx(BATCH / STEP)


@pytest.mark.parametrize("floor, keeps", [(0.0, 0.95), (1.5, 0.95), (0.05, 1.0), (0.05, -0.1), (0.05, "high")])
def test_bad_settings_are_clear_errors(floor: object, keeps: object) -> None:
    with pytest.raises((ValueError, TypeError), match="rebuild_share|rebuild_keeps"):
        RebuildGovernor(floor=floor, keeps=keeps)  # type: ignore[arg-type]


def test_the_rebuild_pauses_by_the_governed_duty_and_a_raised_duty_cuts_a_pause_short(monkeypatch) -> None:
    from xdl_ec.ft import background_rebuild

    monkeypatch.setattr(background_rebuild, "_cpu_ticks", lambda: None)  # no idle-core reading
    governor = RebuildGovernor(floor=0.05)
    rebuild = BackgroundRebuild(coordinator=None, share=0.05, urgent=lambda: False, governor=governor)
    governor.duty = 0.25
    assert rebuild._pause(0.02, None) == pytest.approx(0.02 * 0.75 / 0.25)
    governor.duty = 0.01  # below the floor: the share holds
    assert rebuild._pause(0.02, None) == pytest.approx(0.02 * 0.95 / 0.05)
    # a 10 s pause ends within a slice once the duty reaches 1
    monkeypatch.setattr(background_rebuild, "PAUSE_SLICE", 0.01)
    governor.duty = 0.05
    waits = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        governor.duty = 1.0
        return False

    monkeypatch.setattr(rebuild._stop, "wait", wait)
    rebuild._wait(0.5, 10.0)
    assert len(waits) == 1
