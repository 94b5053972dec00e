"""PipelinedTables: pushes on the tables' thread, every read after the pushes before it (the serial step's order)."""

from __future__ import annotations

import numpy as np
import pytest

import xdl_ec
from xdl_ec.job.local_tables import LocalTables
from xdl_ec.job.pipelined_tables import PipelinedTables
from xdl_ec.sparse import optim

DIM = 4


def tables() -> list:
    return [xdl_ec.Table("t", DIM, optimizer=optim.Adagrad(0.1), seed=5)]


def steps(client: LocalTables) -> list:
    """Three steps of pull, push over overlapping keys: each pull must see the push before it."""
    rng = np.random.default_rng(0)
    pulled = []
    for step in range(1, 4):
        keys = np.unique(rng.integers(0, 50, 40).astype(np.uint64))
        rows = client.pull({"t": (keys, DIM)})["t"]
        pulled.append(rows.copy())
        client.push({"t": (keys, rng.normal(size=(keys.size, DIM)).astype(np.float32))}, step)
    pulled.append(client.pull({"t": (np.arange(50, dtype=np.uint64), DIM)})["t"])
    return pulled


def test_every_pull_sees_the_push_before_it_as_the_serial_tables_do() -> None:
    serial, pipelined = LocalTables(tables()), PipelinedTables(tables())
    try:
        for a, b in zip(steps(serial), steps(pipelined)):
            np.testing.assert_array_equal(a, b)
        exported = [e["values"] for [e] in pipelined.exports()]
        np.testing.assert_array_equal(exported[0], serial.exports()[0][0]["values"])
    finally:
        serial.close()
        pipelined.close()


def test_a_failed_push_is_raised_by_the_next_read() -> None:
    t = PipelinedTables(tables())
    try:
        keys = np.arange(3, dtype=np.uint64)
        t.pull({"t": (keys, DIM)})
        t.push({"t": (keys, np.zeros((3, DIM + 1), np.float32))}, 1)  # wrong width: fails on the thread
        with pytest.raises(ValueError, match="grads"):
            t.pull({"t": (keys, DIM)})
        t.pull({"t": (keys, DIM)})  # raised once; the tables go on
    finally:
        t.close()
