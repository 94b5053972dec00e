"""Benchmark: what a parity link's membership and framing cost a send: a send's round trip over loopback through
xdl_ec.ft.parity_link (the native receive loop: framing, MACs, a deadline on each side, the holder's answer) against
the same payload over a plain socket to a receiver that reads it and answers 9 bytes (no framing beyond a length,
no MACs), interleaved in the same run. The payload is a real send (one push of --keys keys, serialised as a link
takes it from its forwarder); the holder applies the first and skips the others as resends (a parse), so the
round trip is mostly the link's own work. Not a test. (bench_parity_leg.py measures the CPU of the whole leg.)

    PYTHONPATH=build/stage python3 -P bench/bench_parity_link.py [--repeats 9] [--sends 200]
                                                                [--keys 16,256,4096]

Prints, per payload size, the median round trip of both and the added microseconds per send and per MiB; then
the CPU a k=4, r=1 server would spend on it at a given send size: a server has k + r - 1 = 4 links and receives
from 4 senders, one send per link per second (SEND_INTERVAL) or as drained; pass the send sizes seen in a run
(``remote_send_bytes / remote_sends`` of the ec report) with --per-send-bytes to convert.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import threading
import time
from typing import Any, List, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.ft import parity_link
from xdl_ec.net import link_handshake
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.net.link_socket import connect, recv_exactly

SECRET = JobSecret.generate()
_LENGTH = struct.Struct("<Q")


N, K, R = 3, 2, 1


def _holder_and_payload(keys: int) -> Tuple[Any, np.ndarray]:
    """Holder 1 of a (2, 1) code over 3 servers, and server 0's serialised batches of one push of ``keys`` keys."""
    from xdl_ec.sparse import init, optim

    config = _core.ShardConfig()
    config.dim, config.seed, config.block_slots = 16, 5, 64
    config.optimizer = optim.Adagrad(0.1).to_config()
    config.initializer = init.RandomUniform(-0.1, 0.1).to_config()
    shard = _core.EmbeddingShard(config)
    bs, rb = int(shard.block_slots), int(shard.record_bytes)
    forwarder = _core.DeltaForwarder(0, N, K, R, {"t": (bs, rb)})
    try:
        link = forwarder.set_holder(1, None)
        rng = np.random.default_rng(keys)
        shard.push(
            rng.choice(50 * keys, keys, replace=False).astype(np.int64),
            rng.standard_normal((keys, 16)).astype(np.float32),
            1,
            forwarder=forwarder,
            table="t",
            pushes={0: 1},
        )
        forwarder.flush()
        taken = forwarder.take(1, link, 5.0)
        if taken is None:
            raise RuntimeError("the forwarder had nothing to send")
    finally:
        forwarder.close()
    return _core.ParityHolder(1, N, K, R, {"t": bs * rb}), taken[0]


class _PlainReceiver:
    """The baseline's receiver: a length, the payload read into a fresh buffer, a 9-byte answer."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = self._listener.getsockname()[:2]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._converse, args=(conn,), daemon=True).start()

    @staticmethod
    def _converse(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            try:
                while True:
                    size = _LENGTH.unpack(recv_exactly(conn, _LENGTH.size))[0]
                    recv_exactly(conn, size)
                    conn.sendall(parity_link._ANSWER.pack(0, 1))
            except (OSError, ConnectionError):
                return

    def close(self) -> None:
        self._listener.close()


def _linked(address: Tuple[str, int]) -> Tuple[socket.socket, Any]:
    """A member's connection: the links' handshake, then its LinkSession (as RemoteHolderLink makes them)."""
    conn = connect(*address)
    session = link_handshake.open_link(conn, SECRET, "parity", "server", 1, 0, parity_link._MAC)
    conn.settimeout(parity_link.CALL_TIMEOUT)
    return conn, session


def _send_linked(conn: socket.socket, session: Any, payload: np.ndarray) -> None:
    """RemoteHolderLink._send's exchange."""
    fd = conn.fileno()
    session.send(fd, parity_link._REQUEST.pack(1, 0, 0), [payload], parity_link.CALL_TIMEOUT)
    head, _ = session.receive(fd, parity_link.CALL_TIMEOUT, 1 << 20)
    if parity_link._ANSWER.unpack_from(head)[0] != 0:
        raise RuntimeError("the receiver refused the send")


