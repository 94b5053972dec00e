"""The failure-domain placement (xdl_ec.ps.placement): stripes' server sets as the C++ layout forms them, at most r
members of any stripe on one node wherever that is possible and a clear error exactly where it is not, replacements
on nodes that keep the rule, and the scheduler starting every server where the placement says."""

from __future__ import annotations

import itertools
from typing import Any, List, Sequence

import pytest

import xdl_ec
from xdl_ec import _core
from xdl_ec.ps import LocalBackend, Scheduler
from xdl_ec.ps.placement import (
    Placement,
    PlacementError,
    assign,
    max_per_node,
    nodes_needed,
    plan_placement,
    stripe_sets,
)
from xdl_ec.sparse import optim


def most_on_one_node(nodes: Sequence[str], n: int, k: int, r: int) -> int:
    return max(
        max(sum(1 for m in members if nodes[m] == node) for node in set(nodes)) for members in stripe_sets(n, k, r)
    )


def test_the_stripes_server_sets_are_those_of_the_cpp_layout() -> None:
    for n, k, r in [(3, 2, 1), (5, 3, 2), (6, 4, 2), (7, 2, 1), (9, 4, 1), (8, 5, 3)]:
        layout = _core.StripeLayout(n, k, r)
        cpp = {frozenset(layout.server_at(s, t) for t in range(k + r)) for s in range(3 * n)}
        assert cpp == {frozenset(members) for members in stripe_sets(n, k, r)}, (n, k, r)


