"""Parity groups over embedding shards (issue 3): exact rebuild, degraded reads, scrub, balance, overhead."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import numpy as np
import pytest

from xdl_ec import optim
from xdl_ec.parity import ParityGroup, ScrubMismatch, server_of
from support.paths import SHARED_DATA  # noqa: E402

DATA = SHARED_DATA
OPTIMIZERS = ["sgd", "momentum", "adagrad", "adam", "ftrl"]


class Twins:
    """A group and its reference twin fed the same operations; the twin never loses anything."""

    def __init__(self, n: int, k: int, r: int, optimizer: str, seed: int = 0, dim: int = 4, block_slots: int = 16):
        kwargs = dict(dim=dim, optimizer=optimizer, seed=3, block_slots=block_slots)
        self.a = ParityGroup(n, k, r, **kwargs)
        self.b = ParityGroup(n, k, r, **kwargs)
        self.rng = np.random.default_rng(seed)
        self.dim = dim
        self.step = 0

    def keys_for(self, server: int, count: int, key_space: int) -> np.ndarray:
        keys = self.rng.integers(0, key_space, size=count * self.a.n * 2, dtype=np.int64)
        mine = keys[server_of(keys, self.a.n) == server][:count]
        assert len(mine) > 0
        return mine

    def train(self, server: int, keys: np.ndarray) -> None:
        rows_a, rows_b = self.a.pull(server, keys), self.b.pull(server, keys)
        np.testing.assert_array_equal(rows_a.view(np.uint32), rows_b.view(np.uint32))
        grads = self.rng.standard_normal((len(keys), self.dim)).astype(np.float32)
        self.step += 1
        self.a.push(server, keys, grads, self.step)
        self.b.push(server, keys, grads, self.step)

    def train_all(self, rounds: int, batch: int, key_space: int) -> None:
        for _ in range(rounds):
            for s in range(self.a.n):
                self.train(s, self.keys_for(s, batch, key_space))

    def assert_identical(self, when: str) -> None:
        """Every byte of every data and parity block of every server equals the twin's."""
        for s in range(self.a.n):
            for b in range(max(self.a.num_data_blocks(s), self.b.num_data_blocks(s))):
                np.testing.assert_array_equal(self.a.read_data_block(s, b), self.b.read_data_block(s, b),
                                              err_msg=f"{when}: data block {b} of server {s}")
            for c in range(max(self.a.num_parity_blocks(s), self.b.num_parity_blocks(s))):
                np.testing.assert_array_equal(self.a.read_parity_block(s, c), self.b.read_parity_block(s, c),
                                              err_msg=f"{when}: parity block {c} of server {s}")
            assert len(self.a.shard(s)) == len(self.b.shard(s))


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_every_loss_pattern_rebuilds_bit_exact(optimizer: str) -> None:
    n, k, r = 5, 3, 2
    t = Twins(n, k, r, optimizer, seed=1)
    t.train_all(5, 40, 4000)
    patterns = [list(c) for size in (1, 2) for c in itertools.combinations(range(n), size)]
    assert len(patterns) == 15
    for lost in patterns:
        t.a.kill(lost)
        assert t.a.unavailable_servers() == lost
        assert all(t.a.shard(s) is None for s in lost)
        t.a.rebuild()
        assert t.a.unavailable_servers() == []
        t.assert_identical(f"{optimizer}, lost {lost}")
        t.train_all(1, 15, 4000)
    assert t.a.scrub() == []


