"""RebuildDeadline: the duty a rebuild needs to keep the vulnerable window's bound, from its measured progress, and
when training must be held; the background rebuild takes that duty. The clock is scripted (no timing)."""

from __future__ import annotations

from typing import List

import pytest

from xdl_ec.ft.ec_strategy import ErasureCoded
from xdl_ec.ft.rebuild_deadline import AIM, RebuildDeadline


class ScriptedClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _deadline(within: float = 10.0) -> "tuple[RebuildDeadline, ScriptedClock]":
    clock = ScriptedClock()
    return RebuildDeadline(within, clock=clock), clock


def test_no_window_or_no_progress_measured_asks_for_nothing() -> None:
    deadline, clock = _deadline()
    assert deadline.duty(50) == 0.0 and not deadline.must_hold(50)
    deadline.open(clock.now)
    assert deadline.duty(50) == 0.0  # nothing measured yet: the other pacing rules decide
    deadline.progress(2, 0.1)
    assert deadline.duty(0) == 0.0  # nothing left


def test_the_duty_is_the_work_left_over_the_time_left_to_the_aim() -> None:
    deadline, clock = _deadline(within=10.0)
    deadline.open(clock.now)
    deadline.progress(4, 0.2)  # 0.05 s a stripe
    deadline.progress(6, 0.3)
    clock.now += 2.0  # 8 s * AIM - 2 s left
    left = AIM * 10.0 - 2.0
    assert deadline.seconds_left() == pytest.approx(left)
    assert deadline.duty(40) == pytest.approx(40 * 0.05 / left)
    assert not deadline.must_hold(40)


def test_the_duty_rises_as_the_window_runs_out_and_then_training_is_held() -> None:
    deadline, clock = _deadline(within=10.0)
    deadline.open(clock.now)
    deadline.progress(1, 0.5)  # a slow machine: 0.5 s a stripe
    duties: List[float] = []
    for _ in range(4):
        duties.append(deadline.duty(10))
        clock.now += 1.0
    assert duties == sorted(duties) and duties[0] < duties[-1]
    assert not deadline.must_hold(1)  # 0.5 s of work in 8 - 4 = 4 s left
    assert deadline.must_hold(10)  # 5 s of work in 4 s: even flat out beside training it would miss
    clock.now += 10.0
    assert deadline.duty(1) == float("inf") and deadline.must_hold(1)  # the aim passed


def test_a_step_more_beside_training_counts_against_the_time_left() -> None:
    deadline, clock = _deadline(within=10.0)
    deadline.open(clock.now)
    deadline.progress(1, 0.5)
    clock.now += 4.0  # 4 s left to the aim; 6 stripes are 3 s of work
    assert not deadline.must_hold(6)
    assert deadline.must_hold(6, next_chance=1.5)  # the next boundary comes too late to hold then
    assert deadline.must_hold(1, next_chance=4.0)  # the aim passes before the next boundary


def test_slower_progress_under_load_raises_the_duty() -> None:
    alone, clock = _deadline()
    alone.open(clock.now)
    alone.progress(10, 0.1)
    loaded, clock2 = _deadline()
    loaded.open(clock2.now)
    loaded.progress(10, 0.1)
    for _ in range(16):  # the recent batches dominate: another job took the CPU
        loaded.progress(10, 1.0)
    assert loaded.duty(20) > alone.duty(20) * 5


def test_a_window_keeps_its_first_loss_and_starts_at_its_detection() -> None:
    deadline, clock = _deadline(within=5.0)
    deadline.open(100.0)
    deadline.open(103.0)  # the recovery started over: the deadline does not move
    assert deadline.since == 100.0
    deadline.starts_at(99.5)  # the loss was detected 0.5 s after it happened
    deadline.starts_at(99.9)
    assert deadline.since == 99.5
    deadline.close()
    assert not deadline.is_open and deadline.duty(10) == 0.0
    deadline.starts_at(1.0)  # no window open: nothing to refine
    assert deadline.since is None


@pytest.mark.parametrize("within", [0, -1, float("nan"), float("inf"), "10", None])
def test_a_bad_bound_is_a_clear_error(within: object) -> None:
    with pytest.raises(ValueError, match="rebuild_within: must be a"):
        RebuildDeadline(within)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rebuild_within: must be a"):
        ErasureCoded(2, 1, rebuild_within=within)  # type: ignore[arg-type]


def test_the_background_rebuild_takes_the_duty_the_deadline_asks() -> None:
    strategy = ErasureCoded(2, 1, rebuild_share=0.05, rebuild_keeps=0.0)
    clock = ScriptedClock()
    deadline = strategy.deadline
    deadline.clock = clock
    rebuild = strategy.background
    assert rebuild is not None and rebuild.deadline is deadline
    strategy.coordinator.plan = [("t", stripe) for stripe in range(20)]
    assert rebuild.duty == 0.05  # no window open
    deadline.open(clock.now)
    deadline.progress(1, 0.1)
    clock.now += 3.0  # 5 s left to the aim, 20 stripes of 0.1 s: 40% of wall time
    assert rebuild.duty == pytest.approx(0.4)
    assert rebuild._pause(0.1, None) == pytest.approx(0.1 * 0.6 / 0.4)
    clock.now += 4.0  # 1 s left, 2 s of work: flat out, and training held
    assert rebuild.duty == 1.0 and rebuild._pause(0.1, None) == 0.0
    assert deadline.must_hold(len(strategy.coordinator.plan))
