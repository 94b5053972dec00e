"""Cluster: its keywords are checked once, when it is made, and every error names the keyword and what it needs."""

from __future__ import annotations

from typing import Any, Dict

import pytest

from xdl_ec.ft.configs import CkptConfig, CprConfig, EcConfig
from xdl_ec.job.cluster import Cluster
from xdl_ec.sparse.cache_config import Cache
from xdl_ec.sparse.table_config import Table


@pytest.mark.parametrize(
    "keywords,error,message",
    [
        ({"servers": 0}, ValueError, "servers: must be an int >= 1, got 0"),
        ({"workers": "2"}, TypeError, "workers: must be an int, got str"),
        ({"backend": "mpi"}, ValueError, "backend: must be one of 'local', 'ray', got 'mpi'"),
        ({"mode": "bulk"}, ValueError, "mode: must be one of 'sync', 'async'"),
        ({"ft": "raid"}, ValueError, "ft: must be one of 'none', 'ckpt', 'cpr', 'ec'"),
        ({"code": (2, 1)}, ValueError, r"code: only used with ft='ec' \(this cluster has ft='none'\)"),
        ({"ft": "ckpt", "rebuild_share": 0.1}, ValueError, "rebuild_share: only used with ft='ec'"),
        ({"ft": "ec", "servers": 3, "ckpt_interval": "10"}, ValueError, "ckpt_interval: only used with ft='ckpt'"),
        ({"ckpt_dir": "/tmp/x"}, ValueError, "ckpt_dir: only used with ft='ckpt' or 'cpr'"),
        ({"ft": "ec", "servers": 3}, ValueError, r"the code k=4, r=1 needs at least k \+ r = 5 servers, got 3"),
        ({"ft": "ec", "servers": 8, "code": "4,5"}, ValueError, "code: need k >= 1, 1 <= r <= 4"),
        ({"ft": "ec", "servers": 8, "code": "four,one"}, ValueError, "code: must be 'k,r'"),
        ({"ft": "ec", "servers": 5, "resize_share": 1.0}, ValueError, r"resize_share: must be .* in \[0.0, 1.0\)"),
        ({"fail_at": ["soon"]}, ValueError, r"--fail-at: expected STEP\[:SERVER\] .* got 'soon'"),
        ({"resize_at": ["10"]}, ValueError, r"--resize-at: expected STEP:SERVERS.* got '10'"),
        ({"cache": 64}, TypeError, "cache: must be an xdl_ec.Cache or a dict of table name -> Cache, got int"),
    ],
)
def test_a_bad_keyword_is_an_error_naming_it(keywords: Dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        Cluster(**keywords)


def test_each_fault_tolerance_gets_its_strategy_config() -> None:
    assert Cluster().strategy_config(0) is None
    ec = Cluster(servers=3, ft="ec", code="2,1").strategy_config(0)
    assert isinstance(ec, EcConfig) and ec.code == (2, 1) and ec.rebuild_share == 0.05
    assert Cluster(servers=5, ft="ec").ec_code == (4, 1)  # the default code
    assert isinstance(Cluster(servers=2, ft="ckpt", ckpt_interval="10").strategy_config(0), CkptConfig)
    cpr = Cluster(servers=2, ft="cpr", cpr_pls=0.01, mtbf=60.0).strategy_config(3)
    assert isinstance(cpr, CprConfig) and cpr.pls == 0.01 and cpr.mode == "mfu"


def test_a_cluster_is_a_hashable_value() -> None:
    cache = Cache(rows=100)
    a = Cluster(servers=2, cache={"users": cache}, fail_at=["3:1"])
    b = Cluster(servers=2, cache={"users": cache}, fail_at=("3:1",))
    assert a == b and hash(a) == hash(b)
    assert a.caches([Table("users", 4)]) == {"users": cache}
    with pytest.raises(ValueError, match=r"cache: names tables \['users'\] that the job does not have"):
        a.caches([Table("items", 4)])
    assert Cluster(servers=2, workers=2, mode="async").cluster_config().workers == 2
