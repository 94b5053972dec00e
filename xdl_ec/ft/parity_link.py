"""Parity batches between server processes: :class:`RemoteHolderLink` (sender side) and :class:`ParityReceiver`
(holder side), over one plain TCP connection per (sender, holder) pair, open only to members of the job.

The C++ :class:`~xdl_ec._core.DeltaForwarder` serves holders in its own process from its own thread; a holder
in another process (a Ray actor) is served by a RemoteHolderLink: a thread that takes the holder's queued batches
(in seq order, serialised), sends them and acknowledges how far the holder applied, so the forwarder can advance
its durable watermark. A holder that fails counts as down until the forwarder is given its replacement
(``set_holder``). One thread per holder, so a holder slow to answer never holds back the others.

Why not a Ray actor call per send: with batches over Ray's 100 KB inline limit every call goes through the object
store, ~2.8 ms of CPU over sender, holder and raylet per call (~1.2 ms under it), and there are k + r - 1 links per
server; that was most of what ``--ft ec`` cost on Ray. The connection costs a ``sendall`` and a ``recv`` per send,
with the GIL released around both. Ray is used once per link, to ask the holder's server for its receiver's
address (its agent's ``parity_address``, through :class:`~xdl_ec.ps.remote.Remote`), so a link follows its holder wherever Ray placed it; when that address
cannot be connected to (a firewall between nodes), the link falls back to Ray calls (``apply_parity``).

Membership. A receiver listens on the node's address, so anyone on the network can connect: every connection
opens with the links' one handshake (:mod:`xdl_ec.net.link_handshake`, purpose ``parity``, the sender as the caller
and the holder as the index asked for), a mutual challenge-response under the job's
:class:`~xdl_ec.net.job_secret.JobSecret` K; the receiver checks that it is that holder and protects that sender
(else closes). A peer that fails it gets nothing back but the challenge and a closed connection (no seq, no error
text), and the receiver logs one warning naming it; a receiver that fails its proof is sent no batch.

Both then frame and MAC their messages under the connection's session key as a direct link does
(:mod:`xdl_ec.ps.direct`: the native :class:`xdl_ec._core.LinkSession`, the link as the caller, AES-GMAC for bodies
of 16 KiB and more, HMAC-SHA256 below), so a replayed, reordered or altered message fails and the header is checked
before anything is allocated for the body. A request is one message: its first part ``<iiq`` (holder, sender, durable) and one buffer, the
``serialize_batches`` bytes (at most ``max_payload`` bytes, default :data:`MAX_PAYLOAD_BYTES`), which the holder
applies in place; the answer is one message ``<bq`` (status 0 ok / 1 refused, applied seq) + a UTF-8 error of at
most 64 KiB. Framing, MACs and socket I/O of a message are one native call with the GIL released, with a deadline
of :data:`CALL_TIMEOUT` on each side (a holder that stops reading fails its link, never hangs it). Done in Python
(SHA-256 of each payload on both sides, a copy and a fresh buffer per receive) they were ~40% of what ``--ft ec``
added to a server's CPU on Ray. The header's sender must be the one the handshake proved. The holder (C++
ParityHolder) then checks every batch against the stripe layout, so even a member cannot write outside its own
stripes. A refused batch changes nothing, is answered with its error and logged as a warning. There is no
encryption: deltas cross the network in the clear (run on a trusted network).

A connection that breaks, or a holder that refuses a batch, makes the link fail: the forwarder marks the holder
down, exactly as a failed call did (the protocol in :mod:`xdl_ec.ft.ec_strategy` is unchanged: batches in seq
order, acked only once applied).
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from typing import Any, Callable, Optional, Protocol, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.remote import Remote
from xdl_ec.net import link_handshake
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.net.link_handshake import MAC_GMAC, Hello, LinkRefused
from xdl_ec.net.link_listener import LinkListener, PeerRefused
from xdl_ec.net.link_socket import LinkBroken, connect, node_host

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
_REQUEST = struct.Struct("<iiq")  # holder, sender, durable; then the batches as the message's one buffer
_ANSWER = struct.Struct("<bq")  # status, applied; then the error's UTF-8 bytes
_MAX_ERROR = 1 << 16
# A request's body beyond its batches: the buffer's length word, the request struct and the alignment padding.
_FRAMING = 128

log = logging.getLogger(__name__)

_Refused = PeerRefused  # a peer broke the protocol: the receiver closes the connection (after a warning)


class ParityReceiver(LinkListener):
    """Holder side: accepts RemoteHolderLink connections that prove they belong to the job (``secret``) and applies
    their batches to ``holder`` (a C++ ParityHolder, which has its own lock: the senders' connections apply
    concurrently, and checks every batch against the stripe layout). ``refuse()`` True (its server is crashing)
    drops connections instead of applying, as a dead process would. Every refused peer or batch is logged as one
    warning naming the peer and kept in :attr:`events` (the newest 100)."""

    def __init__(self, holder: Any, secret: JobSecret, refuse: Callable[[], bool] = lambda: False,
                 host: Optional[str] = None, max_payload: int = MAX_PAYLOAD_BYTES) -> None:
        if not isinstance(secret, JobSecret):
            raise TypeError(f"ParityReceiver: secret must be the job's JobSecret, got {type(secret).__name__}")
        if isinstance(max_payload, bool) or not isinstance(max_payload, int) or max_payload < 1:
            raise ValueError(f"ParityReceiver: max_payload must be a positive number of bytes, got {max_payload!r}")
        self.holder = holder
        self._secret = secret
        self._refuse = refuse
        self.max_payload = max_payload
        self.batches_received = 0  # sends applied, and their bytes
        self.bytes_received = 0
        super().__init__(host or node_host(), f"xdl-ec-receive{holder.index}")

    def __repr__(self) -> str:
        return f"ParityReceiver(holder={self.holder.index}, address={self.address})"

    def _describe(self) -> str:
        return f"parity receiver of server {self.holder.index}"

    def _authenticate(self, conn: socket.socket, peer: str) -> Tuple[Any, int]:
        """The links' handshake (:mod:`xdl_ec.net.link_handshake`) for a parity link of this job's layout to this
        holder; _Refused for a peer that fails it."""
        def admit(hello: Hello) -> None:
            if (hello.role != "server" or hello.index != self.holder.index or
                    not self.holder.protects(hello.caller)):
                raise _Refused(f"refused {peer}: it claims to be server {hello.caller} linking to holder "
                               f"{hello.index}, which is not a link of this job's layout")

        session, hello = link_handshake.accept_link(conn, peer, self._secret, "parity", admit)
        return session, hello.caller

    def _converse(self, conn: socket.socket, peer: str, authenticated: Tuple[Any, int]) -> None:
        session, sender = authenticated
        who = f"{peer} (server {sender})"
        fd = conn.fileno()
        while True:
            try:
                head, buffers = session.receive(fd, None, self.max_payload + _FRAMING)
            except _core.LinkOversized as err:
                # authenticated, so the member learns why; its bytes are not read: the connection ends after it
                error = f"the request exceeds this receiver's max_payload of {self.max_payload} bytes ({err})"
                self._warn(f"refused a request of {who}: {error}")
                session.send(fd, _ANSWER.pack(1, 0) + error.encode(), [], CALL_TIMEOUT)
                return
            except _core.LinkRejected as err:
                raise _Refused(f"closed the connection of {who}: {err}") from None
            if len(buffers) != 1 or head.nbytes != _REQUEST.size:
                raise _Refused(f"closed the connection of {who}: a request of {len(buffers)} buffers and a "
                               f"{head.nbytes}-byte header, not one batch and a {_REQUEST.size}-byte header")
            holder, claimed, durable = _REQUEST.unpack(head)
            if claimed != sender:
                raise _Refused(f"closed the connection of {who}: a request names sender {claimed}")
            if self._refuse():
                return  # the server is going down: the sender sees the connection break
            status, applied, error = 0, 0, b""
            payload = buffers[0]
            if holder != self.holder.index:
                status, error = 1, (f"server {self.holder.index} received a batch meant for holder {holder}; "
                                    f"the link's address is stale").encode()
            else:
                try:
                    applied = int(self.holder.apply(sender, payload, durable))  # releases the GIL
                    self.batches_received += 1
                    self.bytes_received += payload.nbytes
                except Exception as err:  # noqa: BLE001 - the sender marks this holder down with the reason
                    status, error = 1, f"{type(err).__name__}: {err}".encode()[:_MAX_ERROR]
            if status:
                self._warn(f"refused a batch of {who}: {error.decode(errors='replace')}")
            session.send(fd, _ANSWER.pack(status, applied) + error, [], CALL_TIMEOUT)


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

    def __init__(self, forwarder: Any, holder: int, handle: Any, link: int, secret: JobSecret,
                 on_delivery: Optional[Callable[[], None]] = None) -> None:
        if not isinstance(secret, JobSecret):
            raise TypeError(f"RemoteHolderLink: secret must be the job's JobSecret, got {type(secret).__name__}")
        self.forwarder, self.holder, self.handle, self.link = forwarder, holder, handle, link
        self._secret = secret
        self._session: Any = None  # the connection's LinkSession
        self._on_delivery = on_delivery
        self._stop = threading.Event()
        self.sends = 0  # sends made, and the bytes they carried (batches serialised)
        self.bytes_sent = 0
        self._flush = threading.Event()  # send what is queued now, without waiting out SEND_INTERVAL
        self._conn: Optional[socket.socket] = None
        self.transport = "tcp"  # "ray (why)": the holder's receiver was unreachable, Ray calls carry the batches
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"xdl-ec-forward{forwarder.index}to{holder}")
        self._thread.start()

    def _connect(self) -> Optional[socket.socket]:
        """A connection to the holder's receiver; None when the holder's server answers but its receiver cannot be
        reached (e.g. a firewall between nodes): the link then sends through Ray calls, slower but never wrong."""
        host, port = Remote(self.handle, HolderAPI, agent=True, beside=True).parity_address().result(CALL_TIMEOUT)
        try:
            conn = connect(host, port, CALL_TIMEOUT)
        except OSError as err:
            self.transport = f"ray (no connection to {host}:{port}: {err!r})"
            return None
        try:
            self._session = link_handshake.open_link(conn, self._secret, "parity", "server", self.holder,
                                                     self.forwarder.index, _MAC)
        except socket.timeout:
            conn.close()
            raise LinkBroken(f"holder {self.holder} at {host}:{port} did not complete the handshake within "
                             f"{link_handshake.HANDSHAKE_SECONDS:g} s") from None
        except LinkRefused as err:
            conn.close()
            raise HolderRefused(f"the receiver at {host}:{port} failed to prove it is holder {self.holder} of this "
                                f"job: {err}") from None
        except BaseException:
            conn.close()
            raise
        conn.settimeout(CALL_TIMEOUT)
        return conn

    def _send(self, sender: int, batches: np.ndarray, durable: int) -> int:
        if self._conn is None and self.transport == "tcp":
            self._conn = self._connect()
        conn, session = self._conn, self._session
        if conn is None or session is None:
            holder = Remote(self.handle, HolderAPI, agent=True, beside=True)
            return int(holder.apply_parity(sender, batches, durable).result(CALL_TIMEOUT))
        fd = conn.fileno()
        try:
            session.send(fd, _REQUEST.pack(self.holder, sender, int(durable)), [batches], CALL_TIMEOUT)
            head, _ = session.receive(fd, CALL_TIMEOUT, _ANSWER.size + _MAX_ERROR + _FRAMING)
        except _core.LinkRejected as err:  # an answer altered on the way: the connection is not to be trusted
            raise LinkBroken(f"holder {self.holder}'s answer failed its check: {err}") from None
        if head.nbytes < _ANSWER.size:
            raise LinkBroken(f"holder {self.holder} answered with {head.nbytes} bytes, less than any answer")
        status, applied = _ANSWER.unpack_from(head)
        if status != 0:
            error = bytes(head[_ANSWER.size:]).decode(errors="replace")
            raise HolderRefused(f"holder {self.holder} refused the batches: {error}")
        return int(applied)

    def _drop_connection(self) -> None:
        conn, self._conn, self._session = self._conn, None, None
        if conn is not None:
            conn.close()

    def _run(self) -> None:
        sender = self.forwarder.index
        last_send = 0.0
        try:
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
                    applied = self._send(sender, batches, durable)
                except Exception as err:  # noqa: BLE001 - any failure: the holder is down until replaced
                    self._drop_connection()
                    # a broken connection or a dead actor is the holder's loss; a refusal or a timeout is an error
                    lost = isinstance(err, (RoleLost, ConnectionError))
                    self.forwarder.fail(self.holder, link, repr(err), lost)
                else:
                    self.forwarder.ack(self.holder, link, applied)
                if self._on_delivery is not None:
                    self._on_delivery()
        finally:
            self._drop_connection()

    def flush(self) -> None:
        """Sends what is queued now (someone waits for this holder's parity to catch up)."""
        self._flush.set()

    def close(self) -> None:
        self._stop.set()
        self._flush.set()

    def __repr__(self) -> str:
        return f"RemoteHolderLink(sender={self.forwarder.index}, holder={self.holder}, transport={self.transport!r})"
