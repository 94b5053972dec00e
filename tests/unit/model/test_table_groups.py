"""Table groups' parts on their own (issue #49): a group's one-pass unique equals each table's own, the fresh mask
per table, a group's pull and push equal each table's own calls and refuse bad input without changing a table, and
the group's TF op and its gradient equal the per-feature gather's bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import xdl_ec
from xdl_ec import _core
from xdl_ec.model.table_groups import GroupKeys, TableGroup
from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.tf import tf_ops


def _parts(rng: np.random.Generator) -> list:
    return [rng.integers(-5, 40, n) for n in (30, 0, 17, 64)]


def test_a_groups_unique_equals_each_tables_own() -> None:
    parts = _parts(np.random.default_rng(0))
    bounds = np.concatenate([[0], np.cumsum([p.size for p in parts])])
    # parts 0 and 3 belong to table 2, part 1 to table 0, part 2 to table 1: several parts per table too
    owner = np.array([2, 0, 1, 2], dtype=np.int32)
    unique, offsets, inverse = _core.group_sorted_unique(np.concatenate(parts), bounds, owner, 3)
    for table in range(3):
        ids = np.concatenate([parts[i] for i in range(4) if owner[i] == table] + [np.zeros(0, np.int64)])
        own, own_inverse = np.unique(ids, return_inverse=True)
        np.testing.assert_array_equal(unique[offsets[table] : offsets[table + 1]], own)
        got = np.concatenate([inverse[bounds[i] : bounds[i + 1]] for i in range(4) if owner[i] == table] + [[]])
        np.testing.assert_array_equal(got - offsets[table], own_inverse)


def test_a_groups_unique_refuses_a_part_of_no_table() -> None:
    with pytest.raises(ValueError, match="names table 3"):
        _core.group_sorted_unique(np.arange(4), np.array([0, 4]), np.array([3], np.int32), 2)


def test_fresh_is_per_table() -> None:
    keys, offsets = np.array([1, 5, 9, 1, 2]), np.array([0, 3, 5])
    before, before_offsets = np.array([5, 1, 3]), np.array([0, 1, 3])  # table 0 had 5; table 1 had 1 and 3
    fresh = _core.group_fresh(keys, offsets, before, before_offsets)
    np.testing.assert_array_equal(fresh, [True, False, True, False, True])


def test_select_keeps_each_tables_part() -> None:
    group = TableGroup("g", 4, ("a", "b", "c"), ("a", "b", "c"), (1, 1, 1), ("single",) * 3)
    keys = GroupKeys(np.array([1, 2, 3, 4, 5]), np.array([0, 2, 2, 5]), group)
    chosen = keys.select(np.array([False, True, True, False, True]))
    np.testing.assert_array_equal(chosen.keys, [2, 3, 5])
    np.testing.assert_array_equal(chosen.offsets, [0, 1, 1, 3])


def _tables() -> list:
    return [
        EmbeddingTable("a", 4, optimizer=xdl_ec.optim.Adagrad(0.1), seed=1),
        EmbeddingTable("b", 4, optimizer=xdl_ec.optim.Adam(0.01), seed=2),
        EmbeddingTable("c", 4, optimizer=xdl_ec.optim.Ftrl(0.1), seed=3),
    ]


def test_a_groups_pull_and_push_equal_each_tables_own() -> None:
    grouped, alone = _tables(), _tables()
    shards = _core.ShardGroup([t.shard for t in grouped])
    keys, offsets = np.array([3, 8, 3, 11, 12, 13]), np.array([0, 2, 3, 6])
    rows = shards.pull(keys, offsets)
    grads = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    shards.push(keys, grads, offsets, 1)
    for i, table in enumerate(alone):
        part = slice(offsets[i], offsets[i + 1])
        np.testing.assert_array_equal(rows[part], table.pull(keys[part]))
        table.push(keys[part], grads[part], step=1)
    for got, want in zip(grouped, alone):
        for name, value in got.export().items():
            np.testing.assert_array_equal(value, want.export()[name])


def test_a_bad_group_push_changes_no_table() -> None:
    tables = _tables()
    shards = _core.ShardGroup([t.shard for t in tables])
    keys, offsets = np.array([1, 2, 3]), np.array([0, 1, 2, 3])
    shards.pull(keys, offsets)
    before = [t.export() for t in tables]
    grads = np.ones((3, 4), np.float32)
    grads[2, 1] = np.nan  # the last table's part: the first two must not be applied either
    with pytest.raises(ValueError, match="not finite"):
        shards.push(keys, grads, offsets, 1)
    with pytest.raises(ValueError, match="offsets"):
        shards.push(keys, np.ones((3, 4), np.float32), np.array([0, 2, 1, 3]), 1)
    for table, old in zip(tables, before):
        for name, value in table.export().items():
            np.testing.assert_array_equal(value, old[name])


def test_a_group_refuses_tables_of_two_dims() -> None:
    with pytest.raises(ValueError, match="one dim"):
        _core.ShardGroup([EmbeddingTable("a", 4).shard, EmbeddingTable("b", 8).shard])


def test_the_group_op_and_its_gradient_equal_each_features_gather() -> None:
    rng = np.random.default_rng(2)
    batch, dim = 5, 3
    rows = tf.constant(rng.normal(size=(40, dim)).astype(np.float32))
    widths, modes = (1, 3, 2, 4), ("single", "mean", "none", "sqrtn")
    inverses = [rng.integers(0, 40, (batch, w)).astype(np.int32) for w in widths]
    flat = np.concatenate([i.reshape(-1) for i in inverses])
    weights = [
        tf.constant(rng.normal(size=s).astype(np.float32))
        for s in ((batch, dim), (batch, dim), (batch, 2, dim), (batch, dim))
    ]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(rows)
        grouped = tf_ops.group_gather(rows, flat, widths, modes)
        alone = [
            tf_ops.gather(rows, inverses[0])[:, 0, :],
            tf_ops.gather(rows, inverses[1], "mean"),
            tf_ops.gather(rows, inverses[2]),
            tf_ops.gather(rows, inverses[3], "sqrtn"),
        ]
        grouped_loss = [tf.reduce_sum(g * w) for g, w in zip(grouped, weights)]
        alone_loss = [tf.reduce_sum(g * w) for g, w in zip(alone, weights)]
    for g, a in zip(grouped, alone):
        np.testing.assert_array_equal(g.numpy(), a.numpy())
    # per feature (the rows a table of the group owns see only its feature's gradient)
    for g, a in zip(grouped_loss, alone_loss):
        np.testing.assert_array_equal(tape.gradient(g, rows).numpy(), tape.gradient(a, rows).numpy())


def test_the_group_op_names_bad_input() -> None:
    with pytest.raises(ValueError, match="one width"):
        tf_ops.group_gather(tf.zeros([3, 2]), np.zeros(4, np.int32), (2,), ("bogus",))
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside"):
        tf_ops.group_gather(tf.zeros([3, 2]), np.array([0, 7], np.int32), (1,), ("single",))