def test_every_assignment_keeps_at_most_r_of_a_stripe_on_a_node_and_balances_the_nodes() -> None:
    for k, r in itertools.product(range(1, 7), range(1, 5)):
        for n in range(k + r, 25):
            for count in range(1, 9):
                nodes = [f"node{i}" for i in range(count)]
                if max_per_node(n, k, r) * count < n:
                    with pytest.raises(PlacementError):
                        assign(n, k, r, nodes)
                    continue
                placed = assign(n, k, r, nodes)
                assert len(placed) == n and set(placed) <= set(nodes)
                assert most_on_one_node(placed, n, k, r) <= r, (n, k, r, count, placed)
                assert max(placed.count(x) for x in nodes) == -(-n // count), (n, k, r, count)


def test_the_error_comes_exactly_where_no_assignment_exists() -> None:
    """Every assignment of n <= 7 servers to up to 3 nodes, tried: one keeping the rule exists iff assign finds one."""
    for k, r in itertools.product(range(1, 5), range(1, 4)):
        for n in range(k + r, 8):
            for count in range(1, 4):
                exists = any(
                    most_on_one_node(nodes, n, k, r) <= r
                    for nodes in itertools.product([str(i) for i in range(count)], repeat=n)
                )
                try:
                    assign(n, k, r, [str(i) for i in range(count)])
                    found = True
                except PlacementError:
                    found = False
                assert found == exists, (n, k, r, count)


def test_too_few_nodes_is_an_error_naming_the_nodes_the_layout_and_what_would_work() -> None:
    nodes = ["a" * 56, "b" * 56]
    with pytest.raises(PlacementError) as caught:
        assign(6, 4, 2, nodes)
    message = str(caught.value)
    for part in [
        "6 servers under the code k=4, r=2",
        "2 alive node(s) (aaaaaaaaaaaa…, bbbbbbbbbbbb…)",
        "at most floor(n*r/(k+r)) = 2 servers",
        "need at least 3 nodes",
        "k <= 2 with r = 2",
        "--failure-domain none",
    ]:
        assert part in message, message
    assert nodes_needed(6, 4, 2) == 3
    with pytest.raises(PlacementError, match="one node holds every stripe whole"):
        assign(5, 4, 1, ["a"])
    with pytest.raises(PlacementError, match="no alive Ray node"):
        assign(5, 4, 1, [])


def test_a_replacement_goes_to_a_node_that_keeps_the_rule_preferably_not_where_it_was_lost() -> None:
    placement = Placement.plan(6, 2, 1, ["a", "b", "c", "d"])
    assert placement.nodes == ["a", "b", "c", "a", "b", "c"]
    # a crashed process: its node still keeps the rule, another empty one too: the other first
    assert placement.candidates(1, ["a", "b", "c", "d"]) == ["d", "b"]
    # node b died with servers 1 and 4: both go to d, the only alive node keeping every stripe at r = 1
    for index in (1, 4):
        assert placement.candidates(index, ["a", "c", "d"]) == ["d"]
        placement.moved(index, "d")
    assert placement.nodes == ["a", "d", "c", "a", "d", "c"] and placement.violations() == []
    assert [m["keeps_rule"] for m in placement.describe()["moves"]] == [True, True]


def test_when_no_alive_node_keeps_the_rule_the_replacement_breaks_it_least_with_a_warning() -> None:
    placement = Placement.plan(4, 2, 2, ["a", "b"])
    assert placement.nodes == ["a", "b", "a", "b"]
    assert placement.candidates(1, ["a"]) == ["a"]
    with pytest.warns(RuntimeWarning, match="failure domain 'node' degraded: .* server 1 .* a stripe now has 3"):
        placement.moved(1, "a")
    assert placement.violations() == [{"stripe_servers": [0, 1, 2, 3], "node": "a", "servers": [0, 1, 2]}]
    assert placement.describe()["moves"] == [{"server": 1, "from": "b", "to": "a", "keeps_rule": False}]
    with pytest.raises(PlacementError, match="no alive Ray node to place a replacement of server 3"):
        placement.candidates(3, [])


class FakeRay:
    name = "ray"

    def __init__(self, alive: List[str], driver: str = "a") -> None:
        self.alive, self.driver = alive, driver

    def nodes(self) -> List[str]:
        return list(self.alive)

    def driver_node(self) -> str:
        return self.driver


def test_the_default_failure_domain_is_node_for_stripes_on_several_nodes() -> None:
    assert plan_placement(FakeRay(["a"]), None, 4, (2, 2)) is None  # one node: nothing to spread over
    assert plan_placement(FakeRay(["a", "b"]), None, 4, None) is None  # no stripes
    assert plan_placement(FakeRay(["a", "b"]), "none", 4, (2, 2)) is None
    placement = plan_placement(FakeRay(["a", "b"], driver="b"), None, 4, (2, 2))
    assert placement.nodes == ["a", "b", "a", "b"] and placement.worker_node == "b"  # workers beside the driver
    assert plan_placement(FakeRay(["a", "b"], driver="gone"), None, 4, (2, 2)).worker_node is None
    with pytest.raises(PlacementError, match="need at least 4 nodes"):  # asked for: one node is an error
        plan_placement(FakeRay(["a"]), "node", 4, (3, 1))
    with pytest.raises(ValueError, match="it needs ft='ec'"):
        plan_placement(FakeRay(["a", "b"]), "node", 4, None)
    with pytest.raises(ValueError, match="it needs backend='ray'"):
        plan_placement(LocalBackend(), "node", 4, (2, 2))
    assert plan_placement(LocalBackend(), None, 4, (2, 2)) is None
    with pytest.raises(ValueError, match="it needs backend='ray'"):
        xdl_ec.Cluster(servers=4, ft="ec", code=(2, 2), failure_domain="node")
    with pytest.raises(ValueError, match="failure_domain: only used with ft='ec'"):
        xdl_ec.Cluster(servers=4, backend="ray", failure_domain="node")


class Idle:
    def __init__(self, index: int) -> None:
        self.index = index


class NodesBackend(LocalBackend):
    """In-process roles that pretend to run on named nodes: records where each was started."""

    def __init__(self, alive: List[str]) -> None:
        super().__init__()
        self.alive_nodes = alive
        self.started: List[Any] = []

    def nodes(self) -> List[str]:
        return list(self.alive_nodes)

    def driver_node(self) -> str:
        return "a"

    def start(self, role: str, index: int, cls: Any, *args: Any, node: Any = None) -> Any:
        handle = super().start(role, index, cls, *args)
        handle.node = node
        self.started.append((role, index, node))
        return handle


def test_the_scheduler_starts_servers_spares_and_replacements_where_the_placement_says() -> None:
    table = xdl_ec.Table("t", 4, optim.Adagrad(learning_rate=0.1))
    backend = NodesBackend(["a", "b", "c", "d"])
    try:
        placement = Placement.plan(6, 2, 1, ["a", "b", "c", "d"], worker_node="a")
        scheduler = Scheduler(backend, 6, (table,), spares=1, placement=placement)
        assert [s["node"] for s in scheduler.cluster_map()["servers"]] == ["a", "b", "c", "a", "b", "c"]
        assert backend.started[-1] == ("server", 6, "d")  # the spare: on the least loaded node
        scheduler.start_workers(2, Idle, lambda i: (i,))
        assert [w["node"] for w in scheduler.cluster_map()["workers"]] == ["a", "a"]
        # node b dies with servers 1 and 4, unnoticed until a probe (as when a worker restarts)
        backend.alive_nodes = ["a", "c", "d"]
        for index in (1, 4):
            scheduler.kill("server", index)
        assert sorted(e.index for e in scheduler.probe_servers()) == [1, 4]
        assert scheduler.probe_servers() == [] and sorted(i for _, i in scheduler.dead) == [1, 4]
        # the spare on d replaces server 1, a new server on d server 4
        spare = scheduler._spares[0]
        assert scheduler.replace_server(1) is spare
        scheduler.replace_server(4)
        assert backend.started[-1] == ("server", 4, "d")
        described = scheduler.cluster_map()
        assert [s["node"] for s in described["servers"]] == ["a", "d", "c", "a", "d", "c"]
        assert described["placement"]["violations"] == [] and len(described["placement"]["moves"]) == 2
        with pytest.raises(ValueError, match="placement: places 6 servers, the cluster has 5"):
            Scheduler(backend, 5, (table,), placement=Placement.plan(6, 2, 1, ["a", "b", "c"]))
    finally:
        backend.shutdown()


def test_the_flag_maps_to_the_cluster_and_its_errors_name_the_flag(capsys: pytest.CaptureFixture) -> None:
    from xdl_ec.cli import main

    for flags, message in [
        (["--failure-domain", "node"], "--failure-domain: needs --servers N"),
        (
            ["--servers", "4", "--ft", "ec", "--code", "2,2", "--failure-domain", "node"],
            "--failure-domain: 'node' places servers on Ray nodes; it needs --backend ray",
        ),
        (
            ["--servers", "4", "--backend", "ray", "--failure-domain", "none"],
            "--failure-domain: only used with --ft ec",
        ),
    ]:
        assert main(["train", "--synthetic", "--no-progress", *flags]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
