"""The native LinkSession (xdl_ec._core, cpp/src/link_session.cc) frames and MACs a direct link's messages exactly
as xdl_ec.ps.direct documents them: checked here against an independent computation of the wire bytes (hmac, and
AES-GMAC with the ``cryptography`` package where it is installed), and its errors surface as the link's."""

from __future__ import annotations

import hmac
import socket
import struct

import numpy as np
import pytest

from xdl_ec import _core
from xdl_ec.net.link_listener import PeerRefused
from xdl_ec.net.link_socket import LinkBroken
from xdl_ec.ps import direct

KEY = bytes(range(32))


def _pair() -> tuple:
    a, b = socket.socketpair()
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return a, b


def _drain(conn: socket.socket) -> bytes:
    conn.setblocking(False)
    out = b""
    try:
        while chunk := conn.recv(1 << 20):
            out += chunk
    except BlockingIOError:
        pass
    conn.setblocking(True)
    return out


def _expected_tag(mac: int, label: bytes, counter: int, signed: bytes) -> bytes:
    """The payload MAC of ``signed`` (header | body) as the module docstring of xdl_ec.ps.direct defines it."""
    if mac == direct.MAC_GMAC and len(signed) - 20 >= 16 << 10:
        aead = pytest.importorskip(
            "cryptography.hazmat.primitives.ciphers.aead",
            reason="the AES-GMAC cross-check needs the cryptography package",
        )
        gmac_key = hmac.digest(KEY, b"xdl-ec direct gmac key", "sha256")
        nonce = label + b"P\0\0" + struct.pack("<Q", counter)
        return aead.AESGCM(gmac_key).encrypt(nonce, b"", signed) + bytes(16)
    return hmac.digest(KEY, label + b"P" + struct.pack("<Q", counter) + signed, "sha256")


@pytest.mark.parametrize("mac", [direct.MAC_HMAC, direct.MAC_GMAC])
@pytest.mark.parametrize("array_bytes", [0, 100, 40000])
def test_wire_bytes_are_the_documented_form(mac: int, array_bytes: int) -> None:
    a, b = _pair()
    with a, b:
        session = _core.LinkSession(KEY, mac, True)
        pickle_bytes = b"p" * 13
        arrays = [np.arange(array_bytes, dtype=np.uint8), np.frombuffer(b"seven!!", np.uint8)]
        for counter in range(2):  # the counter is part of every MAC
            sent = session.send(a.fileno(), pickle_bytes, [memoryview(x) for x in arrays])
            wire = _drain(b)
            assert sent == len(wire)
            header = wire[:20]
            assert struct.unpack("<QIQ", header)[:2] == (13, 2)
            total = struct.unpack("<QIQ", header)[2]
            assert wire[20:52] == hmac.digest(KEY, b"CH" + struct.pack("<Q", counter) + header, "sha256")
            body = wire[52 : 52 + total]
            assert len(wire) == 52 + total + 32
            lengths = struct.unpack("<2Q", body[:16])
            assert lengths == (array_bytes, 7) and body[16:29] == pickle_bytes
            first = 29 + (-29 % 64)
            second = first + array_bytes + (-(first + array_bytes) % 64)
            assert body[first : first + array_bytes] == arrays[0].tobytes()
            assert body[second : second + 7] == b"seven!!" and total == second + 7
            assert set(body[29:first]) <= {0} and set(body[first + array_bytes : second]) <= {0}
            assert wire[-32:] == _expected_tag(mac, b"C", counter, header + body)


def test_received_arrays_are_aligned_writable_views_of_one_message() -> None:
    a, b = _pair()
    with a, b:
        caller, role = _core.LinkSession(KEY, direct.MAC_GMAC, True), _core.LinkSession(KEY, direct.MAC_GMAC, False)
        rows = np.random.default_rng(0).standard_normal((700, 16)).astype(np.float32)
        keys = np.arange(700, dtype=np.int64)
        direct.send_message(a, caller, ("push_pull", (keys, rows)))
        method, (got_keys, got_rows) = direct.recv_message(b, role)
        assert method == "push_pull"
        np.testing.assert_array_equal(got_keys, keys)
        np.testing.assert_array_equal(got_rows, rows)
        for x in (got_keys, got_rows):
            assert x.flags.writeable and x.ctypes.data % 64 == 0
        assert role.received == 1 and caller.sent == 1


def test_errors_are_the_links_own() -> None:
    a, b = _pair()
    with a, b:
        caller, role = _core.LinkSession(KEY, direct.MAC_HMAC, True), _core.LinkSession(KEY, direct.MAC_HMAC, False)
        with pytest.raises(socket.timeout, match="timed out after 0 of 52 bytes"):
            direct.recv_message(b, role, deadline=0.0)
        direct.send_message(a, caller, np.zeros(5000, np.uint8))
        with pytest.raises(PeerRefused, match="at most 1000 bytes"):
            direct.recv_message(b, role, max_payload=1000)
    a, b = _pair()
    with a, b:
        caller, role = _core.LinkSession(KEY, direct.MAC_HMAC, True), _core.LinkSession(KEY, direct.MAC_HMAC, False)
        a.sendall(b"\0" * 30)  # part of a header, then the peer is gone
        a.close()
        with pytest.raises(LinkBroken, match="connection closed after 30 of 52 bytes"):
            direct.recv_message(b, role)
    with pytest.raises(ValueError, match="32 bytes, got 31"):
        _core.LinkSession(KEY[:31], direct.MAC_HMAC, True)
    with pytest.raises(ValueError, match="mac must be 1"):
        _core.LinkSession(KEY, 3, True)


def test_a_send_with_a_timeout_ends_when_the_peer_stops_reading() -> None:
    a, b = _pair()
    with a, b:
        caller = _core.LinkSession(KEY, direct.MAC_GMAC, True)
        with pytest.raises(_core.LinkTimeout, match="the peer stopped reading"):
            caller.send(a.fileno(), b"p", [np.zeros(32 << 20, np.uint8)], 0.1)  # nobody reads b
        assert caller.sent == 0
        caller = _core.LinkSession(KEY, direct.MAC_GMAC, True)
        a2, b2 = _pair()
        with a2, b2:
            caller.send(a2.fileno(), b"p", [np.zeros(1000, np.uint8)], 5.0)  # room enough: sent as without one
            role = _core.LinkSession(KEY, direct.MAC_GMAC, False)
            data, buffers = role.receive(b2.fileno(), 5.0, 1 << 20)
            assert bytes(data) == b"p" and buffers[0].nbytes == 1000
    assert issubclass(_core.LinkOversized, _core.LinkRejected)
