"""The links' one handshake (xdl_ec.net.link_handshake): members of a job link for the purpose a listener takes;
a link of the other purpose, another version, a stranger or an impostor listener is refused, saying why."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable, List, Tuple

import numpy as np
import pytest

from xdl_ec.net import link_handshake
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.net.link_handshake import Hello, LinkRefused
from xdl_ec.net.link_listener import LinkListener, PeerRefused
from xdl_ec.net.link_socket import LinkBroken, connect

SECRET = JobSecret.generate()


class _Listener(LinkListener):
    """Takes links of ``purpose`` to server 3 and echoes each message's head back."""

    def __init__(self, purpose: str, secret: JobSecret = SECRET) -> None:
        self.purpose, self.secret = purpose, secret
        self.hellos: List[Hello] = []
        super().__init__("127.0.0.1", f"test-{purpose}")

    def _describe(self) -> str:
        return f"{self.purpose} listener"

    def _authenticate(self, conn: socket.socket, peer: str) -> Any:
        def admit(hello: Hello) -> None:
            if hello.index != 3:
                raise PeerRefused(f"refused {peer}: it asked for index {hello.index}")

        session, hello = link_handshake.accept_link(conn, peer, self.secret, self.purpose, admit)
        self.hellos.append(hello)
        return session

    def _converse(self, conn: socket.socket, peer: str, session: Any) -> None:
        while True:
            head, _ = session.receive(conn.fileno(), None, 1 << 20)
            session.send(conn.fileno(), bytes(head), [])


def _wait(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10.0
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _nothing_back(conn: socket.socket) -> bool:
    """The peer closed ``conn`` without a byte (a reset when bytes it never read were left)."""
    try:
        return conn.recv(64) == b""
    except ConnectionResetError:
        return True


def _open(
    listener: _Listener,
    purpose: str,
    secret: JobSecret = SECRET,
    index: int = 3,
    offer: int = link_handshake.MAC_OFFERED,
) -> Tuple[socket.socket, Any]:
    conn = connect(*listener.address, timeout=10.0)
    try:
        return conn, link_handshake.open_link(conn, secret, purpose, "server", index, 5, offer)
    except BaseException:
        conn.close()
        raise


@pytest.mark.parametrize("purpose", ["step", "parity"])
@pytest.mark.parametrize(
    "offer,mac",
    [
        (link_handshake.MAC_OFFERED, link_handshake.MAC_GMAC),
        (link_handshake.MAC_HMAC, link_handshake.MAC_HMAC),
        (link_handshake.MAC_GMAC, link_handshake.MAC_GMAC),
    ],
)
def test_members_link_and_exchange_messages(purpose: str, offer: int, mac: int) -> None:
    listener = _Listener(purpose)
    try:
        conn, session = _open(listener, purpose, offer=offer)
        with conn:
            assert session.mac == mac
            session.send(conn.fileno(), b"hello", [np.arange(10_000, dtype=np.int64)], 5.0)
            head, buffers = session.receive(conn.fileno(), 5.0, 1 << 20)
            assert bytes(head) == b"hello" and buffers == []
        assert listener.hellos == [Hello(purpose, "server", offer, 3, 5)]
    finally:
        listener.close()


@pytest.mark.parametrize("ours,theirs", [("step", "parity"), ("parity", "step")])
def test_a_link_of_the_other_purpose_is_refused_naming_both(ours: str, theirs: str) -> None:
    listener = _Listener(ours)
    try:
        with pytest.raises(LinkBroken, match=f"refused this {theirs} link"):
            _open(listener, theirs)
        _wait(lambda: listener.refused == 1)
        (event,) = listener.events
        assert f"it opened a {theirs} link, and this listener takes {ours} links only" in event, event
        assert listener.hellos == []
    finally:
        listener.close()


def test_another_version_garbage_and_the_wrong_index_are_refused_saying_why() -> None:
    listener = _Listener("step")
    try:
        hello = bytearray(link_handshake.hello_bytes("step", "server", 3, 5))
        hello[4] = link_handshake.VERSION + 1
        for data in (
            bytes(hello),
            b"GET / HTTP/1.0\r\n\r\n" + b" " * 64,
            link_handshake.hello_bytes("step", "server", 4, 5),
        ):
            with socket.create_connection(listener.address, timeout=5.0) as conn:
                conn.sendall(data)
                assert _nothing_back(conn)  # not even a challenge
        _wait(lambda: listener.refused == 3)
        events = list(listener.events)
        assert (
            f"link handshake version {link_handshake.VERSION + 1}, this process speaks "
            f"{link_handshake.VERSION}" in events[0]
        )
        assert "not a direct link" in events[1] and "asked for index 4" in events[2], events
    finally:
        listener.close()


def test_a_stranger_and_an_impostor_listener_fail_the_proofs() -> None:
    listener = _Listener("parity")
    try:
        with pytest.raises(LinkBroken):  # a caller without the job's secret: refused after its proof
            _open(listener, "parity", secret=JobSecret.generate())
        _wait(lambda: listener.refused == 1)
        assert "failed authentication" in listener.events[0]
    finally:
        listener.close()
    impostor = socket.create_server(("127.0.0.1", 0))

    def impostor_answers() -> None:  # the handshake's bytes, with a proof it cannot make
        conn, _ = impostor.accept()
        with conn:
            conn.recv(link_handshake.HELLO.size, socket.MSG_WAITALL)
            conn.sendall(b"r" * link_handshake.NONCE + link_handshake.CHOICE.pack(link_handshake.MAC_GMAC))
            conn.recv(link_handshake.PROOF, socket.MSG_WAITALL)
            conn.sendall(b"f" * link_handshake.PROOF)
            conn.recv(1)

    thread = threading.Thread(target=impostor_answers, daemon=True)
    thread.start()
    try:
        with connect(*impostor.getsockname()[:2], timeout=5.0) as conn:
            with pytest.raises(LinkRefused, match="failed to prove it belongs to this job"):
                link_handshake.open_link(conn, SECRET, "parity", "server", 3, 5)
    finally:
        thread.join(5.0)
        impostor.close()


def test_a_peer_that_stalls_is_cut_off_at_the_handshakes_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(link_handshake, "HANDSHAKE_SECONDS", 0.3)
    listener = _Listener("step")
    try:
        with socket.create_connection(listener.address, timeout=5.0) as conn:
            conn.sendall(link_handshake.hello_bytes("step", "server", 3, 5)[:10])
            assert conn.recv(64) == b""
        _wait(lambda: listener.refused == 1)
        assert "did not complete the handshake within 0.3 s" in listener.events[0]
    finally:
        listener.close()


def test_every_link_connection_gets_the_same_options() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    accepted: List[socket.socket] = []
    thread = threading.Thread(target=lambda: accepted.append(server.accept()[0]))
    thread.start()
    with connect(*server.getsockname()[:2], timeout=5.0) as conn:
        thread.join()
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert conn.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 60
        assert conn.gettimeout() == 5.0
    accepted[0].close()
    server.close()
