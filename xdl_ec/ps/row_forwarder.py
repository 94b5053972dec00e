"""RowForwarder: an old server's side of a resize's copy: its rows sent to the fresh servers by the server itself.

In a background move (:mod:`xdl_ec.ps.background_move`) the driver asks each old server for slot ranges; the
server reads them, routes each row as the client routes over the fresh servers' ids and loads it into its owner
there, answering the driver only what tells a row's copy from a later change (keys, slots, clocks, owners), so the
rows do not pass through the driver. On Ray the loads go over direct links of the server's own, proven with the
run's secret, so a load is one ``sendmsg`` instead of a Ray call whose rows of over 100 KB would cross the object
store.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.backend import CallTimeout, RoleLost
from xdl_ec.ps.client import owner_positions, rows_by_owner
from xdl_ec.ps.direct import BesideLinkedHandle
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.remote import Remote

# (table, slots) -> the live rows there, as ParameterServer.slot_rows answers
SlotReader = Callable[[str, Any], Dict[str, Any]]


class ForwardTargets:
    """A resize's fresh servers as an old server sends to them: over direct links of their own, proven with the
    secret this server's own links serve (given at the first send: the driver's forward_slots reaches this server
    over a link, so it serves them by then), or, without one (one process), their handles as given."""

    def __init__(self, fresh: Sequence[Handle], ids: Sequence[int], caller: int) -> None:
        self.ids = [int(i) for i in ids]
        self._fresh, self._caller = list(fresh), caller
        self._handles: Optional[List[Handle]] = None

    def open(self, secret: JobSecret) -> None:
        """Links to every fresh server proven with ``secret``, connected now (a ping each, answered in order with
        the loads after it; a fresh server that cannot be reached fails its first load instead)."""
        for position in range(len(self._fresh)):
            self.server(position, secret).ping()

    def server(self, position: int, secret: Optional[JobSecret]) -> Remote:
        if self._handles is None:
            self._handles = [h if secret is None else BesideLinkedHandle(h, secret, self._caller) for h in self._fresh]
        handle = self._handles[position]
        return Remote(handle, ServerAPI, beside=isinstance(handle, BesideLinkedHandle))

    def close(self) -> None:
        for handle in self._handles or ():
            if isinstance(handle, BesideLinkedHandle):
                handle.close()


class RowForwarder:
    """Server ``index``'s forwarding of rows read by ``read_slots`` to the fresh servers it was told."""

    def __init__(self, index: int, read_slots: SlotReader) -> None:
        self.index = index
        self._read_slots = read_slots
        self._lock = threading.Lock()
        self.targets: Optional[ForwardTargets] = None

    def forward_to(self, fresh: Sequence[Handle], ids: Sequence[int], secret: Optional[JobSecret]) -> None:
        """The fresh servers (handles, of stable ids ``ids``) that :meth:`forward_slots` sends rows to from now on,
        over links proven with ``secret`` (this server's links' secret; None: their handles as given); the links to
        earlier ones are closed."""
        if len(fresh) != len(ids):
            raise ValueError(f"forward_to: {len(fresh)} fresh servers but {len(ids)} ids; give one id per server")
        targets = ForwardTargets(fresh, ids, self.index)
        if secret is not None:
            targets.open(secret)  # the links' handshakes now, not in the first forward's round
        with self._lock:
            earlier, self.targets = self.targets, targets
        if earlier is not None:
            earlier.close()

    def forward_slots(
        self, reads: Sequence[Tuple[str, Any]], timeout: float, secret: Optional[JobSecret]
    ) -> List[Dict[str, Any]]:
        """The live rows of each (table, slots) of ``reads`` loaded into their owners among the fresh servers
        (routed as the client routes). Answers per read what the driver keeps (keys, slots, clocks, end, owner:
        each row's position among the fresh servers, bytes: those sent), or, when a fresh server was lost or did
        not answer within ``timeout`` seconds, ``[{"lost": why}]`` (the move starts over)."""
        targets = self.targets
        if targets is None:
            raise RuntimeError(
                f"forward_slots: server {self.index} was given no fresh servers; call forward_to(fresh, ids) first"
            )
        parts = [self._read_slots(table, slots) for table, slots in reads]  # each under the lock, then released
        loads = []
        for (table, _), part in zip(reads, parts):
            owner = np.asarray(owner_positions(part["keys"], targets.ids), np.int32)
            part["owner"], part["bytes"] = owner, 0
            for dest, rows in rows_by_owner(part, owner):
                part["bytes"] += sum(v.nbytes for v in rows.values())
                loads.append(targets.server(dest, secret).load_rows(table, rows))
            del part["values"], part["state"]  # the driver keeps only what tells a row's copy from a change
        try:
            for load in loads:
                load.result(timeout)
        except (RoleLost, CallTimeout) as err:
            return [{"lost": f"{type(err).__name__}: {err}"}]
        return parts

    def close(self) -> None:
        with self._lock:
            targets, self.targets = self.targets, None
        if targets is not None:
            targets.close()
