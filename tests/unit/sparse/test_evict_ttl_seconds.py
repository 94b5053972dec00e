"""Evict(ttl_seconds=S): its settings, and the cutoff a push carries (EmbeddingTable.push(ttl_before=)) freeing
exactly the rows last updated before it, at the push's pass only; bad values are clear errors that change nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xdl_ec.sparse.row_rules import Evict
from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.sparse.table_config import Table


def grads(n: int, dim: int = 4) -> np.ndarray:
    return np.full((n, dim), 0.5, np.float32)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(ttl_seconds=0), "ttl_seconds"),
        (dict(ttl_seconds=0.0), "ttl_seconds"),
        (dict(ttl_seconds=-1.5), "ttl_seconds"),
        (dict(ttl_seconds=float("nan")), "ttl_seconds"),
        (dict(ttl_seconds=float("inf")), "ttl_seconds"),
        (dict(ttl_seconds="10"), "ttl_seconds"),
        (dict(ttl_seconds=True), "ttl_seconds"),
        (dict(ttl_steps=5, ttl_seconds=10.0), "not both"),
    ],
)
def test_bad_ttl_seconds_are_clear_errors(kwargs: dict, field: str) -> None:
    with pytest.raises((ValueError, TypeError), match=field):
        Evict(**kwargs)


def test_ttl_seconds_alone_is_a_rule_and_its_description_says_so() -> None:
    evict = Evict(ttl_seconds=30, every_steps=4)
    assert evict.ttl_seconds == 30.0 and isinstance(evict.ttl_seconds, float)
    assert evict.describe()["ttl_seconds"] == 30.0
    assert "ttl_seconds" not in Evict(ttl_steps=3).describe()  # descriptions without it stay as they were
    config = Table("t", 4, block_slots=8, evict=evict).shard_config().row_policy
    assert config.active and config.evict_every_steps == 4 and config.ttl_steps is None


def test_a_pass_frees_exactly_the_rows_last_updated_before_the_cutoff() -> None:
    table = EmbeddingTable.from_config(Table("t", 4, block_slots=8, evict=Evict(ttl_seconds=1.0, every_steps=4)))
    table.pull(np.array([100], np.int64))  # inserted by a pull, never pushed: last step 0
    for step in (1, 2, 3):
        table.push(np.array([step], np.int64), grads(1), step=step)  # key s last updated at step s
    table.push(np.array([5], np.int64), grads(1), step=5, ttl_before=5)  # no pass at step 5: ignored
    assert len(table) == 5
    table.push(np.array([7], np.int64), grads(1), step=8, ttl_before=3)
    assert sorted(table.export()["keys"].tolist()) == [3, 5, 7]
    assert table.bounded_report()["evicted"]["ttl"] == 3
    table.push(np.array([7], np.int64), grads(1), step=12)  # no cutoff: nothing goes by age
    assert len(table) == 3


@pytest.mark.parametrize("ttl_before", [-1, 9, 2.5, math.nan])
def test_a_bad_cutoff_is_a_clear_error_that_changes_nothing(ttl_before: float) -> None:
    table = EmbeddingTable.from_config(Table("t", 4, block_slots=8, evict=Evict(ttl_seconds=1.0, every_steps=4)))
    for step in (1, 2, 3):
        table.push(np.array([step], np.int64), grads(1), step=step)
    before = table.export()
    with pytest.raises((ValueError, TypeError), match="ttl_before"):
        table.push(np.array([1, 9], np.int64), grads(2), step=8, ttl_before=ttl_before)  # type: ignore[arg-type]
    after = table.export()
    assert all(np.array_equal(before[k], after[k]) for k in before)
