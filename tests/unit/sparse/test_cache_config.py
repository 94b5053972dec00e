"""xdl_ec.Cache: a worker cache's settings are checked when made, with errors naming what is wrong."""

from __future__ import annotations

import pytest

import xdl_ec
from xdl_ec.cli import main
from xdl_ec.sparse.cache_config import Cache, caches_for


def test_capacity_in_rows_or_as_a_share_of_the_table() -> None:
    assert Cache(rows=500).capacity(10**6) == 500
    assert Cache(rows="10%").capacity(12_345) == 1234
    assert Cache(rows="0.5%").capacity(0) == 1  # a fresh table: at least one row
    assert Cache(rows="10%").share == 10.0 and Cache(rows=3).share is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rows": 0}, "cache rows: must be an int >= 1"),
        ({"rows": -5}, "cache rows: must be an int >= 1"),
        ({"rows": "0%"}, r"share of the table in \(0%, 100%\]"),
        ({"rows": "150%"}, r"share of the table in \(0%, 100%\]"),
        ({"rows": "lots"}, "neither a row count nor a share"),
        ({"rows": 10, "staleness": -1}, "staleness: must be an int >= 0"),
        ({"rows": 10, "policy": "fifo"}, "cache policy: must be one of"),
    ],
)
def test_bad_settings_are_clear_errors(kwargs: dict, match: str) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        Cache(**kwargs)


def test_a_cache_larger_than_memory_is_refused() -> None:
    with pytest.raises(ValueError, match=r"cache of table 'users': .* more than this machine's"):
        Cache(rows=10**12).check_memory("users", 64)


def test_per_table_caches() -> None:
    users, items = xdl_ec.Table("users", 8), xdl_ec.Table("items", 8)
    every = caches_for(Cache(rows=10), [users, items])
    assert set(every) == {"users", "items"}
    assert set(caches_for({"users": Cache(rows=10)}, [users, items])) == {"users"}
    with pytest.raises(ValueError, match=r"names tables \['ads'\] that the job does not have"):
        caches_for({"ads": Cache(rows=10)}, [users, items])
    cluster = xdl_ec.Cluster(servers=2, cache={"users": Cache(rows=10, staleness=2)})
    assert hash(cluster) and cluster.caches([users, items]) == {"users": Cache(rows=10, staleness=2)}


def test_cli_cache_flags(capsys: pytest.CaptureFixture) -> None:
    for staleness in ("3", "0"):  # a given 0 is a value, refused like any other without --servers
        assert main(["train", "--synthetic", "--steps", "2", "--staleness", staleness]) == 2
        assert "--staleness: needs --servers" in capsys.readouterr().err
    assert main(["train", "--synthetic", "--steps", "2", "--resize-share", "0"]) == 2
    assert "--resize-share: needs --servers" in capsys.readouterr().err
    assert main(["train", "--synthetic", "--steps", "2", "--servers", "2", "--staleness", "3"]) == 2
    assert "--staleness: set the worker cache, which needs --cache-rows" in capsys.readouterr().err
    assert main(["train", "--synthetic", "--steps", "2", "--servers", "2", "--cache-rows", "0"]) == 2
    assert "--cache-rows: must be an int >= 1" in capsys.readouterr().err
