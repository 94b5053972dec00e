"""The one handshake every xdl-ec TCP link opens with, the step's direct links (:mod:`xdl_ec.ps.direct`, purpose
``step``) and the parity links (:mod:`xdl_ec.ft.parity_link`, purpose ``parity``): a mutual challenge-response under
the job's :class:`~xdl_ec.net.job_secret.JobSecret` K (as Ceph's cephx does) that proves both ends are members of
the job, agrees on the messages' MAC and gives the connection a session key of its own.

- caller -> listener ``hello`` = ``<4sBBBBii32s`` (magic ``XDLK``, :data:`VERSION`, purpose 0 step / 1 parity,
  role 0 server / 1 worker, the MACs it offers (bits: 1 HMAC-SHA256, 2 AES-GMAC), the index it asks for (a role's
  index, a parity holder), the caller's id (a worker's index, -1 the driver, a parity sender), nonce Nc); the
  listener checks magic, version and purpose, then that it is what the caller asked for (the listener's own
  check: its role and index, the layout's links); a link of one purpose reaching a listener of the other is
  refused, naming both;
- listener -> caller: nonce Nr (32 bytes) and the MAC it chose M (one byte: GMAC when both ends offer it);
- caller -> listener: ``HMAC(K, "xdl-ec link caller proof" | hello | Nr | M)``; the listener closes unless it matches;
- listener -> caller: ``HMAC(K, "xdl-ec link listener proof" | hello | Nr | M)``; the caller gives up unless it
  matches (an impostor listener learns nothing and is sent nothing).

Both then frame and MAC their messages under ``S = HMAC(K, "xdl-ec link session" | hello | Nr | M)`` (fresh
nonces: a key of its own per connection) through the native :class:`xdl_ec._core.LinkSession` (one framing for
both purposes; ``cpp/include/xdl_ec/link_session.h``). The hello is inside every proof and the key, so a proof made
for one purpose, role, index or caller never passes for another. A peer that fails the handshake gets nothing back
but the challenge (no error text) and a closed connection; the listener logs why (:class:`PeerRefused`).
"""

from __future__ import annotations

import hmac
import secrets
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable, Tuple

from xdl_ec import _core
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.net.link_listener import PeerRefused
from xdl_ec.net.link_socket import LinkBroken, recv_exactly

MAGIC = b"XDLK"
# The handshake's version: 1 is the first form shared by both purposes (the step's links spoke XDL1 before, the
# parity links XEA2). A peer of another version is refused with both versions named.
VERSION = 1
PURPOSES = ("step", "parity")  # their codes are their positions
ROLES = ("server", "worker")
# What a refused peer's warning calls a link of each purpose ("not a parity link").
NOUNS = {"step": "direct link", "parity": "parity link"}
HELLO = struct.Struct("<4sBBBBii32s")  # magic, version, purpose, role, MACs offered, index, caller, caller nonce
NONCE = 32
PROOF = 32  # HMAC-SHA256
CHOICE = struct.Struct("<B")  # the MAC the listener chose

# Message MACs (LinkSession): HMAC-SHA256, or for bodies of 16 KiB and more AES-GMAC (AES-256-GCM over no
# plaintext, header and body as its associated data): ~25 GB/s instead of ~2.
MAC_HMAC, MAC_GMAC = 1, 2
MAC_OFFERED = MAC_HMAC | MAC_GMAC

# A peer has this long, from connecting, to complete the handshake (a peer trickling bytes is cut off then).
HANDSHAKE_SECONDS = 10.0


class LinkRefused(RuntimeError):
    """The listener behind a link failed to prove it belongs to this job, or chose a MAC this end did not offer."""


@dataclass(frozen=True)
class Hello:
    """A caller's hello as the listener read it (its bytes are in every proof)."""

    purpose: str
    role: str
    offered: int
    index: int
    caller: int


def proofs(secret: JobSecret, hello: bytes, nonce: bytes, choice: bytes) -> Tuple[bytes, bytes, bytes]:
    """(caller proof, listener proof, session key) of one handshake."""
    return (
        secret.mac(b"xdl-ec link caller proof", hello, nonce, choice),
        secret.mac(b"xdl-ec link listener proof", hello, nonce, choice),
        secret.mac(b"xdl-ec link session", hello, nonce, choice),
    )


def hello_bytes(
    purpose: str, role: str, index: int, caller: int, offer: int = MAC_OFFERED, nonce: bytes = b""
) -> bytes:
    """A caller's hello (a fresh nonce unless ``nonce`` is given)."""
    return HELLO.pack(
        MAGIC,
        VERSION,
        PURPOSES.index(purpose),
        ROLES.index(role),
        offer,
        index,
        caller,
        nonce or secrets.token_bytes(NONCE),
    )


