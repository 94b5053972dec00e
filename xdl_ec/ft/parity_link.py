"""Parity batches between server processes: :class:`RemoteHolderLink` (sender side) and :class:`ParityReceiver`
(holder side), over one plain TCP connection per (sender, holder) pair, open only to members of the job.

A holder in the sender's own process is served by the C++ DeltaForwarder's thread; one in another process (a Ray
actor) by a RemoteHolderLink: a thread per holder (a slow holder never holds back the others) that sends the
holder's queued batches in seq order and acknowledges how far the holder applied, so the forwarder can advance its
durable watermark. Both ends' loops are native (``cpp/src/parity_*_loop.cc``), run with the GIL released; Python
starts and stops them, connects and answers their rare hooks. Ray is asked once per link for the receiver's address
(``parity_address``); when that address cannot be reached the link sends through Ray calls (``apply_parity``).

Every connection opens with the links' handshake under the job's JobSecret (:mod:`xdl_ec.net.link_handshake`,
purpose ``parity``) and MACs every message under its session key; the holder checks every batch against the stripe
layout. A broken connection or a refused batch makes the link fail and the forwarder marks the holder down. Why a
connection rather than a Ray call per send, the wire format and what membership protects: "Parity links between
processes" in docs/design/ec-protocol.md.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from typing import Callable, Optional, Protocol, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.net import link_handshake
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.net.link_handshake import MAC_GMAC, Hello, LinkRefused
from xdl_ec.net.link_listener import LinkListener, PeerRefused
from xdl_ec.net.link_socket import LinkBroken, connect, node_host
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.remote import Remote

CALL_TIMEOUT = 60.0  # seconds a holder may take to apply a batch before it counts as down
POLL_SECONDS = 0.5  # how often an idle link checks whether it was closed
# Least seconds between two sends to one holder. Batching a second of deltas per send only delays durability:
# workers keep their pushes logged and holders their undo logs that much longer, and a worker lost together with
# a server in that second is reported unrecoverable; never a push waits. Whoever waits for parity (a recovery's
# drain, a degraded read) calls flush() to cut the wait short.
SEND_INTERVAL = 1.0
# Largest payload a receiver takes in one request (ParityReceiver(max_payload=...) changes it). A link sends what
# its holder's queue held, about a second of deltas (a few MB at 10k samples/s); a bigger one is refused with an
# error and the holder counts as down.
MAX_PAYLOAD_BYTES = 1 << 30

_MAC = MAC_GMAC  # LinkSession's AES-GMAC for bodies of 16 KiB and more, HMAC-SHA256 below (the link offers it only)
# The wire form as the native loops speak it (cpp/include/xdl_ec/parity_receive_loop.h), for who speaks it by hand
# (tests' members): a request's first part, then the batches as the message's one buffer; an answer's, then the
# error's UTF-8 bytes.
_REQUEST = struct.Struct("<iiq")  # holder, sender, durable
_ANSWER = struct.Struct("<bq")  # status, applied

log = logging.getLogger(__name__)

_Refused = PeerRefused  # a peer broke the protocol: the receiver closes the connection (after a warning)


class ParityReceiver(LinkListener):
    """Holder side: accepts RemoteHolderLink connections that prove they belong to the job (``secret``) and applies
    their batches to ``holder`` (a C++ ParityHolder, which has its own lock: the senders' connections apply
    concurrently, and checks every batch against the stripe layout). ``refuse()`` True (its server is crashing)
    drops connections instead of applying, as a dead process would. Every refused peer or batch is logged as one
    warning naming the peer and kept in :attr:`events` (the newest 100)."""

    def __init__(
        self,
        holder: _core.ParityHolder,
        secret: JobSecret,
        refuse: Callable[[], bool] = lambda: False,
        host: Optional[str] = None,
        max_payload: int = MAX_PAYLOAD_BYTES,
    ) -> None:
        if not isinstance(secret, JobSecret):
            raise TypeError(f"ParityReceiver: secret must be the job's JobSecret, got {type(secret).__name__}")
        if isinstance(max_payload, bool) or not isinstance(max_payload, int) or max_payload < 1:
            raise ValueError(f"ParityReceiver: max_payload must be a positive number of bytes, got {max_payload!r}")
        if not isinstance(holder, _core.ParityHolder):
            raise TypeError(f"ParityReceiver: holder must be a ParityHolder, got {type(holder).__name__}")
        self.holder = holder
        self._secret = secret
        self._refuse = refuse
        self._loop = _core.ParityReceiveLoop(holder, max_payload, CALL_TIMEOUT)
        super().__init__(host or node_host(), f"xdl-ec-receive{holder.index}")

    def __repr__(self) -> str:
        return f"ParityReceiver(holder={self.holder.index}, address={self.address})"

    def _describe(self) -> str:
        return f"parity receiver of server {self.holder.index}"

    def _authenticate(self, conn: socket.socket, peer: str) -> Tuple[_core.LinkSession, int]:
        """The links' handshake (:mod:`xdl_ec.net.link_handshake`) for a parity link of this job's layout to this
        holder; _Refused for a peer that fails it."""

        def admit(hello: Hello) -> None:
            if hello.role != "server" or hello.index != self.holder.index or not self.holder.protects(hello.caller):
                raise _Refused(
                    f"refused {peer}: it claims to be server {hello.caller} linking to holder "
                    f"{hello.index}, which is not a link of this job's layout"
                )

        session, hello = link_handshake.accept_link(conn, peer, self._secret, "parity", admit)
        return session, hello.caller

    @property
    def max_payload(self) -> int:
        """The most batch bytes one request may carry (settable: for the requests read from then on)."""
        return int(self._loop.max_payload)

    @max_payload.setter
    def max_payload(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"ParityReceiver: max_payload must be a positive number of bytes, got {value!r}")
        self._loop.max_payload = value

    @property
    def batches_received(self) -> int:
        """Requests applied (and their bytes: :attr:`bytes_received`)."""
        return int(self._loop.batches_received)

    @property
    def bytes_received(self) -> int:
        return int(self._loop.bytes_received)

    def _converse(self, conn: socket.socket, peer: str, authenticated: Tuple[_core.LinkSession, int]) -> None:
        """The connection's requests, served by the native loop (``cpp/src/parity_receive_loop.cc``) with the GIL
        released until the connection ends."""
        session, sender = authenticated
        try:
            self._loop.serve(session, conn.fileno(), sender, f"{peer} (server {sender})", self._refuse, self._warn)
        except _core.LinkRejected as err:  # its text names the peer and why
            raise _Refused(str(err)) from None


class HolderRefused(RuntimeError):
    """The holder answered a batch with an error (e.g. a seq gap): it counts as down until replaced."""


class HolderAPI(Protocol):
    """What a link asks of its holder's server agent through Ray (the parity agent answers it)."""

    def parity_address(self) -> Tuple[str, int]: ...

    def apply_parity(self, sender: int, batches: np.ndarray, durable: int) -> int: ...


