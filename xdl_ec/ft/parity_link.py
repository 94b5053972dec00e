"""Parity batches between server processes: :class:`RemoteHolderLink` (sender side) and :class:`ParityReceiver`
(holder side), over one plain TCP connection per (sender, holder) pair.

The C++ :class:`~xdl_ec._core.DeltaForwarder` serves holders in its own process from its own thread; a holder
in another process (a Ray actor) is served by a RemoteHolderLink: a thread that takes the holder's queued batches
(in seq order, serialised), sends them and acknowledges how far the holder applied, so the forwarder can advance
its durable watermark. A holder that fails counts as down until the forwarder is given its replacement
(``set_holder``). One thread per holder, so a holder slow to answer never holds back the others.

Why not a Ray actor call per send: with batches over Ray's 100 KB inline limit every call goes through the object
store, ~2.8 ms of CPU over sender, holder and raylet per call (~1.2 ms under it), and there are k + r - 1 links per
server; that was most of what ``--ft ec`` cost on Ray. The connection costs a ``sendall`` and a ``recv`` per send,
with the GIL released around both. Ray is used once per link, to ask the holder's server for its receiver's
address (``parity_call("parity_address")``), so a link follows its holder wherever Ray placed it; when that address
cannot be connected to (a firewall between nodes), the link falls back to Ray calls (``apply_parity``).

Wire form, little-endian: request ``<iiqQ`` (holder, sender, durable, n) then n bytes of ``serialize_batches``;
answer ``<bqI`` (status 0 ok / 1 refused, applied seq, m) then an m-byte UTF-8 error. The receiver checks the
holder index, so a link never applies to a server it did not mean. A connection that breaks, or a holder that
refuses a batch, makes the link fail: the forwarder marks the holder down, exactly as a failed call did (the
protocol in :mod:`xdl_ec.ft.ec_strategy` is unchanged: batches in seq order, acked only once applied).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from ..ps.backend import RoleLost

CALL_TIMEOUT = 60.0  # seconds a holder may take to apply a batch before it counts as down
POLL_SECONDS = 0.5  # how often an idle link checks whether it was closed
# Least seconds between two sends to one holder. Batching a second of deltas per send only delays durability:
# workers keep their pushes logged and holders their undo logs that much longer, and a worker lost together with
# a server in that second is reported unrecoverable; never a push waits. Whoever waits for parity (a recovery's
# drain, a degraded read) calls flush() to cut the wait short.
SEND_INTERVAL = 1.0

_REQUEST = struct.Struct("<iiqQ")  # holder, sender, durable, payload bytes
_ANSWER = struct.Struct("<bqI")  # status, applied, error bytes
_MAX_ERROR = 1 << 16


class LinkBroken(ConnectionError):
    """The connection to a holder closed or broke mid-exchange (its process died, or its agent closed)."""


def _recv_exactly(conn: socket.socket, size: int) -> bytearray:
    """``size`` bytes from ``conn`` (LinkBroken if it closes first); recv_into releases the GIL while it waits, and
    on a blocking socket MSG_WAITALL takes a whole batch in one call (one GIL round trip, not one per segment)."""
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = conn.recv_into(view[got:], size - got, socket.MSG_WAITALL)
        if n == 0:
            raise LinkBroken(f"connection closed after {got} of {size} bytes")
        got += n
    return buf


def _node_host() -> str:
    """The address other Ray nodes reach this process at (loopback outside Ray)."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - no Ray: a single machine
        pass
    return "127.0.0.1"


class ParityReceiver:
    """Holder side: accepts RemoteHolderLink connections and applies their batches to ``holder`` (a C++
    ParityHolder, which has its own lock: the senders' connections apply concurrently). ``refuse()`` True (its
    server is crashing) drops connections instead of applying, as a dead process would."""

    def __init__(self, holder: Any, refuse: Callable[[], bool] = lambda: False, host: Optional[str] = None) -> None:
        self.holder = holder
        self._refuse = refuse
        self._listener = socket.create_server((host or _node_host(), 0))
        self.address: Tuple[str, int] = self._listener.getsockname()[:2]
        self._closed = False
        self._conns: List[socket.socket] = []
        self._lock = threading.Lock()
        self.batches_received = 0  # sends applied, and their bytes
        self.bytes_received = 0
        threading.Thread(target=self._accept, daemon=True, name=f"xdl-ec-receive{holder.index}").start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name=f"xdl-ec-receive{self.holder.index}").start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                holder, sender, durable, size = _REQUEST.unpack(_recv_exactly(conn, _REQUEST.size))
                payload = _recv_exactly(conn, size)
                if self._refuse():
                    return  # the server is going down: the sender sees the connection break
                status, applied, error = 0, 0, b""
                if holder != self.holder.index:
                    status, error = 1, (f"server {self.holder.index} received a batch meant for holder {holder}; "
                                        f"the link's address is stale").encode()
                else:
                    try:
                        applied = int(self.holder.apply(sender, payload, durable))  # releases the GIL
                        self.batches_received += 1
                        self.bytes_received += size
                    except Exception as err:  # noqa: BLE001 - the sender marks this holder down with the reason
                        status, error = 1, f"{type(err).__name__}: {err}".encode()[:_MAX_ERROR]
                conn.sendall(_ANSWER.pack(status, applied, len(error)) + error)
        except OSError:  # LinkBroken included: the sender went away (or close())
            pass
        finally:
            conn.close()
            with self._lock:
                if conn in self._conns:
                    self._conns.remove(conn)

    def close(self) -> None:
        """Stops accepting and drops every connection (senders see their links break)."""
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        self._listener.close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


class HolderRefused(RuntimeError):
    """The holder answered a batch with an error (e.g. a seq gap): it counts as down until replaced."""


class RemoteHolderLink:
    """Sends ``forwarder``'s batches for ``holder`` to the ParityReceiver of ``handle`` (a Handle of the holder's
    server) on link generation ``link`` (what ``forwarder.set_holder`` returned); it stops once the link is
    replaced. ``on_delivery`` (optional) is called after each send was acked or failed: someone waiting for
    parity to catch up (``ParityAgent.drain``) wakes then instead of polling."""

    def __init__(self, forwarder: Any, holder: int, handle: Any, link: int,
                 on_delivery: Optional[Callable[[], None]] = None) -> None:
        self.forwarder, self.holder, self.handle, self.link = forwarder, holder, handle, link
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
        host, port = self.handle.call_beside("parity_call", "parity_address").result(CALL_TIMEOUT)
        try:
            conn = socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT)
        except OSError as err:
            self.transport = f"ray (no connection to {host}:{port}: {err!r})"
            return None
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _send(self, sender: int, batches: np.ndarray, durable: int) -> int:
        if self._conn is None and self.transport == "tcp":
            self._conn = self._connect()
        conn = self._conn
        if conn is None:
            return int(self.handle.call_beside("parity_call", "apply_parity", sender, batches,
                                               durable).result(CALL_TIMEOUT))
        conn.sendall(_REQUEST.pack(self.holder, sender, int(durable), int(batches.nbytes)))
        conn.sendall(batches)  # the numpy buffer as is; releases the GIL
        status, applied, size = _ANSWER.unpack(_recv_exactly(conn, _ANSWER.size))
        error = bytes(_recv_exactly(conn, size)).decode(errors="replace") if size else ""
        if status != 0:
            raise HolderRefused(f"holder {self.holder} refused the batches: {error}")
        return int(applied)

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
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