def choose(offered: int) -> int:
    """The MAC a listener uses with a caller that offered ``offered`` (bits): GMAC when both have it, 0 if none."""
    common = offered & MAC_OFFERED
    return MAC_GMAC if common & MAC_GMAC else MAC_HMAC if common & MAC_HMAC else 0


def open_link(
    conn: socket.socket, secret: JobSecret, purpose: str, role: str, index: int, caller: int, offer: int = MAC_OFFERED
) -> Any:
    """The caller's side of the handshake on ``conn`` (connected); returns the connection's LinkSession.

    LinkRefused when the listener fails its proof; socket.timeout past :data:`HANDSHAKE_SECONDS`; LinkBroken when
    the listener closes the connection (it refused this link: its log says why)."""
    hello = hello_bytes(purpose, role, index, caller, offer)
    deadline = time.monotonic() + HANDSHAKE_SECONDS
    conn.sendall(hello)
    try:
        answer = bytes(recv_exactly(conn, NONCE + CHOICE.size, deadline))
        nonce, choice = answer[:NONCE], answer[NONCE:]
        caller_proof, listener_proof, key = proofs(secret, hello, nonce, choice)
        conn.sendall(caller_proof)
        proven = hmac.compare_digest(bytes(recv_exactly(conn, PROOF, deadline)), listener_proof)
    except LinkBroken as err:
        raise LinkBroken(
            f"the listener closed the connection during the handshake: it refused this {purpose} link "
            f"(an address of another kind, a stale one, or of another job: its log says why; {err})"
        ) from None
    if not proven:
        raise LinkRefused("the listener failed to prove it belongs to this job (it does not hold the job's secret)")
    (algorithm,) = CHOICE.unpack(choice)
    if not algorithm & offer:
        raise LinkRefused(f"the listener chose MAC {algorithm}, not one offered ({offer})")
    conn.settimeout(None)
    return _core.LinkSession(key, algorithm, True)


def accept_link(
    conn: socket.socket, peer: str, secret: JobSecret, purpose: str, admit: Callable[[Hello], None]
) -> Tuple[Any, Hello]:
    """The listener's side of the handshake on ``conn`` (accepted from ``peer``) for links of ``purpose``;
    ``admit(hello)`` raises :class:`PeerRefused` unless this listener is what the hello asks for. Returns the
    connection's LinkSession and the hello; PeerRefused (saying why) for a peer that fails the handshake."""
    deadline = time.monotonic() + HANDSHAKE_SECONDS
    try:
        magic = bytes(recv_exactly(conn, len(MAGIC), deadline))  # the magic first: garbage ends here at once
        if magic != MAGIC:
            raise PeerRefused(f"refused {peer}: not a {NOUNS[purpose]} (it did not open with the link handshake)")
        hello = magic + bytes(recv_exactly(conn, HELLO.size - len(MAGIC), deadline))
        _, version, purpose_code, role_code, offered, index, caller, _ = HELLO.unpack(hello)
        if version != VERSION:
            raise PeerRefused(
                f"refused {peer}: it speaks link handshake version {version}, this process speaks "
                f"{VERSION} (processes of two xdl-ec versions in one job?)"
            )
        if purpose_code >= len(PURPOSES) or role_code >= len(ROLES):
            raise PeerRefused(
                f"refused {peer}: its hello names purpose {purpose_code} and role {role_code}, not "
                f"one of {PURPOSES} and {ROLES}"
            )
        theirs = PURPOSES[purpose_code]
        if theirs != purpose:
            raise PeerRefused(
                f"refused {peer}: it opened a {theirs} link, and this listener takes {purpose} links "
                f"only (it was given the address of a {NOUNS[purpose]} listener for a "
                f"{NOUNS[theirs]})"
            )
        said = Hello(theirs, ROLES[role_code], offered, index, caller)
        admit(said)
        algorithm = choose(offered)
        if not algorithm:
            raise PeerRefused(f"refused {peer}: it offered no MAC this listener knows (bits {offered})")
        nonce = secrets.token_bytes(NONCE)
        choice = CHOICE.pack(algorithm)
        conn.sendall(nonce + choice)
        caller_proof, listener_proof, key = proofs(secret, hello, nonce, choice)
        if not hmac.compare_digest(bytes(recv_exactly(conn, PROOF, deadline)), caller_proof):
            raise PeerRefused(
                f"refused {peer} (caller {caller}): it failed authentication (it does not hold the "
                f"job's secret, or replayed another connection's handshake)"
            )
        conn.sendall(listener_proof)
    except socket.timeout:
        raise PeerRefused(f"refused {peer}: it did not complete the handshake within {HANDSHAKE_SECONDS:g} s") from None
    except LinkBroken as err:
        raise PeerRefused(f"refused {peer}: it closed the connection during the handshake ({err})") from None
    conn.settimeout(None)
    return _core.LinkSession(key, algorithm, False), said
