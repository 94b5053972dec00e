"""HolderLinks: where a data server's DeltaForwarder delivers each parity holder's batches.

A holder in the same process is handed to the forwarder itself (its C++ thread applies to it directly); a holder
behind another process gets a :class:`~xdl_ec.ft.parity_link.RemoteHolderLink`. Someone waiting for parity to catch
up is woken by the remote links after each delivery (``on_delivery``) instead of polling.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Protocol

from xdl_ec import _core
from xdl_ec.ft.parity_link import RemoteHolderLink
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.handle import Handle


class ParityHolding(Protocol):
    """What a forwarder in the same process needs of a holder's server: its parity agent's native holder."""

    @property
    def holder(self) -> _core.ParityHolder: ...


class HolderLinks:
    """The links of ``forwarder`` (server ``forwarder.index``'s) to its parity holders; ``secret``: the job's
    JobSecret, which remote links prove membership with; ``on_delivery``: called by a remote link after each send
    was acked or failed."""

    def __init__(self, forwarder: _core.DeltaForwarder, secret: JobSecret, on_delivery: Callable[[], None]) -> None:
        self.forwarder = forwarder
        self._secret = secret
        self._on_delivery = on_delivery
        self._remote: Dict[int, RemoteHolderLink] = {}

    def connect(self, holder: int, handle: Handle) -> None:
        """(Re)connects parity holder ``holder`` at ``handle``: directly to its ParityHolder when it lives in this
        process, else through a RemoteHolderLink."""
        old = self._remote.pop(holder, None)
        if old is not None:
            old.close()
        local = _local_agent(handle)
        if local is not None:
            self.forwarder.set_holder(holder, local.holder)
            return
        self._remote[holder] = RemoteHolderLink(
            self.forwarder,
            holder,
            handle,
            self.forwarder.set_holder(holder, None),  # type: ignore[arg-type]  # None: a remote holder
            self._secret,
            self._on_delivery,
        )

    def flush(self) -> None:
        """Remote links send what is queued now instead of at their next interval."""
        for link in list(self._remote.values()):
            link.flush()

    def stats(self) -> Dict[str, int]:
        """The remote links' sends, their bytes and how many go over Ray calls (the receiver was unreachable)."""
        links = list(self._remote.values())
        return {
            "remote_sends": sum(link.sends for link in links),
            "remote_send_bytes": sum(link.bytes_sent for link in links),
            "links_over_ray": sum(link.transport != "tcp" for link in links),
        }

    def close(self) -> None:
        for link in self._remote.values():
            link.close()


def _local_agent(handle: Handle) -> Optional[ParityHolding]:
    """The parity agent of ``handle``'s server when it lives in this process (a one-process backend), else None."""
    local = getattr(handle, "local_object", None)
    return None if local is None else local().agent
