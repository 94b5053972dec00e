"""Bounded tables from Python: Admit / Evict settings, their per-server share, admission and eviction through
EmbeddingTable, the report entry, and export / load of the eviction words."""

from __future__ import annotations

import numpy as np
import pytest

import xdl_ec
from xdl_ec.sparse.row_rules import Admit, Evict
from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.sparse.table_config import Table


def grads(n: int, dim: int = 4, value: float = 0.5) -> np.ndarray:
    return np.full((n, dim), value, np.float32)


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: Admit(min_count=-1), "min_count"),
        (lambda: Admit(min_count=0), "min_count"),
        (lambda: Admit(counter="bloom"), "counter"),
        (lambda: Evict(ttl_steps=0), "ttl_steps"),
        (lambda: Evict(ttl_steps=-3), "ttl_steps"),
        (lambda: Evict(max_rows=-5), "max_rows"),
        (lambda: Evict(min_l2=0.0), "min_l2"),
        (lambda: Evict(min_l2=float("nan")), "min_l2"),
        (lambda: Evict(ttl_steps=5, policy="fifo"), "policy"),
        (lambda: Evict(ttl_steps=5, every_steps=0), "every_steps"),
        (lambda: Evict(), "at least one"),
        (lambda: Table("t", 4, block_slots=64, evict=Evict(max_rows=63)), "below one block"),
        (lambda: Table("t", 4, admit=3), "admit"),  # type: ignore[arg-type]
    ],
)
def test_bad_settings_are_clear_errors(make, field):
    with pytest.raises((ValueError, TypeError), match=field):
        make()


def test_the_public_names_and_tables_without_rules_stay_as_they_were():
    assert xdl_ec.Admit is Admit and xdl_ec.Evict is Evict
    plain = Table("t", 4, block_slots=8)
    assert "admit" not in plain.describe() and "evict" not in plain.describe()
    assert not plain.shard_config().row_policy.active
    ruled = Table("t", 4, block_slots=8, evict=Evict(ttl_steps=3))
    assert ruled.describe()["evict"]["ttl_steps"] == 3
    assert EmbeddingTable.from_config(ruled).record_bytes == EmbeddingTable.from_config(plain).record_bytes + 16


def test_max_rows_is_shared_evenly_over_servers():
    table = Table("t", 4, block_slots=8, evict=Evict(max_rows=70, policy="lru", every_steps=5))
    config = table.shard_config(servers=4).row_policy
    assert (config.max_rows, config.policy, config.evict_every_steps) == (17, "lru", 5)
    assert table.shard_config().row_policy.max_rows == 70
    with pytest.raises(ValueError, match="below one block"):
        table.shard_config(servers=9)  # 7 rows per server < 8


def test_admission_is_exact_and_not_admitted_ids_read_zeros():
    table = EmbeddingTable("t", 4, admit=Admit(min_count=3), block_slots=8)
    reference = EmbeddingTable("r", 4, block_slots=8)
    keys = np.array([7], np.int64)
    assert not table.pull(keys).any() and len(table) == 0  # a pull does not insert
    table.push(np.array([7, 7]), grads(2), step=1)  # one occurrence
    table.push(keys, grads(1), step=2)
    assert not table.pull(keys).any()
    assert not table.find(keys)[1][0]
    assert table.export()["keys"].size == 0
    table.push(keys, grads(1, value=0.25), step=3)  # the third: admitted with this gradient
    reference.push(keys, grads(1, value=0.25), step=3)
    np.testing.assert_array_equal(table.pull(keys), reference.pull(keys))
    report = table.bounded_report()
    assert report["rows"] == 1 and report["admitted"] == 1
    assert report["not_admitted_lookups"] == 4  # two pulls and two pushes before admission
    assert set(report) == {"rows", "admitted", "not_admitted_lookups", "evicted", "bytes"}
    assert set(report["evicted"]) == {"ttl", "l2", "cap"} and report["bytes"] > 0


