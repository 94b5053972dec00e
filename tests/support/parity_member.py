"""A parity link's side of the protocol by hand (xdl_ec.ft.parity_link), as a captured genuine connection would show
it: the handshake (xdl_ec.net.link_handshake) byte by byte, then each request framed by a LinkSession into a socket
pair and sent from there, so every byte sent is recorded (a stranger can replay it) and can be altered on the
way."""

from __future__ import annotations

import hmac
import socket
import struct
from typing import Any, List, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.ft import parity_link
from xdl_ec.net import link_handshake
from xdl_ec.net.link_socket import recv_exactly


class ParityMember:
    """A member of the job (it holds ``secret``) linked as ``sender`` to ``holder``'s receiver at ``address``."""

    def __init__(
        self, address: Tuple[str, int], secret: Any, sender: int = 0, holder: int = 1, timeout: float = 10.0
    ) -> None:
        self.sent = b""
        self.conn = socket.create_connection(address, timeout=timeout)
        hello = link_handshake.hello_bytes("parity", "server", holder, sender, parity_link._MAC)
        self._send(hello)
        answer = bytes(recv_exactly(self.conn, link_handshake.NONCE + link_handshake.CHOICE.size))
        nonce, choice = answer[: link_handshake.NONCE], answer[link_handshake.NONCE :]
        assert link_handshake.CHOICE.unpack(choice) == (parity_link._MAC,), choice
        link_proof, receiver_proof, self._key = link_handshake.proofs(secret, hello, nonce, choice)
        self._send(link_proof)
        if bytes(recv_exactly(self.conn, link_handshake.PROOF)) != receiver_proof:
            raise AssertionError(f"the receiver at {address} did not prove the job's secret")
        self.session = _core.LinkSession(self._key, parity_link._MAC, True)
        self.sender, self.holder = sender, holder
        self.timeout = timeout

    def _send(self, data: bytes) -> None:
        self.sent += data
        self.conn.sendall(data)

    def framed(self, batches: bytes, durable: int = 0) -> bytes:
        """The wire bytes of the next request carrying ``batches`` (the session counts it as sent)."""
        return self.message(
            parity_link._REQUEST.pack(self.holder, self.sender, durable), [np.frombuffer(batches, np.uint8)]
        )

    def message(self, head: bytes, buffers: List[np.ndarray]) -> bytes:
        """The wire bytes of the next message, of any form (the session counts it as sent)."""
        a, b = socket.socketpair()
        with a, b:
            for s in (a, b):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            size = self.session.send(a.fileno(), head, buffers, 5.0)
            return bytes(recv_exactly(b, size))

    def request(self, batches: bytes, alter: bool = False) -> bytes:
        """Sends a request carrying ``batches``, with one bit of them flipped on the way if ``alter``; returns the
        bytes sent."""
        wire = bytearray(self.framed(batches))
        if alter:
            wire[-33] ^= 1  # the body's last byte, right before its MAC
        self._send(bytes(wire))
        return bytes(wire)

    def header_tag(self, header: bytes) -> bytes:
        """The MAC the next message's 20-byte LinkSession ``header`` carries (link_session.h), computed here."""
        return hmac.digest(self._key, b"CH" + struct.pack("<Q", self.session.sent) + header, "sha256")

    def announce(self, body_bytes: int) -> None:
        """Sends only an authenticated header announcing a body of ``body_bytes`` (one buffer), as a member whose
        batches outgrew the receiver's limit would start its request."""
        header = struct.pack("<QIQ", parity_link._REQUEST.size, 1, body_bytes)
        self._send(header + self.header_tag(header))

    def answer(self) -> Tuple[int, int, str]:
        """(status, applied, error) of the next answer."""
        head, _ = self.session.receive(self.conn.fileno(), self.timeout, 1 << 20)
        status, applied = parity_link._ANSWER.unpack_from(head)
        return status, applied, bytes(head[parity_link._ANSWER.size :]).decode()
