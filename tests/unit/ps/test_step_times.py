"""StepTimes: the driver's record of each step's start time and the cutoffs of Evict(ttl_seconds) passes worked
out from it (a fake clock here): the newest step that started more than S seconds before the pass's step, plus one;
a step started again keeps its first time; the steps before a resume count as started with the first after it."""

from __future__ import annotations

from typing import Iterator, List

import pytest

from xdl_ec.ps import step_times
from xdl_ec.ps.step_times import StepTimes
from xdl_ec.sparse.row_rules import Evict
from xdl_ec.sparse.table_config import Table


def fake_clock(monkeypatch: pytest.MonkeyPatch, times: List[float]) -> List[float]:
    """The clock reads ``times`` in turn; returns the list of reads left (to see how many were made)."""
    left = list(times)
    reads: Iterator[float] = iter(times)

    def clock() -> float:
        left.pop(0)
        return next(reads)

    monkeypatch.setattr(step_times, "CLOCK", clock)
    return left


TABLES = [
    Table("a", 4, block_slots=8, evict=Evict(ttl_seconds=2.5, every_steps=2)),
    Table("b", 4, block_slots=8, evict=Evict(ttl_seconds=0.5, every_steps=3)),
    Table("c", 4, block_slots=8, evict=Evict(ttl_steps=2, every_steps=2)),  # by steps: no cutoff
    Table("d", 4, block_slots=8),
]


def test_the_cutoff_is_one_past_the_newest_step_older_than_the_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    # steps 1..8 start at these times (step 5 after a pause)
    fake_clock(monkeypatch, [10.0, 11.0, 12.0, 13.0, 20.0, 20.2, 20.4, 23.0])
    times = StepTimes(TABLES)
    assert times.active
    got = {step: times.start(step) for step in range(1, 9)}
    # a at step 2 (t 11): nothing started before 8.5, no cutoff; at 4 (t 13): step 1 started before 10.5; at 6
    # (t 20.2): steps 1..4 before 17.7; at 8 (t 23.0): steps 1..7 before 20.5 (step 7 at 20.4). b at 3 (t 12): steps
    # 1, 2 before 11.5; at 6: steps 1..4 before 19.7 (step 5 at 20.0 is not).
    assert got == {
        1: None,
        2: None,
        3: {"b": 3},
        4: {"a": 2},
        5: None,
        6: {"a": 5, "b": 5},
        7: None,
        8: {"a": 8},
    }


def test_a_step_started_again_keeps_its_first_time(monkeypatch: pytest.MonkeyPatch) -> None:
    left = fake_clock(monkeypatch, [0.0, 1.0, 2.0, 3.0, 100.0])
    times = StepTimes(TABLES[:1])
    first = [times.start(step) for step in (1, 2, 3, 4)]
    assert first[3] == {"a": 2}
    # a rollback trains steps 3 and 4 again much later: no clock read, the same cutoffs
    assert [times.start(3), times.start(4)] == [None, {"a": 2}]
    assert left == [100.0]
    assert times.start(6) == {"a": 5}  # step 5 never started here: it counts as started with step 6


def test_the_steps_before_a_resume_count_as_started_with_the_first_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_clock(monkeypatch, [50.0, 51.0, 52.0, 53.0, 54.0])
    times = StepTimes(TABLES[:1])
    times.resume(10)
    assert [times.start(step) for step in (11, 12, 13, 14, 15)] == [None, None, None, {"a": 12}, None]
    with pytest.raises(ValueError, match="resumed after 10"):
        times.start(10)


def test_a_clock_that_steps_back_does_not_reorder_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_clock(monkeypatch, [10.0, 11.0, 5.0, 12.0])
    times = StepTimes(TABLES[:1])
    # step 3 counts as started at 11.0: at step 4 (t 12) no step started before 9.5
    assert [times.start(step) for step in (1, 2, 3, 4)] == [None, None, None, None]


def test_without_a_table_by_seconds_nothing_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    left = fake_clock(monkeypatch, [1.0])
    times = StepTimes(TABLES[2:])
    assert not times.active and times.start(2) is None and left == [1.0]
