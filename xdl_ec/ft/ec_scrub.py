"""The ``--ft ec`` scrub (``xdl-ec verify``, ``ErasureCoded.verify``): every stripe of every table re-encoded from
its data blocks and compared with the stored parity blocks by the C++ Scrubber, reading the servers' blocks through
the fragment readers. The caller has completed any rebuild and drained the parity pipelines first."""

from __future__ import annotations

import dataclasses
from typing import List

from xdl_ec import _core
from xdl_ec.ft.consistent_decode import fragment_readers
from xdl_ec.ft.ec_recovery import CALL_TIMEOUT, EcRecovery


@dataclasses.dataclass(frozen=True)
class StripeMismatch:
    """A stored parity block that disagrees with the parity re-encoded from its stripe's data."""

    table: str
    stripe: int
    parity_member: int
    server: int
    block: int


def scrub(coordinator: EcRecovery) -> List[StripeMismatch]:
    """The stored parity blocks that disagree with their stripes' data (empty: all consistent), over the servers
    of ``coordinator`` (a :class:`~xdl_ec.ft.ec_recovery.EcRecovery`)."""
    strategy = coordinator.strategy
    servers = coordinator.view.server_handles()
    everyone = list(range(coordinator.n))
    bad: List[StripeMismatch] = []
    for table in coordinator.tables():
        stripes = coordinator.stripes(table, everyone)
        data, parity = fragment_readers(servers, table, CALL_TIMEOUT)
        scrubber = _core.Scrubber(strategy.n, strategy.k, strategy.r, *coordinator.geometry(table))
        for stripe, i, srv, c in scrubber.scrub(stripes, data, parity):
            bad.append(StripeMismatch(table, stripe, i, srv, c))
    return bad
