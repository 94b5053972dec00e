"""Placement: which Ray node each parameter server runs on, so that losing a whole node loses at most r members of
any stripe (a failure domain, as HDFS EC's rack-aware placement or Ceph's CRUSH rules): recovery then stays exact.

The stripes are those of the C++ StripeLayout: stripe ``s = q * n + m`` has the members ``(m + j) mod n`` for
``j < k + r``, so over n servers the stripes' server sets are the n cyclic windows of ``k + r`` consecutive servers
(one set when ``k + r == n``). The rule: every window holds at most r servers of any one node.

A node may then hold at most ``floor(n * r / (k + r))`` servers (each server is in ``k + r`` of the n windows, each
window takes at most r of the node's), which decides how many nodes n servers need. :func:`assign` meets that bound
whenever the nodes are enough, so its error is exact: it fails only where no assignment exists.

Workers run on the driver's node: its loss ends the run whatever runs there, and a worker lost with servers would
take with it the pushes it logged for them that their parity does not hold yet (recovery could not be exact). So
losing any other node loses servers only, at most r of a stripe. (The cost: the workers' compute stays on one node;
"none" lets Ray spread them.)

``failure_domain`` (``Cluster(failure_domain=...)``, ``--failure-domain``): "node" keeps the rule, "none" lets Ray
place the servers and workers; None (the default) is "node" when the run has stripes (``--ft ec``) on a Ray cluster
of several alive nodes. A replacement of a lost server goes to an alive node that keeps the rule; when none does (a
cluster of two nodes that lost one), to the one that breaks it least, with a warning, and the cluster map lists the
stripes that broke it.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

FAILURE_DOMAINS = ("node", "none")
MAX_R, MAX_K_PLUS_R = 4, 32  # the codes xdl_ec.ft.configs.parse_code accepts


class PlacementError(ValueError):
    """The alive nodes cannot hold the servers with at most r members of any stripe on one node."""


def stripe_sets(n: int, k: int, r: int) -> List[Tuple[int, ...]]:
    """The distinct server sets of the stripes of n servers under a (k, r) code (see the module docstring)."""
    if k < 1 or r < 1 or n < k + r:
        raise ValueError(f"stripe_sets: need k >= 1, r >= 1 and n >= k + r, got n={n}, k={k}, r={r}")
    width = k + r
    if width == n:
        return [tuple(range(n))]
    return [tuple((m + j) % n for j in range(width)) for m in range(n)]


def max_per_node(n: int, k: int, r: int) -> int:
    """The most servers one node may hold (see the module docstring)."""
    return n * r // (k + r)


def nodes_needed(n: int, k: int, r: int) -> int:
    """The fewest nodes that can hold n servers under a (k, r) code."""
    most = max_per_node(n, k, r)
    return -(-n // most)


def assign(n: int, k: int, r: int, nodes: Sequence[str]) -> List[str]:
    """The node of each of n servers (server index -> one of ``nodes``) with at most r members of any stripe on one
    node, every node holding at most ``ceil(n / len(nodes))`` servers; :class:`PlacementError` when the nodes are too
    few for any such assignment.

    The servers are cut into ``c = ceil(n / len(nodes))`` runs of consecutive indices of balanced lengths (each at
    most ``len(nodes)``) and the i-th server of every run goes to ``nodes[i]``. A node thus has one server per run,
    and r + 1 of its servers span r whole runs: at least ``floor(r * n / c) >= k + r`` indices, as c is at most
    ``max_per_node`` (checked first). A stripe's k + r consecutive servers therefore hold at most r of them."""
    nodes = list(nodes)
    if not nodes:
        raise PlacementError("failure domain 'node': no alive Ray node to place the servers on")
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"nodes: listed twice: {sorted({x for x in nodes if nodes.count(x) > 1})}")
    stripe_sets(n, k, r)  # checks n, k, r
    most = max_per_node(n, k, r)
    if most * len(nodes) < n:
        raise PlacementError(_too_few_nodes(n, k, r, nodes))
    runs = -(-n // len(nodes))
    placed: List[str] = []
    for run in range(runs):
        length = (run + 1) * n // runs - run * n // runs
        placed.extend(nodes[:length])
    return placed


def _too_few_nodes(n: int, k: int, r: int, nodes: Sequence[str]) -> str:
    most = max_per_node(n, k, r)
    fits = []
    for rr in range(1, MAX_R + 1):  # a node's bound falls as k grows: the largest k that fits, per r
        ks = [kk for kk in range(1, min(n, MAX_K_PLUS_R) - rr + 1) if max_per_node(n, kk, rr) * len(nodes) >= n]
        if ks:
            fits.append(f"k <= {max(ks)} with r = {rr}")
    remedy = (
        f"Add nodes, use a code that {len(nodes)} nodes can hold ({'; '.join(fits)})"
        if fits
        else "Add nodes (one node holds every stripe whole, whatever the code)"
    )
    return (
        f"failure domain 'node': {n} servers under the code k={k}, r={r} cannot be placed on the Ray cluster's "
        f"{len(nodes)} alive node(s) ({', '.join(short(x) for x in nodes)}) with at most r={r} members of any "
        f"stripe on one node: a node may hold at most floor(n*r/(k+r)) = {most} servers, so {n} servers need at "
        f"least {nodes_needed(n, k, r)} nodes. {remedy}, or place the servers anywhere with "
        f"failure_domain='none' (--failure-domain none)"
    )


def short(node: str) -> str:
    """A Ray node id as errors and warnings show it (its first 12 hex digits; ids are 56)."""
    return node if len(node) <= 16 else node[:12] + "…"


class Placement:
    """Where each server runs under a (k, r) code, kept current as lost servers are replaced."""

    def __init__(self, k: int, r: int, nodes: Sequence[str], worker_node: Optional[str] = None) -> None:
        """``nodes``: server index -> node (e.g. :func:`assign`'s); ``worker_node``: where every worker runs (the
        driver's node; None: wherever the backend puts them)."""
        self.k, self.r = int(k), int(r)
        self.nodes: List[str] = list(nodes)
        self.worker_node = worker_node
        self._stripes = stripe_sets(len(self.nodes), self.k, self.r)
        self.moves: List[Dict[str, Any]] = []  # replacements: server, from, to, whether the rule held

    @classmethod
    def plan(cls, n: int, k: int, r: int, alive: Sequence[str], worker_node: Optional[str] = None) -> "Placement":
        return cls(k, r, assign(n, k, r, alive), worker_node)

    def node_of(self, index: int) -> str:
        return self.nodes[index]

    def excess(self, index: int, node: str) -> int:
        """By how many members the most crowded stripe of server ``index`` would exceed r on ``node`` with the
        server there (0: the rule holds)."""
        worst = 0
        for members in self._stripes:
            if index in members:
                worst = max(worst, 1 + sum(1 for m in members if m != index and self.nodes[m] == node))
        return max(worst - self.r, 0)

    def candidates(self, index: int, alive: Sequence[str]) -> List[str]:
        """The alive nodes a replacement of server ``index`` may go to: those that keep the rule (when none does,
        those that break it least), the node it was lost on last, then the least loaded first."""
        if not alive:
            raise PlacementError(f"failure domain 'node': no alive Ray node to place a replacement of server {index}")
        former = self.nodes[index]
        load = {node: sum(1 for i, x in enumerate(self.nodes) if x == node and i != index) for node in alive}
        scored = sorted(alive, key=lambda node: (self.excess(index, node), node == former, load[node]))
        best = self.excess(index, scored[0])
        return [node for node in scored if self.excess(index, node) == best]

    def moved(self, index: int, node: str) -> None:
        """Server ``index`` runs on ``node`` now (a replacement); warns when that breaks the rule."""
        excess = self.excess(index, node)
        self.moves.append({"server": index, "from": self.nodes[index], "to": node, "keeps_rule": excess == 0})
        self.nodes[index] = node
        if excess:
            warnings.warn(
                f"failure domain 'node' degraded: no alive node can hold a replacement of server {index} "
                f"with at most r={self.r} members of each of its stripes on one node; it runs on "
                f"{short(node)}, where a stripe now has {self.r + excess} members (losing that node would "
                f"lose more than r). Add a node to restore the rule",
                RuntimeWarning,
                stacklevel=2,
            )

    def spare_node(self, alive: Sequence[str], spares: Sequence[Optional[str]]) -> str:
        """Where an idle spare server goes: the alive node holding the fewest servers and spares."""
        if not alive:
            raise PlacementError("failure domain 'node': no alive Ray node to place a spare server on")
        load = {node: self.nodes.count(node) + list(spares).count(node) for node in alive}
        return min(alive, key=lambda node: load[node])

    def violations(self) -> List[Dict[str, Any]]:
        """The stripes' server sets that hold more than r servers of one node now."""
        found: List[Dict[str, Any]] = []
        for members in self._stripes:
            on: Dict[str, List[int]] = {}
            for m in members:
                on.setdefault(self.nodes[m], []).append(m)
            found.extend(
                {"stripe_servers": list(members), "node": node, "servers": servers}
                for node, servers in on.items()
                if len(servers) > self.r
            )
        return found

    def describe(self) -> Dict[str, Any]:
        """For the cluster map: the rule, the replacements made and the stripes that break the rule now."""
        return {
            "failure_domain": "node",
            "code": [self.k, self.r],
            "worker_node": self.worker_node,
            "moves": list(self.moves),
            "violations": self.violations(),
        }


def check_failure_domain(failure_domain: Optional[str], backend: str) -> None:
    """ValueError unless ``failure_domain`` is one of FAILURE_DOMAINS or None, and "node" comes with Ray."""
    if failure_domain is not None and failure_domain not in FAILURE_DOMAINS:
        raise ValueError(f"failure_domain: must be one of {FAILURE_DOMAINS} or None, got {failure_domain!r}")
    if failure_domain == "node" and backend != "ray":
        raise ValueError(
            "failure_domain: 'node' places servers on Ray nodes; it needs backend='ray' (the local "
            "backend runs every role in this process)"
        )


def plan_placement(
    backend: Any, failure_domain: Optional[str], servers: int, stripe_code: Optional[Tuple[int, int]]
) -> Optional[Placement]:
    """The placement of ``servers`` servers on ``backend``'s alive nodes (``backend.nodes()``), or None where Ray
    places them. ``stripe_code``: the strategy's (k, r), None when it keeps no stripes. Raises before any server
    starts: :class:`PlacementError` when the nodes are too few, ValueError when "node" cannot apply."""
    check_failure_domain(failure_domain, backend.name)
    if failure_domain == "none" or backend.name != "ray":
        return None
    if stripe_code is None:
        if failure_domain == "node":
            raise ValueError(
                "failure_domain: 'node' keeps at most r members of every erasure-coded stripe on one "
                "node; it needs ft='ec' (this run's servers form no stripes)"
            )
        return None
    alive = backend.nodes()
    if failure_domain is None and len(alive) < 2:
        return None  # one node: nothing to spread over
    k, r = stripe_code
    driver = backend.driver_node()
    return Placement.plan(servers, k, r, alive, driver if driver in alive else None)
