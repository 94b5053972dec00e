"""The scheduler's part of a resize (xdl_ec.ps.resize): servers added after the last, the count set with the
emptied ones stopped, and a cluster of fresh servers swapped in on the nodes a failure domain's placement for the
new count names, the old ones left running for the caller to stop."""

from __future__ import annotations

from typing import Any, List

import pytest

import xdl_ec
from xdl_ec import optim
from xdl_ec.ps import LocalBackend, Scheduler
from xdl_ec.ps.placement import Placement

TABLE = xdl_ec.Table("t", 4, optim.Adagrad(learning_rate=0.1))


class NodesBackend(LocalBackend):
    """In-process roles that say which named node they were started on."""

    def __init__(self, alive: List[str]) -> None:
        super().__init__()
        self.alive_nodes = alive

    def nodes(self) -> List[str]:
        return list(self.alive_nodes)

    def start(self, role: str, index: int, cls: Any, *args: Any, node: Any = None) -> Any:
        handle = super().start(role, index, cls, *args)
        handle.node = node
        return handle


def test_servers_added_join_with_the_count_and_a_shrink_stops_the_last() -> None:
    backend = LocalBackend()
    try:
        scheduler = Scheduler(backend, 2, (TABLE,))
        version = scheduler.version
        started = scheduler.add_servers(2)
        assert [h.index for h in started] == [2, 3] and len(scheduler.servers) == 2  # not in the map yet
        scheduler.set_server_count(started, 4)
        assert [h.index for h in scheduler.servers] == [0, 1, 2, 3] and scheduler.version == version + 1
        stopped = scheduler.set_server_count([], 3)
        assert [h.index for h in stopped] == [3] and not backend.alive(stopped[0])
        assert [s["index"] for s in scheduler.cluster_map()["servers"]] == [0, 1, 2]
        with pytest.raises(ValueError, match="count"):
            scheduler.add_servers(0)
        with pytest.raises(ValueError, match="5 servers asked, 3 exist"):
            scheduler.set_server_count([], 5)
    finally:
        backend.shutdown()


def test_fresh_servers_go_where_the_new_counts_placement_says_and_the_old_ones_keep_running() -> None:
    nodes = ["a", "b", "c", "d"]
    backend = NodesBackend(nodes)
    try:
        scheduler = Scheduler(backend, 4, (TABLE,), placement=Placement.plan(4, 2, 1, nodes))
        placement = Placement.plan(6, 2, 1, nodes)
        fresh = scheduler.start_servers(range(6), placement)
        assert [h.node for h in fresh] == [placement.node_of(i) for i in range(6)]
        old = scheduler.replace_servers(fresh, placement)
        assert len(old) == 4 and all(backend.alive(h) for h in old)  # stopped by the caller, once durable
        described = scheduler.cluster_map()
        assert [s["node"] for s in described["servers"]] == [placement.node_of(i) for i in range(6)]
        assert described["placement"]["violations"] == []
    finally:
        backend.shutdown()
