"""LinkListener (xdl_ec.net.link_listener): what every authenticated listener (parity receivers, direct links)
shares."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from xdl_ec.net.link_listener import LinkListener


class _HeldListener(LinkListener):
    """Each connection's thread holds its raw fd, as a native send or receive does with the GIL released, and
    writes on it once the listener was closed (a call that was under way when close() came)."""

    def __init__(self) -> None:
        self.conversing = threading.Event()
        self.resume = threading.Event()
        self.wrote: Any = None
        self.done = threading.Event()
        super().__init__("127.0.0.1", "test-listener")

    def _describe(self) -> str:
        return "test listener"

    def _authenticate(self, conn: socket.socket, peer: str) -> Any:
        return None

    def _converse(self, conn: socket.socket, peer: str, authenticated: Any) -> None:
        fd = conn.fileno()
        self.conversing.set()
        self.resume.wait(10)
        try:
            self.wrote = os.write(fd, b"late answer")
        except OSError as err:
            self.wrote = err
        finally:
            self.done.set()


def test_close_leaves_each_connection_to_its_thread_so_a_late_write_never_reaches_another_socket() -> None:
    listener = _HeldListener()
    client = socket.create_connection(listener.address)
    try:
        assert listener.conversing.wait(10), "the connection was not served"
        listener.close()
        # sockets opened now take the lowest free fds: one of them would be the connection's, had close() freed it
        fresh = [socket.socketpair() for _ in range(4)]
        listener.resume.set()
        assert listener.done.wait(10)
        try:
            assert isinstance(listener.wrote, OSError), f"a write after close() went through: {listener.wrote!r}"
            for a, b in fresh:
                for s in (a, b):
                    s.setblocking(False)
                    try:
                        stray = s.recv(64)
                    except BlockingIOError:
                        stray = b""
                    assert stray == b"", f"a fresh socket received {stray!r}, written to the closed connection's fd"
        finally:
            for a, b in fresh:
                a.close()
                b.close()
        assert client.recv(64) == b""  # the peer sees its connection end
    finally:
        client.close()
