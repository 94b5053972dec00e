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
from typing import Any

from .backend import RoleLost

CALL_TIMEOUT = 60.0  # seconds a holder may take to apply a batch before it counts as down
POLL_SECONDS = 0.5  # how often an idle link checks whether it was closed


class RemoteHolderLink:
    """Sends ``forwarder``'s batches for ``holder`` to ``handle`` (a Handle of the holder's server) on link
    generation ``link`` (what ``forwarder.set_holder`` returned); it stops once the link is replaced."""

    def __init__(self, forwarder: Any, holder: int, handle: Any, link: int) -> None:
        self.forwarder, self.holder, self.handle, self.link = forwarder, holder, handle, link
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"xdl-ec-forward{forwarder.index}to{holder}")
        self._thread.start()

    def _run(self) -> None:
        sender = self.forwarder.index
        while not self._stop.is_set():
            # releases the GIL while it waits; None also once the link was replaced (then _stop is set)
            taken = self.forwarder.take(self.holder, self.link, POLL_SECONDS)
            if taken is None:
                continue
            batches, durable, link, _ = taken
            try:
                applied = self.handle.call("parity_call", "apply_parity", sender, batches, durable).result(CALL_TIMEOUT)
            except Exception as err:  # noqa: BLE001 - any failure: the holder is down until replaced
                self.forwarder.fail(self.holder, link, repr(err), isinstance(err, RoleLost))
                continue
            self.forwarder.ack(self.holder, link, int(applied))

    def close(self) -> None:
        self._stop.set()
