"""A sketch counter's cells (Admit(counter="sketch")) in saves: a shard checkpoint holds and restores them, and a
resume routes them: at the saved server count each server its own, at another the sum of all (never under-counting)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xdl_ec.keep.checkpoint import ShardCheckpoint
from xdl_ec.keep.saved_run import SavedRun
from xdl_ec.sparse.row_rules import Admit
from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.sparse.table_config import Table


def sketch_table() -> Table:
    return Table("t", 4, block_slots=8, admit=Admit(min_count=3, counter="sketch", width=64, depth=2))


def push(table: EmbeddingTable, keys: list, step: int) -> None:
    table.push(np.array(keys, np.int64), np.full((len(keys), 4), 0.5, np.float32), step=step)


def test_a_shard_checkpoint_holds_the_cells(tmp_path: Path) -> None:
    table = EmbeddingTable.from_config(sketch_table())
    for step in range(1, 4):
        push(table, [1, 2, step + 10], step)
    ShardCheckpoint.write(tmp_path / "ckpt", {"t": table}, step=3)
    template = EmbeddingTable.from_config(sketch_table())
    arrays = ShardCheckpoint.open(tmp_path / "ckpt").read("t", template)
    np.testing.assert_array_equal(arrays["sketch"], table.shard.export_sketch())
    (restored,) = ShardCheckpoint.open(tmp_path / "ckpt").restore({"t": template}).values()
    np.testing.assert_array_equal(restored.shard.export_sketch(), table.shard.export_sketch())


class FakeSave:
    """The parts a SavedRun routes: a checkpoint's saved server ids and one part per server."""

    def __init__(self, parts: list) -> None:
        self.servers = list(range(len(parts)))
        self.parts = parts


def routed(parts: list, servers: int) -> dict:
    saved = SavedRun.__new__(SavedRun)
    saved.checkpoint = FakeSave(parts)  # type: ignore[assignment]
    saved.rows = lambda table: iter(parts)  # type: ignore[method-assign]
    return saved.routed_rows("t", servers)


def test_a_resume_at_the_saved_count_keeps_each_servers_cells_and_at_another_sums_them() -> None:
    def part(seed: int) -> dict:
        table = EmbeddingTable.from_config(sketch_table())
        push(table, [seed, seed + 1, seed * 5], 1)
        return table.cut(whole=True)

    parts = [part(1), part(2), part(3)]
    same = routed(parts, 3)
    for server in range(3):
        np.testing.assert_array_equal(same[server]["sketch"], parts[server]["sketch"])
    total = np.sum([p["sketch"].astype(np.int64) for p in parts], axis=0)
    other = routed(parts, 2)
    assert sorted(other) == [0, 1]
    for server in (0, 1):
        np.testing.assert_array_equal(other[server]["sketch"], total)
    # the sum never under-counts: every id's estimate from it is at least its estimate on its old server
    merged = EmbeddingTable.from_config(sketch_table())
    merged.load_rows(other[0])
    for p, seed in zip(parts, (1, 2, 3)):
        keys = np.array([seed, seed + 1, seed * 5], np.int64)
        old = EmbeddingTable.from_config(sketch_table())
        old.shard.load_sketch(p["sketch"])
        assert (merged.shard.sketch_estimate(keys) >= old.shard.sketch_estimate(keys)).all()
