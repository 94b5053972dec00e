"""A process outside an xdl-ec job that attacks its parity receivers (a stranger on the network), and a member's genuine
exchange to record for it to replay.

Run as a program: ``python stranger.py ATTACKS_JSON`` where the JSON is a list of {"host", "port", "holder",
"sender" (a real sender the holder protects), "servers" (the job's server count), "replay" (hex of a recorded
genuine connection)}; it prints a JSON list with, per listener, what each attempt got back (bytes) and how long the
trickling connection lasted. Attempts: (a) a well-formed batch from a sender the job does not have, in the old wire
form and through the handshake, (b) a real sender id at a far seq without the secret, (c) the replay, (d) random
bytes, (e) a header claiming 2^60 payload bytes, (f) one byte a second."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time
from typing import Any, Dict, List, Tuple

# the links' handshake as xdl_ec.net.link_handshake defines it: magic, version, purpose, role, MACs offered, index
# asked for (the holder), caller (the sender), nonce
HELLO = struct.Struct("<4sBBBBii32s")
MAGIC = b"XDLK"
VERSION = 1
PARITY = 1  # the purpose's code


def hello(sender: int, holder: int) -> bytes:
    """A parity link's hello from ``sender`` to ``holder`` (offering AES-GMAC, as a link does)."""
    return HELLO.pack(MAGIC, VERSION, PARITY, 0, 2, holder, sender, os.urandom(32))


REQUEST = struct.Struct("<iiqQ")  # a request of the first wire form: plain TCP, no handshake


def _update(source: int, holder: int, blocks: int, record_bytes: int = 8) -> bytes:
    """An "XPU1" ParityUpdate XOR-ing one byte into parity blocks 0..blocks-1 (what the issue's stranger sent)."""
    entries = b"".join(struct.pack("<QIBB", c, 0, 0, 0) for c in range(blocks))
    deltas = (b"\x01" + b"\x00" * (record_bytes - 1)) * blocks
    return b"XPU1" + struct.pack("<IIIQ", source, holder, record_bytes, blocks) + entries + deltas


def _batches(seq: int, table: str, update: bytes) -> bytes:
    """An "XFB2" list of one batch of seq ``seq`` with one update."""
    name = table.encode()
    return (
        b"XFB2"
        + struct.pack("<Q", 1)
        + struct.pack("<qqI", seq, seq, 1)
        + struct.pack("<iq", 0, seq)
        + struct.pack("<I", 1)
        + struct.pack("<I", len(name))
        + name
        + struct.pack("<Q", len(update))
        + update
    )


def _attempt(address: Tuple[str, int], data: bytes, seconds: float = 20.0) -> int:
    """Sends ``data`` and returns how many bytes came back before the receiver closed (-1: still open)."""
    got = 0
    try:
        with socket.create_connection(address, timeout=seconds) as conn:
            try:
                conn.sendall(data)
            except OSError:
                return got
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return got
                got += len(chunk)
    except ConnectionResetError:
        return got
    except socket.timeout:
        return -1


def _trickle(address: Tuple[str, int], data: bytes, out: Dict[str, Any]) -> None:
    """One byte a second until the receiver closes the connection."""
    start = time.monotonic()
    got = 0
    with socket.create_connection(address, timeout=30.0) as conn:
        conn.settimeout(1.0)
        for byte in data:
            try:
                conn.sendall(bytes([byte]))
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got += len(chunk)
            except socket.timeout:
                continue
            except OSError:
                break
    out["trickle_bytes"] = got
    out["trickle_seconds"] = time.monotonic() - start


def attack(target: Dict[str, Any]) -> Dict[str, Any]:
    address = (target["host"], int(target["port"]))
    holder, sender, servers = int(target["holder"]), int(target["sender"]), int(target["servers"])
    stranger = servers + 2  # a sender the job does not have (7 in the 5-server job)
    batch = _batches(1, "emb", _update(stranger, holder, 200))
    out: Dict[str, Any] = {"holder": holder}
    trickler = threading.Thread(target=_trickle, args=(address, hello(sender, holder), out))
    trickler.start()
    out["a_old_form"] = _attempt(address, REQUEST.pack(holder, stranger, 0, len(batch)) + batch)
    out["a_handshake"] = _attempt(address, hello(stranger, holder) + os.urandom(32))
    far = _batches(1_000_000, "emb", _update(sender, holder, 200))
    out["b_no_secret"] = _attempt(
        address,
        hello(sender, holder) + os.urandom(32) + REQUEST.pack(holder, sender, 0, len(far)) + os.urandom(32) + far,
    )
    out["c_replay"] = _attempt(address, bytes.fromhex(target["replay"]))
    out["d_random"] = _attempt(address, os.urandom(65536))
    out["e_huge_header"] = _attempt(address, REQUEST.pack(holder, sender, 0, 1 << 60))
    trickler.join()
    return out


def genuine_exchange(address: Tuple[str, int], secret: Any, sender: int, holder: int, payload: bytes) -> bytes:
    """What a member's link sends on one connection (handshake, then one request carrying ``payload``), as a stranger
    could record it on the network; the answer must be status 0 (so ``payload`` should be a resend)."""
    from support.parity_member import ParityMember

    member = ParityMember(address, secret, sender, holder)
    with member.conn:
        member.request(payload)
        status, _, error = member.answer()
        if status != 0:
            raise AssertionError(f"the genuine request was refused: {error!r}")
    return member.sent


def main(argv: List[str]) -> int:
    targets = json.loads(argv[1])
    results: List[Dict[str, Any]] = [{} for _ in targets]

    def run(i: int) -> None:
        results[i] = attack(targets[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(targets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
