"""ClusterConfig: where a parameter-server run of a job runs, checked when it is made (``Cluster(...)`` of the job
API builds one; ``xdl-ec train --servers``)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from xdl_ec.ps.backend import DEFAULT_TIMEOUT
from xdl_ec.ps.placement import check_failure_domain
from xdl_ec.settings import checks
from xdl_ec.sparse.memory_budget import MemoryBudget

MODES = ("sync", "async")
BACKENDS = ("local", "ray")


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """Where a job runs: servers, workers, backend (+ Ray address), mode, call timeout, failure domain ("node",
    "none", None: "node" for erasure-coded servers on a Ray cluster of several nodes; see
    :mod:`xdl_ec.ps.placement`), each server's memory budget (None: all rows in RAM). Checked on creation."""

    servers: int = 1
    workers: int = 1
    backend: str = "local"
    address: Optional[str] = None
    mode: str = "sync"
    call_timeout: float = DEFAULT_TIMEOUT
    failure_domain: Optional[str] = None
    memory: Optional[MemoryBudget] = None  # every server's RAM budget, the rest of its rows on disk
    detached: bool = False  # roles outlive the driver (a reattachable run on Ray, docs/design/reattach.md)

    def __post_init__(self) -> None:
        checks.positive_int("servers", self.servers)
        checks.positive_int("workers", self.workers)
        checks.one_of("backend", self.backend, BACKENDS)
        if self.address is not None and self.backend != "ray":
            raise ValueError("address: a Ray address needs backend='ray'")
        if self.detached and self.backend != "ray":
            raise ValueError("detached: roles outlive the driver only on Ray (backend='ray')")
        checks.one_of("mode", self.mode, MODES)
        checks.positive_number("call_timeout", self.call_timeout)
        check_failure_domain(self.failure_domain, self.backend)
