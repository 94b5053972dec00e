"""EmbeddingTable.slot_rows: the live rows of given slots with their clocks, what a resize's background copy reads
(xdl_ec.ps.background_move): the same rows as an export, and a clock that changes when the row does."""

from __future__ import annotations

import numpy as np
import pytest

from xdl_ec.sparse.table import EmbeddingTable


def _table() -> EmbeddingTable:
    t = EmbeddingTable("t", 4)
    t.pull(np.arange(1, 301, dtype=np.int64) * 7)
    return t


def test_the_rows_of_every_slot_are_the_export_with_the_shards_clocks() -> None:
    t = _table()
    rows = t.slot_rows(np.arange(t.slot_end))
    exported = t.export()
    assert np.array_equal(rows["keys"], exported["keys"])  # both in slot order
    assert np.array_equal(rows["values"], exported["values"]) and np.array_equal(rows["state"], exported["state"])
    assert np.array_equal(rows["clocks"], t.shard.clocks(rows["keys"]))
    assert rows["slots"].tolist() == list(range(300))  # slots fill in order: 300 rows, the rest of the block free


def test_a_pushed_row_has_another_clock_and_scattered_slots_read_their_rows() -> None:
    t = _table()
    before = t.slot_rows(np.arange(t.slot_end))
    t.push(before["keys"][[3, 250]], np.ones((2, 4), np.float32), step=1)
    picked = t.slot_rows(np.array([3, 100, 250, 299, 900]))  # 900: a free slot, left out
    assert picked["keys"].tolist() == before["keys"][[3, 100, 250, 299]].tolist()
    changed = picked["clocks"] != before["clocks"][[3, 100, 250, 299]]
    assert changed.tolist() == [True, False, True, False]
    assert not np.array_equal(picked["values"][0], before["values"][3])


def test_slots_out_of_order_are_an_error() -> None:
    with pytest.raises(ValueError, match="ascending"):
        _table().slot_rows(np.array([5, 3]))