def _send_plain(conn: socket.socket, session: Any, payload: np.ndarray) -> None:
    conn.sendall(_LENGTH.pack(payload.nbytes))
    conn.sendall(payload)
    recv_exactly(conn, parity_link._ANSWER.size)


def _timed(send: Any, sends: int, payload: np.ndarray, conn: socket.socket, session: Any) -> float:
    start = time.perf_counter()
    for _ in range(sends):
        send(conn, session, payload)
    return (time.perf_counter() - start) / sends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sends", type=int, default=200)
    parser.add_argument("--keys", default="16,256,4096", help="keys pushed per send, comma-separated")
    parser.add_argument(
        "--per-send-bytes",
        type=float,
        default=None,
        help="mean bytes per send of a real run, to print the CPU share at one send per link per s",
    )
    args = parser.parse_args()
    plain = _PlainReceiver()
    try:
        per_mib: List[float] = []
        sizes: List[int] = []
        print(f"{'keys':>6} {'bytes':>9} {'link us':>9} {'plain us':>9} {'added us':>9} {'added/MiB us':>13}")
        for keys in [int(k) for k in args.keys.split(",")]:
            holder, payload = _holder_and_payload(keys)
            size = int(payload.nbytes)
            sizes.append(size)
            receiver = parity_link.ParityReceiver(holder, SECRET, host="127.0.0.1")
            on: List[float] = []
            off: List[float] = []
            for repeat in range(args.repeats):
                for linked in (True, False) if repeat % 2 == 0 else (False, True):
                    if linked:  # the handshake outside the timed span
                        conn, session = _linked(receiver.address)
                    else:
                        conn, session = socket.create_connection(plain.address), None
                        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    send = _send_linked if linked else _send_plain
                    try:
                        send(conn, session, payload)  # warm
                        (on if linked else off).append(_timed(send, args.sends, payload, conn, session))
                    finally:
                        conn.close()
            receiver.close()
            a, b = statistics.median(on) * 1e6, statistics.median(off) * 1e6
            per_mib.append((a - b) / (size / 2**20))
            print(f"{keys:>6} {size:>9} {a:>9.1f} {b:>9.1f} {a - b:>9.1f} {(a - b) / (size / 2**20):>13.0f}")
        start = time.perf_counter()
        for _ in range(1000):
            SECRET.mac(b"x", b"h" * link_handshake.HELLO.size, b"n" * 33)
        handshake_us = (time.perf_counter() - start) / 1000 * 3 * 1e6
        print(f"handshake MACs (3 per side): {handshake_us:.1f} us, once per connection")
        if args.per_send_bytes is not None:
            # added(s) = fixed + s * per_byte, fitted through the smallest and largest sizes
            small, large = sizes[0], sizes[-1]
            added_small, added_large = per_mib[0] * small / 2**20, per_mib[-1] * large / 2**20
            per_byte = (added_large - added_small) / (large - small)
            cost = added_small + (args.per_send_bytes - small) * per_byte
            # a send's round trip holds both ends' work; a server has 4 links out and 4 senders in, a send per
            # link per second: 4 sends' worth of both ends
            print(
                f"at {args.per_send_bytes:,.0f} B per send and one send per link per second, a k=4 r=1 server "
                f"spends {4 * cost:.0f} us of CPU per second on it = {4 * cost / 1e4:.3f}% of one core"
            )
    finally:
        plain.close()


if __name__ == "__main__":
    main()