def test_pushes_run_the_passes_and_the_cap_is_never_exceeded():
    table = EmbeddingTable("t", 4, evict=Evict(ttl_steps=20, max_rows=32, every_steps=4), block_slots=8)
    rng = np.random.default_rng(5)
    next_new = 100
    for step in range(1, 81):
        batch = np.concatenate([np.arange(8), np.arange(next_new, next_new + 6), rng.integers(100, next_new + 1, 2)])
        next_new += 6
        table.pull(batch)
        assert len(table) <= 32
        table.push(batch, grads(batch.size), step=step)
        assert len(table) <= 32
        if step % 4 == 0:
            assert len(table) <= 32 - 32 // 8
    rows, found = table.find(np.arange(8))
    assert found.all()  # the hot ids survive (most uses)
    evicted = table.bounded_report()["evicted"]
    assert evicted["cap"] > 0 and evicted["l2"] == 0


def test_ttl_and_an_explicit_pass():
    table = EmbeddingTable("t", 4, evict=Evict(ttl_steps=2, every_steps=1000), block_slots=8)
    for step in range(1, 6):
        table.push(np.array([step]), grads(1), step=step)
    freed = table.evict(5)
    assert freed["ttl"] == 2 and sorted(freed["keys"].tolist()) == [1, 2]  # 5 - last > 2
    assert sorted(table.export()["keys"].tolist()) == [3, 4, 5]
    with pytest.raises(ValueError):
        table.evict(0)


def test_a_block_a_pass_empties_is_given_back_and_reused():
    table = EmbeddingTable("t", 16, evict=Evict(ttl_steps=2, every_steps=1000), initializer="zeros")
    block_bytes = table.memory_stats()["record_bytes"] * 1024
    old, kept = np.arange(1024), np.arange(10_000, 11_024)  # block 0, block 1
    table.push(old, grads(1024, 16), step=1)
    table.push(kept, grads(1024, 16), step=1)
    held = table.bounded_report()["bytes"]
    for step in range(2, 6):
        table.push(kept[:1], grads(1, 16), step=step)
    assert table.evict(5)["ttl"] == 2047
    assert table.memory_stats()["slot_bytes"] == block_bytes  # block 0 given back
    # the report's bytes drop by the block, less the free list's growth
    assert held - table.bounded_report()["bytes"] >= block_bytes - table.memory_stats()["free_list_bytes"]
    table.push(np.array([7, 8]), grads(2, 16), step=6)  # the lowest free slots: block 0 again
    assert table.memory_stats()["slot_bytes"] == 2 * block_bytes
    fresh = EmbeddingTable("t", 16, evict=Evict(ttl_steps=2, every_steps=1000), initializer="zeros")
    fresh.push(np.array([7, 8]), grads(2, 16), step=6)
    np.testing.assert_array_equal(table.pull(np.array([7, 8])), fresh.pull(np.array([7, 8])))


def test_export_with_words_and_load_words_resume_the_same_decisions():
    rules = Evict(ttl_steps=3, max_rows=8, every_steps=1000)
    table = EmbeddingTable("t", 4, evict=rules, block_slots=8)
    for step in range(1, 7):
        table.push(np.array([step, 50]), grads(2), step=step)
    saved = table.export(with_words=True)
    assert saved["uses"][saved["keys"] == 50][0] == 6
    resumed = EmbeddingTable("t", 4, evict=rules, block_slots=8)
    resumed.load(saved["keys"], saved["values"], saved["state"])
    resumed.load_words(saved["keys"], saved["uses"], saved["last_step"])
    a, b = table.evict(7), resumed.evict(7)
    assert sorted(a["keys"].tolist()) == sorted(b["keys"].tolist()) == [1, 2, 3]
    before = resumed.export(with_words=True)
    with pytest.raises(ValueError, match="no row"):
        resumed.load_words(np.array([50, 999]), np.array([1, 1]), np.array([1, 1]))
    with pytest.raises(ValueError, match="uses"):
        resumed.load_words(np.array([50]), np.array([-1]), np.array([1]))
    after = resumed.export(with_words=True)
    for name in before:
        np.testing.assert_array_equal(before[name], after[name])
    with pytest.raises(ValueError, match="row rules"):
        EmbeddingTable("p", 4).export(with_words=True)