class RemoteHolderLink:
    """Sends ``forwarder``'s batches for ``holder`` to the ParityReceiver of ``handle`` (a Handle of the holder's
    server) on link generation ``link`` (what ``forwarder.set_holder`` returned), proving membership with the job's
    ``secret``; it stops once the link is replaced. ``on_delivery`` (optional) is called after each send was acked
    or failed: someone waiting for parity to catch up (``ParityAgent.drain``) wakes then instead of polling."""

    def __init__(
        self,
        forwarder: _core.DeltaForwarder,
        holder: int,
        handle: Handle,
        link: int,
        secret: JobSecret,
        on_delivery: Optional[Callable[[], None]] = None,
    ) -> None:
        if not isinstance(secret, JobSecret):
            raise TypeError(f"RemoteHolderLink: secret must be the job's JobSecret, got {type(secret).__name__}")
        self.forwarder, self.holder, self.handle, self.link = forwarder, holder, handle, link
        self._secret = secret
        self._session: Optional[_core.LinkSession] = (
            None  # the connection's LinkSession, which the loop uses (kept alive here)
        )
        self._on_delivery = on_delivery
        self.transport = "tcp"  # "ray (why)": the holder's receiver was unreachable, Ray calls carry the batches
        self._loop = _core.ParitySendLoop(forwarder, holder, link, SEND_INTERVAL, POLL_SECONDS, CALL_TIMEOUT)
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"xdl-ec-forward{forwarder.index}to{holder}"
        )
        self._thread.start()

    @property
    def sends(self) -> int:
        """Sends made (and the serialised batches' bytes they carried: :attr:`bytes_sent`)."""
        return int(self._loop.sends)

    @property
    def bytes_sent(self) -> int:
        return int(self._loop.bytes_sent)

    def _connect(self) -> Optional[Tuple[_core.LinkSession, int]]:
        """The loop's connection to the holder's receiver: (session, fd), the fd then the loop's; None when the
        holder's server answers but its receiver cannot be reached (e.g. a firewall between nodes): the link then
        sends through Ray calls (:meth:`_call`), slower but never wrong."""
        host, port = Remote(self.handle, HolderAPI, agent=True, beside=True).parity_address().result(CALL_TIMEOUT)
        try:
            conn = connect(host, port, CALL_TIMEOUT)
        except OSError as err:
            self.transport = f"ray (no connection to {host}:{port}: {err!r})"
            return None
        try:
            session = link_handshake.open_link(
                conn, self._secret, "parity", "server", self.holder, self.forwarder.index, _MAC
            )
        except socket.timeout:
            conn.close()
            raise LinkBroken(
                f"holder {self.holder} at {host}:{port} did not complete the handshake within "
                f"{link_handshake.HANDSHAKE_SECONDS:g} s"
            ) from None
        except LinkRefused as err:
            conn.close()
            raise HolderRefused(
                f"the receiver at {host}:{port} failed to prove it is holder {self.holder} of this job: {err}"
            ) from None
        except BaseException:
            conn.close()
            raise
        conn.settimeout(CALL_TIMEOUT)
        self._session = session
        return session, conn.detach()

    def _call(self, batches: bytes, durable: int) -> int:
        """One send through a Ray call (the holder's receiver is unreachable)."""
        holder = Remote(self.handle, HolderAPI, agent=True, beside=True)
        payload = np.frombuffer(batches, np.uint8)
        return int(holder.apply_parity(self.forwarder.index, payload, durable).result(CALL_TIMEOUT))

    @staticmethod
    def _is_loss(err: BaseException) -> bool:
        """A broken connection or a dead actor is the holder's loss; a refusal or a timeout is an error."""
        return isinstance(err, (RoleLost, ConnectionError))

    def _run(self) -> None:
        try:  # the native loop (cpp/src/parity_send_loop.cc), the GIL released but for its hooks, until close()
            self._loop.run(self._connect, self._call, self._on_delivery, self._is_loss)
        finally:
            self._session = None

    def flush(self) -> None:
        """Sends what is queued now (someone waits for this holder's parity to catch up)."""
        self._loop.flush()

    def close(self) -> None:
        self._loop.stop()

    def __repr__(self) -> str:
        return f"RemoteHolderLink(sender={self.forwarder.index}, holder={self.holder}, transport={self.transport!r})"
