"""RemoteHolderLink: carries one data server's delta batches to a parity holder in another process.

The C++ :class:`~xdl_ec._core.DeltaForwarder` serves holders in its own process from its own thread; a holder
behind a Ray actor is served by one of these instead: a thread that takes the holder's queued batches (in seq
order, serialised), sends them in one ``apply_parity`` call and acknowledges how far the holder applied, so the
forwarder can advance its durable watermark. A holder that fails counts as down until the forwarder is given its
replacement (``set_holder``). One thread per holder, so a holder slow to answer (e.g. a replacement busy with a
degraded read) never holds back the others.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .backend import RoleLost

CALL_TIMEOUT = 60.0  # seconds a holder may take to apply a batch before it counts as down
POLL_SECONDS = 0.5  # how often an idle link checks whether it was closed
# Least seconds between two sends to one holder. A call between processes costs ~1 ms of CPU over both sides
# (serialisation, the object store for batches over 100 KB), and there are k + r - 1 holders per server: one call
# per mutation (every ~10 ms) cost a quarter of the training throughput on 2 cores, one every 250 ms still ~15%
# (bench_ft_ec --backend ray). Batching a second of deltas per call only delays durability: workers keep their
# pushes logged and holders their undo logs that much longer, and a worker lost together with a server in that
# second is reported unrecoverable; never a push waits. Whoever waits for parity (a recovery's drain, a degraded
# read) calls flush() to cut the wait short.
SEND_INTERVAL = 1.0


class RemoteHolderLink:
    """Sends ``forwarder``'s batches for ``holder`` to ``handle`` (a Handle of the holder's server) on link
    generation ``link`` (what ``forwarder.set_holder`` returned); it stops once the link is replaced."""

    def __init__(self, forwarder: Any, holder: int, handle: Any, link: int) -> None:
        self.forwarder, self.holder, self.handle, self.link = forwarder, holder, handle, link
        self._stop = threading.Event()
        self.sends = 0  # calls made, and the bytes they carried (batches serialised)
        self.bytes_sent = 0
        self._flush = threading.Event()  # send what is queued now, without waiting out SEND_INTERVAL
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"xdl-ec-forward{forwarder.index}to{holder}")
        self._thread.start()

    def _run(self) -> None:
        sender = self.forwarder.index
        last_send = 0.0
        while not self._stop.is_set():
            pause = last_send + SEND_INTERVAL - time.monotonic()
            if pause > 0:
                self._flush.wait(pause)
            self._flush.clear()
            if self._stop.is_set():
                return
            # releases the GIL while it waits; None also once the link was replaced (then _stop is set)
            taken = self.forwarder.take(self.holder, self.link, POLL_SECONDS)
            if taken is None:
                continue
            batches, durable, link, _ = taken
            last_send = time.monotonic()
            self.sends += 1
            self.bytes_sent += int(batches.nbytes)
            try:
                applied = self.handle.call_beside("parity_call", "apply_parity", sender, batches,
                                                  durable).result(CALL_TIMEOUT)
            except Exception as err:  # noqa: BLE001 - any failure: the holder is down until replaced
                self.forwarder.fail(self.holder, link, repr(err), isinstance(err, RoleLost))
                continue
            self.forwarder.ack(self.holder, link, int(applied))

    def flush(self) -> None:
        """Sends what is queued now (someone waits for this holder's parity to catch up)."""
        self._flush.set()

    def close(self) -> None:
        self._stop.set()
        self._flush.set()
