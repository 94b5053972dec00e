"""Routing by virtual buckets with rendezvous-hashed owners (cpp/include/xdl_ec/route_table.h), as Python sees it:
the same table as KeyRouter::ServerOf for ids 0..n-1, N -> N+1 moving ~1/(N+1) of the keys, a drain moving only
the drained server's, and bad id sets refused."""

from __future__ import annotations

import numpy as np
import pytest

from xdl_ec import _core
from xdl_ec.sparse.hashing import fmix64

KEYS = np.random.default_rng(7).integers(-(2**62), 2**62, 300_000, dtype=np.int64)


def test_bucket_is_the_high_bits_of_the_salted_fmix64() -> None:
    salted = KEYS.view(np.uint64) ^ np.uint64(0x5851F42D4C957F2D)
    expected = (fmix64(salted) >> np.uint64(64 - 16)).astype(np.int32)
    np.testing.assert_array_equal(_core.bucket_of(KEYS), expected)
    assert _core.RouteTable.buckets == 1 << 16


@pytest.mark.parametrize("n", [1, 3, 8])
def test_server_of_is_the_dense_table(n: int) -> None:
    table = _core.RouteTable(list(range(n)))
    assert table.server_ids == list(range(n))
    np.testing.assert_array_equal(_core.server_of(KEYS, n), table.servers_of(KEYS))
    np.testing.assert_array_equal(table.servers_of(KEYS), table.owners[_core.bucket_of(KEYS)])


@pytest.mark.parametrize("n", [2, 4, 5, 7, 12])
def test_growing_by_one_moves_about_one_key_in_n_plus_one_all_to_the_new_server(n: int) -> None:
    before, after = _core.server_of(KEYS, n), _core.server_of(KEYS, n + 1)
    moved = before != after
    assert set(np.unique(after[moved])) == {n}  # nothing moves between old servers
    expected = KEYS.size / (n + 1)
    # the buckets' own spread (~1% at n = 12) plus the keys' (~0.5%): 5% of the expectation is > 4 sigma
    assert abs(int(moved.sum()) - expected) < 0.05 * expected


def test_a_drain_moves_only_the_drained_servers_keys_and_refilling_the_hole_restores_the_table() -> None:
    full = _core.RouteTable(list(range(6)))
    drained = _core.RouteTable([0, 1, 3, 4, 5])
    before, after = full.servers_of(KEYS), drained.servers_of(KEYS)
    moved = before != after
    np.testing.assert_array_equal(moved, before == 2)
    received = np.bincount(after[moved], minlength=6)
    assert received[2] == 0
    share = moved.sum() / 5
    assert np.all(np.abs(received[[0, 1, 3, 4, 5]] - share) < 0.1 * share)
    np.testing.assert_array_equal(_core.RouteTable([5, 4, 3, 2, 1, 0]).owners, full.owners)


def test_keys_spread_evenly() -> None:
    for n in (3, 8):
        counts = np.bincount(_core.server_of(KEYS, n), minlength=n)
        assert np.all(np.abs(counts - KEYS.size / n) < 0.06 * KEYS.size / n), counts


@pytest.mark.parametrize(
    "ids, message",
    [([], "no server ids"), ([0, 1, 1], "given twice"), ([-1], "outside"), ([65535], "outside")],
)
def test_bad_id_sets_are_refused(ids: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _core.RouteTable(ids)
    with pytest.raises(ValueError, match="n \\(servers\\)"):
        _core.server_of(KEYS[:3], 0)
