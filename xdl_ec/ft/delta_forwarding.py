"""DeltaForwarding: a data server's side of ``--ft ec``: its C++ DeltaForwarder and how far parity has caught up.

The server's shards record every mutation's slot deltas on the forwarder without leaving C++ (``shard.push(...,
forwarder=...)``); it routes them into one batch per parity holder and delivers them in the background, through
:class:`~xdl_ec.ft.holder_links.HolderLinks`. A push is safe once every holder applied its deltas
(:meth:`DeltaForwarding.durable`); a recovery waits for that with :meth:`DeltaForwarding.drain`.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Mapping, Sequence, Tuple, TypedDict, cast

from xdl_ec import _core
from xdl_ec.ft.holder_links import HolderLinks
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.handle import Handle

# drain re-checks the forwarder this often when nothing signals it (in-process holders are served by the C++
# thread, which does not); the remote links wake it at once after each delivery
DRAIN_POLL_SECONDS = 0.001


class ForwardingProgress(TypedDict):
    """How far a data server's parity has caught up (the C++ ``DeltaForwarder.progress()`` plus its errors)."""

    seq: int  # the last delta seq recorded
    live_applied: int  # the least seq every live holder applied
    pending: bool  # something queued or in flight for a live holder
    worker_seqs: Dict[int, int]  # {worker: push seq} the state at ``seq`` includes
    down: List[int]  # holders counted as down (until replaced)
    coalesced: int  # mutations merged into an earlier one of their seq range
    errors: List[str]  # delivery errors, oldest first


def holders_of(index: int, n: int, k: int, r: int) -> List[int]:
    """The servers holding parity of some stripe ``index`` has data in: (index + d) mod n for d in [1, k + r)."""
    return sorted({(index + d) % n for d in range(1, k + r)})


class DeltaForwarding:
    """Server ``index`` of ``n`` under a (k, r) code, its shards' geometry ``tables`` {name: (block_slots,
    record_bytes)}; its delta stream continues after ``seq``, whose state included the pushes ``worker_seqs``
    {worker: seq}; ``secret``: the job's JobSecret (its remote links prove membership with it)."""

    def __init__(
        self,
        index: int,
        n: int,
        k: int,
        r: int,
        tables: Mapping[str, Tuple[int, int]],
        seq: int,
        worker_seqs: Mapping[int, int],
        secret: JobSecret,
    ) -> None:
        self.forwarder = _core.DeltaForwarder(
            index, n, k, r, tables, int(seq), {int(w): int(s) for w, s in worker_seqs.items()}
        )
        self._delivered = threading.Condition()  # notified by the remote links after each ack or failure
        self.links = HolderLinks(self.forwarder, secret, self._notify_delivery)

    def connect(self, servers: Sequence[Handle]) -> None:
        """Starts forwarding to this server's parity holders among ``servers`` (their agents exist by now)."""
        for h in self.forwarder.holders:
            self.links.connect(h, servers[h])

    def durable(self, worker: int) -> int:
        """The highest push seq of ``worker`` every live holder applied."""
        return self.forwarder.durable_seq(worker)

    def flush(self) -> None:
        """Parity catches up now: the forwarder routes what it holds back for a fuller range, and remote links send
        what is queued instead of at their next interval."""
        self.forwarder.flush()
        self.links.flush()

    def progress(self) -> ForwardingProgress:
        """The forwarder's progress (seq, live_applied, pending, worker_seqs, down, coalesced) and its delivery
        errors, after a :meth:`flush` (its caller waits for parity to catch up)."""
        self.flush()
        return self._with_errors(self.forwarder.progress())

    def drain(self, timeout: float) -> ForwardingProgress:
        """:meth:`progress` once nothing is queued or in flight for a live holder, waiting here up to ``timeout``
        seconds (then ``pending`` is still True: ask again). The links are flushed, and again after each delivery
        while more is queued (a batch recorded while a send was in flight would else wait out the link's send
        interval). Waiting here, woken by the links, costs a caller one round trip to every server instead of a
        poll of progress calls."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= 60:
            raise ValueError(f"timeout: must be seconds in [0, 60], got {timeout!r}")
        deadline = time.monotonic() + timeout
        with self._delivered:  # held while checking: a delivery between the check and the wait is not missed
            while True:
                self.flush()
                progress = self.forwarder.progress()
                remaining = deadline - time.monotonic()
                if not progress["pending"] or remaining <= 0:
                    break
                self._delivered.wait(min(remaining, DRAIN_POLL_SECONDS))
        return self._with_errors(progress)

    def _with_errors(self, progress: dict) -> ForwardingProgress:
        return cast(ForwardingProgress, {**progress, "errors": list(self.forwarder.errors)})

    def _notify_delivery(self) -> None:
        with self._delivered:
            self._delivered.notify_all()

    def stats(self) -> Dict[str, int]:
        """Bytes forwarded, mutations coalesced into seq ranges, deltas not yet applied by every live holder (how far
        parity trails the shard) and the remote links' figures."""
        progress = self.forwarder.progress()
        return {
            "forwarded_bytes": int(self.forwarder.bytes_sent),
            "coalesced": int(progress["coalesced"]),
            "parity_lag": int(progress["seq"]) - int(progress["live_applied"]),
            **self.links.stats(),
        }

    def close(self) -> None:
        """Nothing more is forwarded."""
        self.links.close()
        self.forwarder.close()
