"""ReadCost (xdl_ec.ps.read_cost): the fixed part and the part per slot of a background move's reads, fitted from
the reads so far, and the most slots a read may ask to end within the seconds left."""

from __future__ import annotations

import pytest

from xdl_ec.ps.read_cost import ReadCost

FIXED, PER_SLOT = 3e-4, 8e-7


def cost(slots: int) -> float:
    return FIXED + PER_SLOT * slots


def test_reads_of_several_sizes_give_the_fixed_part_and_the_part_per_slot() -> None:
    c = ReadCost()
    assert not c.known and c.fit() == (0.0, 0.0)
    for slots in (1024, 256, 4096, 300, 8192, 17):
        c.add(slots, cost(slots))
    fixed, per_slot = c.fit()
    assert fixed == pytest.approx(FIXED, rel=1e-6) and per_slot == pytest.approx(PER_SLOT, rel=1e-6)
    assert c.seconds(2000) == pytest.approx(cost(2000), rel=1e-6)
    assert c.seconds(0) == pytest.approx(FIXED, rel=1e-6)  # a read of nothing still pays the fixed part


def test_one_size_seen_is_a_mean_per_slot_with_no_fixed_part() -> None:
    c = ReadCost()
    c.add(1024, cost(1024))
    c.add(1024, cost(1024))
    assert c.known and c.fit() == (0.0, pytest.approx(cost(1024) / 1024))
    # the fixed part is spread over the slots: a smaller read is predicted cheaper than it is, a larger one dearer
    assert c.seconds(256) < cost(256) and c.seconds(4096) > cost(4096)


def test_a_cost_that_changes_is_followed_as_old_reads_fade() -> None:
    c = ReadCost(half_life=8)
    for i in range(200):
        slots = 256 + 97 * (i % 13)
        c.add(slots, cost(slots))
    for i in range(200):  # the machine got busy: every read takes three times as long
        slots = 256 + 97 * (i % 13)
        c.add(slots, 3 * cost(slots))
    fixed, per_slot = c.fit()
    assert fixed == pytest.approx(3 * FIXED, rel=0.01) and per_slot == pytest.approx(3 * PER_SLOT, rel=0.01)


def test_noise_that_makes_the_fit_negative_falls_back_to_a_cost_per_slot() -> None:
    c = ReadCost()
    c.add(100, 2e-3)  # a slow small read (a pause of the machine) and a fast large one: a falling line
    c.add(1000, 1e-3)
    fixed, per_slot = c.fit()
    assert fixed == 0.0 and per_slot == pytest.approx(3e-3 / 1100, rel=0.02)  # the weighted mean
    c2 = ReadCost()
    c2.add(100, 1e-6)  # a steep line through a negative intercept: the line through the origin
    c2.add(1000, 1e-3)
    fixed, per_slot = c2.fit()
    assert fixed == 0.0 and per_slot > 0 and c2.seconds(1000) == pytest.approx(1e-3, rel=0.01)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="half_life"):
        ReadCost(half_life=0)
    c = ReadCost()
    with pytest.raises(ValueError, match="slots >= 0 and finite seconds"):
        c.add(-1, 1.0)
    with pytest.raises(ValueError, match="slots >= 0 and finite seconds"):
        c.add(10, float("nan"))
    assert not c.known  # nothing was counted


def fitted() -> ReadCost:
    c = ReadCost()
    for slots in (1024, 4096):
        c.add(slots, cost(slots))
    return c


def test_a_read_is_sized_to_the_seconds_left_by_the_fit() -> None:
    c = fitted()
    n = c.slots_for(0.01, most=1.0, fixed_share=0.2, least=16)
    assert n == pytest.approx((0.01 - FIXED) / PER_SLOT, abs=1) and c.seconds(n) == pytest.approx(0.01, rel=1e-4)


def test_a_read_is_large_enough_that_its_fixed_part_is_at_most_the_share() -> None:
    c = fitted()
    n = c.slots_for(0.0, most=1.0, fixed_share=0.2, least=16)  # no credit left: the smallest worthwhile read
    assert n == pytest.approx(FIXED * 0.8 / (0.2 * PER_SLOT), abs=1)
    assert FIXED / c.seconds(n) == pytest.approx(0.2, rel=1e-3)


def test_a_read_is_capped_by_the_most_seconds_at_the_mean_cost_per_slot_and_floored_by_least() -> None:
    c = fitted()
    mean = c.mean_per_slot()
    assert mean == pytest.approx((cost(1024) + cost(4096)) / 5120, rel=1e-2)  # the reads weighted as they fade
    assert mean > PER_SLOT  # the fixed parts spread over the slots: an upper bound
    n = c.slots_for(1.0, most=4e-3, fixed_share=0.2, least=16)
    assert n == int(4e-3 / mean) and c.seconds(n) <= 4e-3
    assert c.slots_for(0.0, most=1e-6, fixed_share=0.2, least=16) == 16
    assert ReadCost().slots_for(1.0, most=1.0, fixed_share=0.2, least=16) == 16  # nothing timed yet


def test_a_fixed_share_outside_0_1_is_refused() -> None:
    with pytest.raises(ValueError, match="fixed_share must be in"):
        fitted().slots_for(0.01, most=1.0, fixed_share=1.0, least=16)
