"""The socket side that xdl-ec's two kinds of TCP link share, the parity links (:mod:`xdl_ec.ft.parity_link`) and
the step's direct links (:mod:`xdl_ec.ps.direct`): the one place a connection's options are set (:func:`tune`,
:func:`connect`), reading exactly n bytes by a deadline, the error a connection closed mid-message raises, and the
address a listener offers other Ray nodes.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Optional

BUFFER_BYTES = 2 << 20  # per direction: a step's request (~80 KB at batch 256) goes out in one sendmsg, not
# waiting for the peer to drain the kernel's first 16 KiB
# A link's peer whose machine vanished (no FIN, no RST) is found by TCP keepalive after about
# KEEPALIVE_IDLE + KEEPALIVE_COUNT * KEEPALIVE_INTERVAL seconds (2 min), instead of the kernel's default 2 h:
# a listener's thread waiting on such a caller, which has no deadline, then ends.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 60, 10, 6
CONNECT_SECONDS = 60.0  # connecting to a listener (a Ray node's address)


def tune(conn: socket.socket) -> None:
    """A link connection's options, on both ends and for both purposes: no Nagle delay (requests are answered one
    by one), BUFFER_BYTES buffers and keepalive."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_BYTES)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER_BYTES)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_COUNT)


def connect(host: str, port: int, timeout: float = CONNECT_SECONDS) -> socket.socket:
    """A tuned connection to a link listener at ``host``:``port`` (OSError when it cannot be made in
    ``timeout`` seconds)."""
    conn = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        tune(conn)
    except BaseException:
        conn.close()
        raise
    return conn


class LinkBroken(ConnectionError):
    """The connection closed or broke mid-message (the peer's process died, or it closed the link)."""


def recv_exactly(conn: socket.socket, size: int, deadline: Optional[float] = None, into: Any = None) -> Any:
    """``size`` bytes from ``conn`` into ``into`` (a new bytearray by default); LinkBroken if it closes first.
    recv_into releases the GIL while it waits, and on a blocking socket MSG_WAITALL takes a whole message in one
    call (one GIL round trip, not one per segment). With ``deadline`` (time.monotonic()) the whole read must end by
    then (socket.timeout otherwise), however the bytes trickle in."""
    buf = bytearray(size) if into is None else into
    view = memoryview(buf).cast("B")
    got = 0
    while got < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout(f"timed out after {got} of {size} bytes")
            conn.settimeout(remaining)
        n = conn.recv_into(view[got:], size - got, socket.MSG_WAITALL)
        if n == 0:
            raise LinkBroken(f"connection closed after {got} of {size} bytes")
        got += n
    return buf


def node_host() -> str:
    """The address other Ray nodes reach this process at (loopback outside Ray)."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - no Ray: a single machine
        pass
    return "127.0.0.1"
