"""Admit(counter="sketch") from Python: its settings and their errors, the core's config, admission through
EmbeddingTable without a record per id, and the cells in a whole cut, a shard checkpoint and a resume's routing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from xdl_ec.sparse.row_rules import Admit, Evict
from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.sparse.table_config import Table


def sketch_table(**admit: Any) -> Table:
    settings = dict(min_count=3, counter="sketch", width=64, depth=2, decay_every_steps=0)
    settings.update(admit)
    return Table("t", 4, block_slots=8, admit=Admit(**settings))  # type: ignore[arg-type]


def push(table: EmbeddingTable, keys: list, step: int) -> None:
    table.push(np.array(keys, np.int64), np.full((len(keys), 4), 0.5, np.float32), step=step)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(counter="bloom"), "counter must be one of"),
        (dict(counter="sketch", min_count=1), r"min_count must be in \[2, 65535\]"),
        (dict(counter="sketch", min_count=65536), r"min_count must be in \[2, 65535\]"),
        (dict(counter="sketch", width=15), "width"),
        (dict(counter="sketch", width=(1 << 22) + 1), "width"),
        (dict(counter="sketch", depth=0), "depth"),
        (dict(counter="sketch", depth=9), "depth"),
        (dict(counter="sketch", decay_every_steps=-1), "decay_every_steps"),
        (dict(width=1024), "give counter='sketch'"),  # sketch settings on the exact counter
    ],
)
def test_bad_sketch_settings_are_clear_errors(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Admit(**settings)


def test_the_core_gets_the_sketch_and_the_exact_counter_describes_as_before() -> None:
    assert Admit(min_count=3).describe() == {"min_count": 3, "counter": "exact"}
    admit = Admit(min_count=3, counter="sketch", width=64, depth=2, decay_every_steps=5)
    assert admit.describe() == {"min_count": 3, "counter": "sketch", "width": 64, "depth": 2, "decay_every_steps": 5}
    config = Table("t", 4, block_slots=8, admit=admit).shard_config().row_policy
    assert (config.admit_counter, config.sketch_width, config.sketch_depth) == ("sketch", 64, 2)
    assert config.sketch_decay_every_steps == 5 and config.sketch
    assert not Table("t", 4, admit=Admit(min_count=3)).shard_config().row_policy.sketch


def test_ids_below_min_count_cost_no_record_and_the_report_counts_them() -> None:
    table = EmbeddingTable.from_config(sketch_table())
    empty = table.bounded_report()["bytes"]
    for step in (1, 2):
        push(table, list(range(10)), step)
    assert len(table) == 0 and table.bounded_report()["bytes"] == empty
    assert table.shard.sketch_estimate(np.arange(10, dtype=np.int64)).min() >= 2
    push(table, [3], 3)
    report = table.bounded_report()
    assert report["rows"] == 1 and report["admitted"] == 1 and report["not_admitted_lookups"] == 20
    assert table.export()["keys"].tolist() == [3]


def test_a_whole_cut_carries_the_cells_and_load_rows_puts_them_back() -> None:
    table = EmbeddingTable.from_config(sketch_table())
    for step in range(1, 5):
        push(table, [step % 3, 7 + step, 20], step)
    cut = table.cut(whole=True)
    assert cut["sketch"].dtype == np.uint16 and cut["sketch"].size == 64 * 2
    assert cut["pending_keys"].size == 0  # the sketch keeps no pending ids
    resumed = EmbeddingTable.from_config(sketch_table())
    resumed.load_rows(cut)
    np.testing.assert_array_equal(resumed.shard.export_sketch(), table.shard.export_sketch())
    for step in range(5, 9):  # both decide the same from here
        push(table, [step % 4, 40 + step % 2], step)
        push(resumed, [step % 4, 40 + step % 2], step)
    assert sorted(resumed.export()["keys"]) == sorted(table.export()["keys"])
    bad = dict(cut, sketch=np.full(64 * 2 + 1, 1, np.uint16))
    with pytest.raises(ValueError, match="sketch_width"):
        EmbeddingTable.from_config(sketch_table()).load_rows(bad)
    with pytest.raises(ValueError, match=r"\[0, 65535\]"):
        EmbeddingTable.from_config(sketch_table()).load_rows(dict(cut, sketch=np.full(128, 70000)))


def test_an_evict_with_the_sketch_keeps_the_cells() -> None:
    table = EmbeddingTable.from_config(
        Table(
            "t",
            4,
            block_slots=8,
            admit=Admit(min_count=2, counter="sketch", width=64, depth=2),
            evict=Evict(ttl_steps=1, every_steps=1000),
        )
    )
    push(table, [1, 2], 1)
    push(table, [1, 2, 3], 2)
    cells = table.shard.export_sketch()
    assert table.evict(10)["ttl"] == 2
    np.testing.assert_array_equal(table.shard.export_sketch(), cells)