@pytest.mark.parametrize("optimizer", ["adam", "ftrl"])
def test_pushes_continue_during_step_by_step_rebuild(optimizer: str) -> None:
    t = Twins(6, 4, 2, optimizer, seed=2)
    t.a.background_apply = optimizer == "adam"  # both modes keep the rebuild exact
    t.train_all(6, 50, 20000)
    t.a.kill([0, 5])
    t.a.begin_rebuild()
    assert t.a.state(0) == "restoring" and t.a.state(5) == "restoring" and t.a.state(1) == "healthy"
    remaining = t.a.rebuild_remaining
    assert remaining > 5
    steps = 0
    while t.a.rebuild_step(2) > 0:
        steps += 1
        for s in range(6):
            # Existing keys (faults decoded on demand) and brand-new keys (inserts on a restoring server).
            t.train(s, t.keys_for(s, 20, 20000))
            t.train(s, t.keys_for(s, 10, 10**9))
    assert steps >= remaining // 2 - 1
    assert t.a.unavailable_servers() == []
    t.assert_identical(f"{optimizer} after a rebuild under traffic")
    assert t.a.scrub() == []


def test_operations_on_a_lost_server_start_its_rebuild_and_read_degraded() -> None:
    t = Twins(5, 3, 1, "adagrad", seed=3)
    t.train_all(5, 40, 5000)
    keys = t.b.shard(2).export()[0][:50]
    t.a.kill(2)
    assert t.a.state(2) == "lost"
    # The first pull decodes the key index and the touched blocks; values equal the twin's.
    np.testing.assert_array_equal(t.a.pull(2, keys), t.b.pull(2, keys))
    assert t.a.state(2) == "restoring"
    t.a.finish_rebuild()
    t.assert_identical("after degraded pulls")


def test_scrub_catches_a_single_flipped_bit_in_data_and_parity() -> None:
    g = ParityGroup(5, 3, 2, dim=4, optimizer="adam", block_slots=16)
    keys = np.arange(800, dtype=np.int64)
    for s in range(5):
        g.pull(s, keys)
        g.push(s, keys, np.full((800, 4), 0.25, np.float32), 1)
    assert g.scrub() == []

    shard = g.shard(4)
    exported_keys, values, state = shard.export()
    row = 321
    flipped = values[row:row + 1].copy()
    flipped.view(np.uint32)[0, 1] ^= np.uint32(1 << 17)
    shard.load(exported_keys[row:row + 1], flipped, state[row:row + 1])  # behind the parity's back
    bad = g.scrub()
    stripe, _ = g.layout.data_slot(4, row // 16)  # nothing erased: row i lives in slot i
    assert sorted(m.parity_member for m in bad) == [0, 1]
    assert all(isinstance(m, ScrubMismatch) and m.stripe == stripe for m in bad)
    shard.load(exported_keys[row:row + 1], values[row:row + 1], state[row:row + 1])
    assert g.scrub() == []

    store = g.parity_store(2)
    block = store.read_block(1)
    block[100] ^= 0x01
    store.write_block(1, block)
    assert g.scrub() == [ScrubMismatch(g.layout.parity_slot(2, 1)[0], g.layout.parity_slot(2, 1)[1], 2, 1)]


@pytest.mark.parametrize("r", [1, 2])
def test_delta_traffic_is_balanced_across_servers(r: int) -> None:
    n, k = 6, 4
    g = ParityGroup(n, k, r, dim=8, block_slots=64)
    rng = np.random.default_rng(7)
    for step in range(1, 11):
        keys = rng.integers(0, 50000, size=3000, dtype=np.int64)
        owner = server_of(keys, n)
        for s in range(n):
            mine = keys[owner == s]
            g.push(s, mine, np.full((len(mine), 8), 0.1, np.float32), step)
    received = np.array(g.stats()["delta_bytes_received"], dtype=np.float64)
    assert received.min() > 0
    assert received.max() / received.min() <= 1.2, received


@pytest.mark.parametrize("n,k,r", [(5, 4, 1), (6, 4, 2), (7, 3, 3)])
def test_parity_memory_is_close_to_r_over_k(n: int, k: int, r: int) -> None:
    g = ParityGroup(n, k, r, dim=8, block_slots=128)
    keys = np.arange(n * 128 * 22, dtype=np.int64)
    owner = g.server_of(keys)
    for s in range(n):
        g.pull(s, keys[owner == s])
    stats = g.stats()
    assert stats["parity_overhead"] == pytest.approx(r / k, rel=0.12)
    assert stats["total_parity_bytes"] == sum(stats["parity_bytes"])


def test_bad_geometry_and_too_many_losses_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="k"):
        ParityGroup(5, 0, 1, dim=4)
    with pytest.raises(ValueError, match="n \\(servers\\) must be >= k \\+ r"):
        ParityGroup(4, 3, 2, dim=4)
    with pytest.raises(ValueError, match="r=5"):
        ParityGroup(9, 3, 5, dim=4)
    with pytest.raises(TypeError, match="k must be an int"):
        ParityGroup(5, 3.0, 1, dim=4)
    t = Twins(5, 3, 2, "sgd", seed=4)
    t.train_all(2, 30, 3000)
    with pytest.raises(ValueError, match=r"unrecoverable: lost servers \{0, 1, 3\}, the code tolerates r=2"):
        t.a.kill([0, 1, 3])
    assert t.a.unavailable_servers() == []
    t.a.kill([4])
    with pytest.raises(ValueError, match="unrecoverable"):
        t.a.kill([0, 1])
    assert t.a.unavailable_servers() == [4]
    with pytest.raises(ValueError, match="server must be in"):
        t.a.kill([5])
    with pytest.raises(ValueError, match="finish the rebuild first"):
        t.a.scrub()
    with pytest.raises(TypeError, match="grads must be floating point"):
        t.a.push(0, [1, 2], [[1, 2, 3, 4], [1, 2, 3, 4]], 1)
    with pytest.raises(ValueError, match="grads must have shape"):
        t.a.push(0, [1, 2], np.zeros((3, 4), np.float32), 1)
    with pytest.raises(ValueError):
        t.a.push(0, [1], np.full((1, 4), np.nan, np.float32), 1)
    t.a.rebuild()
    t.assert_identical("after refused operations")


