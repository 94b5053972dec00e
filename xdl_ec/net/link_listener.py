"""LinkListener: the accepting side of xdl-ec's authenticated TCP links, the parity links
(:mod:`xdl_ec.ft.parity_link`) and the step's direct links (:mod:`xdl_ec.ps.direct`): a listening socket, one
thread per connection, a bound on connections still in their handshake, rate-limited warnings for refused peers
(each kept in :attr:`~LinkListener.events`), and ``close()`` dropping every connection. A subclass speaks its
protocol: ``_authenticate(conn, peer)`` (the handshake; its answer is handed on) and ``_converse(conn, peer,
authenticated)`` (the requests), raising :class:`PeerRefused` for a peer or message it refuses.
"""

from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from typing import Any, Deque, List, Tuple

from xdl_ec.net.link_socket import tune

# Connections still in their handshake at once; more are closed at once (each holds a thread until it ends).
MAX_PENDING_HANDSHAKES = 16
# Warning lines a listener writes per second at most (a flood of strangers is summarised, never all printed).
WARNINGS_PER_SECOND = 20

log = logging.getLogger(__name__)


class PeerRefused(Exception):
    """A peer or a message refused: the text names the peer and why (one warning, the connection closed)."""


class LinkListener:
    """Accepts connections on ``host`` (an ephemeral port: :attr:`address`), each served by a thread named
    ``thread_name``; subclasses call ``super().__init__`` last, once what their threads read is set."""

    def __init__(self, host: str, thread_name: str) -> None:
        self._listener = socket.create_server((host, 0))
        self.address: Tuple[str, int] = self._listener.getsockname()[:2]
        self._thread_name = thread_name
        self._closed = False
        self._conns: List[socket.socket] = []
        self._lock = threading.Lock()
        self._pending = threading.BoundedSemaphore(MAX_PENDING_HANDSHAKES)
        self.refused = 0  # peers and messages refused (each a warning, unless the flood was summarised)
        self.events: Deque[str] = collections.deque(maxlen=100)
        self._warned_at = 0  # the second the last warnings were counted in, and how many
        self._warned = 0
        self._unshown = 0
        threading.Thread(target=self._accept, daemon=True, name=thread_name).start()

    def _describe(self) -> str:
        """Who listens, for the warnings (e.g. "parity receiver of server 3")."""
        raise NotImplementedError

    def _authenticate(self, conn: socket.socket, peer: str) -> Any:
        raise NotImplementedError

    def _converse(self, conn: socket.socket, peer: str, authenticated: Any) -> None:
        raise NotImplementedError

    def _warn(self, line: str) -> None:
        who = self._describe()
        line = f"{who}: {line}"
        with self._lock:
            self.refused += 1
            self.events.append(line)
            now = int(time.monotonic())
            if now != self._warned_at:
                unshown, self._warned_at, self._warned, self._unshown = self._unshown, now, 0, 0
                if unshown:
                    log.warning("%s: %d more refusals not shown", who, unshown)
            self._warned += 1
            if self._warned > WARNINGS_PER_SECOND:
                self._unshown += 1
                return
        log.warning("%s", line)

    def _accept(self) -> None:
        while True:
            try:
                conn, addr = self._listener.accept()
            except OSError:  # closed
                return
            peer = f"{addr[0]}:{addr[1]}"
            if not self._pending.acquire(blocking=False):
                self._warn(
                    f"closed a connection from {peer}: {MAX_PENDING_HANDSHAKES} others are still in their handshake"
                )
                conn.close()
                continue
            tune(conn)
            with self._lock:
                if self._closed:
                    conn.close()
                    self._pending.release()
                    return
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True, name=self._thread_name).start()

    def _serve(self, conn: socket.socket, peer: str) -> None:
        try:
            try:
                authenticated = self._authenticate(conn, peer)
            finally:
                self._pending.release()
            self._converse(conn, peer, authenticated)
        except PeerRefused as refused:
            self._warn(str(refused))
        except OSError:  # the peer went away (or close())
            pass
        finally:
            with self._lock:  # off the list before its fd is freed: close() never touches a reused fd
                if conn in self._conns:
                    self._conns.remove(conn)
            conn.close()

    def close(self) -> None:
        """Stops accepting and drops every connection (the peers see their links break).

        A connection is shut down here, never closed: its thread may be inside a native send or receive on its fd
        (GIL released), and a closed fd's number is soon another socket's, which that call would then read or write.
        Shut down, every call on it fails at once, and its thread closes it."""
        with self._lock:
            self._closed = True
            for conn in self._conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._conns = []
        self._listener.close()
