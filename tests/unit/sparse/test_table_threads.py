"""Concurrent pulls and pushes from Python threads (the binding releases the GIL, so they really race)
give the result of some serial order."""

from __future__ import annotations

import threading

import numpy as np

import xdl_ec
from xdl_ec.sparse import optim

THREADS = 4


def run_threads(target, n: int = THREADS) -> None:
    errors = []
    barrier = threading.Barrier(n)

    def wrapped(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as e:  # surfaced in the main thread below
            errors.append(e)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_concurrent_pushes_and_pulls_are_atomic() -> None:
    # SGD, zeros, lr = 0.5 and grads of 1: every value stays exact, so the final rows must be
    # -0.5 * (number of times the key was pushed), whatever the interleaving; a pull must never see
    # a half-applied push (all elements of a row equal, and all rows of one batch equally advanced,
    # since every push covers every key exactly once).
    t = xdl_ec.EmbeddingTable("t", 16, optimizer=optim.SGD(0.5), initializer="zeros", block_slots=64)
    keys = np.arange(2000, dtype=np.int64)
    rounds = 30

    def work(i: int) -> None:
        rng = np.random.default_rng(i)
        grads = np.ones((len(keys), 16), np.float32)
        for r in range(rounds):
            perm = rng.permutation(keys)
            if r % 2 == 0:
                t.push(perm, grads)
            else:
                rows = t.pull(perm)
                assert np.all(rows == rows[0, 0]), "a pull saw a partially applied push"

    run_threads(work)
    np.testing.assert_array_equal(t.pull(keys), np.full((len(keys), 16), -0.5 * THREADS * rounds / 2, np.float32))
    assert t.step == THREADS * rounds // 2  # the table's own step counter counted every push once


def test_concurrent_inserts_create_each_key_once() -> None:
    t = xdl_ec.EmbeddingTable("t", 8, seed=3, block_slots=32)
    keys = np.arange(20000, dtype=np.int64)

    def work(i: int) -> None:
        rng = np.random.default_rng(100 + i)
        for chunk in np.array_split(rng.permutation(keys), 20):
            t.pull(chunk)

    run_threads(work)
    assert len(t) == len(keys)
    stats = t.memory_stats()
    assert stats["slots"] == len(keys) and stats["free_slots"] == 0
    reference = xdl_ec.EmbeddingTable("r", 8, seed=3).pull(keys)
    np.testing.assert_array_equal(t.pull(keys), reference)


def test_concurrent_erase_and_pull_keep_index_and_slots_consistent() -> None:
    t = xdl_ec.EmbeddingTable("t", 4, optimizer=optim.SGD(0.5), initializer="zeros", block_slots=16)
    keys = np.arange(4000, dtype=np.int64)

    def work(i: int) -> None:
        rng = np.random.default_rng(i)
        for _ in range(30):
            batch = rng.choice(keys, 300, replace=False)
            if rng.random() < 0.5:
                t.erase(batch)
            else:
                t.pull(batch)

    run_threads(work)
    e = t.export()
    stats = t.memory_stats()
    assert len(e["keys"]) == len(t) == stats["live_rows"]
    assert stats["live_rows"] + stats["free_slots"] == stats["slots"]
    assert len(set(e["keys"].tolist())) == len(e["keys"])
    rows, found = t.find(keys)
    assert found.sum() == len(t)
    np.testing.assert_array_equal(rows, np.zeros_like(rows))