def _criteo_keys(limit: int) -> np.ndarray:
    path = DATA / "criteo_kaggle_train_head10k.tsv.gz"
    if not path.exists():
        pytest.skip(f"real Criteo sample not found at {path} (see /work/shared/data/README.md)")
    keys = []
    with gzip.open(path, "rt") as f:
        for line, _ in zip(f, range(limit)):
            fields = line.rstrip("\n").split("\t")
            for column, value in enumerate(fields[14:40]):
                if value:
                    keys.append((column << 32) | int(value, 16))
    return np.array(keys, dtype=np.int64)


def test_real_criteo_features_survive_two_losses() -> None:
    keys = _criteo_keys(2000)
    t = Twins(6, 4, 2, "adagrad", seed=5, dim=8, block_slots=64)
    owner = server_of(keys, 6)
    batches = np.array_split(np.arange(len(keys)), 20)
    for i, batch in enumerate(batches):
        for s in range(6):
            mine = keys[batch][owner[batch] == s]
            if len(mine):
                t.train(s, mine)
        if i == 10:
            t.a.kill([1, 3])  # halfway: the rest of the epoch runs against restoring servers
            t.a.begin_rebuild()
        if i > 10:
            t.a.rebuild_step(4)
    t.a.finish_rebuild()
    t.assert_identical("Criteo epoch with two losses")
    assert t.a.scrub() == []


def test_background_and_synchronous_apply_agree() -> None:
    t = Twins(5, 3, 1, "momentum", seed=6)
    assert t.b.background_apply is False
    t.a.background_apply = True
    assert t.a.background_apply is True
    with pytest.raises(TypeError, match="background_apply must be a bool"):
        t.a.background_apply = 1
    t.train_all(4, 40, 6000)
    t.assert_identical("background vs synchronous apply")
    t.a.kill(1)
    t.b.kill(1)
    t.a.rebuild()
    t.b.rebuild()
    t.assert_identical("both rebuilt")
