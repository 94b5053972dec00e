"""Only the job's members get into a ParityReceiver (xdl_ec.ft.parity_link): a stranger's bytes, a forged or
replayed handshake, an altered or replayed request, an oversized header or a trickle all end in a closed connection
that told the peer nothing (no seq, no error text), a warning naming the peer, and a holder left exactly as it was.
A member's bad batch is answered with its error. Real receivers, links and holders over loopback; the stranger
speaks the wire form by hand."""

from __future__ import annotations

import logging
import pickle
import socket
import struct
import threading
import time
from typing import Any, List, Tuple

import numpy as np
import pytest

from support import stranger
from support.parity_member import ParityMember
from support.parity_shards import small_shard
from xdl_ec import _core
from xdl_ec.ft import parity_link
from xdl_ec.ft.parity_link import ParityReceiver, RemoteHolderLink
from xdl_ec.net import link_handshake, link_listener
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.net.link_socket import LinkBroken, connect
from xdl_ec.ps.backend import Handle

N, K, R = 3, 2, 1
SECRET = JobSecret.generate()


class _AddressHandle(Handle):
    role = "server"

    def __init__(self, index: int, address: Tuple[str, int]) -> None:
        self.index, self.address = index, address

    def call(self, method: str, *args: Any) -> Any:
        import concurrent.futures

        future: concurrent.futures.Future = concurrent.futures.Future()
        assert args == ("parity_address",), args
        future.set_result(self.address)
        return future


def _genuine_batches(steps: int = 3) -> Tuple[List[np.ndarray], Any, Any]:
    """Server 0's real batches for holder 1 (serialised by its DeltaForwarder), one take per step."""
    shards = [small_shard() for _ in range(N)]
    bs, rb = int(shards[0].block_slots), int(shards[0].record_bytes)
    forwarder = _core.DeltaForwarder(0, N, K, R, {"t": (bs, rb)})
    link = forwarder.set_holder(1, None)
    rng = np.random.default_rng(7)
    out = []
    for step in range(1, steps + 1):
        keys = np.unique(rng.integers(0, 40, 10).astype(np.int64))
        shards[0].push(
            keys,
            rng.standard_normal((keys.size, 4)).astype(np.float32),
            step,
            forwarder=forwarder,
            table="t",
            pushes={0: step},
        )
        taken = forwarder.take(1, link, 5.0)
        assert taken is not None
        out.append(np.array(taken[0]))
        forwarder.ack(1, link, int(forwarder.seq))
    forwarder.close()
    return out, bs, rb


def _holder(bs: int, rb: int) -> Any:
    return _core.ParityHolder(1, N, K, R, {"t": bs * rb})


def _blocks(holder: Any, rb: int) -> List[bytes]:
    return [holder.read_block("t", c, rb, 0, rb)[0].tobytes() for c in range(holder.num_blocks("t"))]


def _read_all(conn: socket.socket, seconds: float = 5.0) -> bytes:
    """Everything the receiver sends until it closes the connection (fails if it stays open). A close with our
    bytes still unread in its buffer arrives as a reset: closed all the same."""
    conn.settimeout(seconds)
    got = b""
    while True:
        try:
            chunk = conn.recv(65536)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk


@pytest.fixture
def receiver() -> Any:
    batches, bs, rb = _genuine_batches()
    holder = _holder(bs, rb)
    rx = ParityReceiver(holder, SECRET, host="127.0.0.1")
    yield rx, holder, batches, rb
    rx.close()


def _wait(condition: Any, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_job_secret_never_shows_its_key_and_travels_by_pickle() -> None:
    secret = JobSecret.generate()
    key = secret._key
    assert len(key) == 32 and JobSecret.generate() != secret
    for text in (repr(secret), str(secret), f"{secret}", repr([secret]), repr({"s": secret})):
        assert key.hex() not in text and repr(key) not in text and "hidden" in text
    assert pickle.loads(pickle.dumps(secret)) == secret
    with pytest.raises(ValueError, match="at least 32 random bytes, got 16"):
        JobSecret(b"x" * 16)
    with pytest.raises(TypeError, match="key must be bytes"):
        JobSecret("a string of more than thirty-two characters")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="secret must be the job's JobSecret"):
        ParityReceiver(_holder(8, 8), b"k" * 32, host="127.0.0.1")  # type: ignore[arg-type]


def test_a_member_applies_and_strangers_get_a_closed_connection_and_a_warning(
    receiver: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rx, holder, batches, rb = receiver
    caplog.set_level(logging.WARNING, logger="xdl_ec.ft.parity_link")
    member = ParityMember(rx.address, SECRET)
    member.request(batches[0].tobytes())
    assert member.answer() == (0, 1, "")
    captured = member.sent
    after_genuine, applied = _blocks(holder, rb), holder.applied_all()
    assert applied == {0: 1}
    forged = _core.parse_batches(batches[1])
    wire = _core.serialize_batches([(1, forged[0][1], {0: 1})])  # a well-formed batch at seq 1 ...

    def attempt(data: bytes) -> bytes:
        with socket.create_connection(rx.address, timeout=5.0) as conn:
            conn.sendall(data)
            return _read_all(conn)

    # (a) a well-formed batch in the first wire form (no handshake), from sender 7 (the job has 3 servers): nothing
    assert attempt(stranger.REQUEST.pack(1, 7, 0, wire.nbytes) + wire.tobytes()) == b""
    # ... and through the handshake, claiming sender 7: nothing back either
    assert attempt(stranger.hello(7, 1)) == b""
    # (b) a real sender id at the next seq without the secret: its nonce challenge (and MAC choice) only, then closed
    assert len(attempt(stranger.hello(0, 1) + b"p" * 32 + wire.tobytes())) == 33
    # (c) a replay of the captured genuine connection: a fresh challenge the old proof does not answer
    assert len(attempt(captured)) == 33
    # (d) random bytes
    assert attempt(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes()) == b""
    # (e) a header claiming 2^60 payload bytes: nothing is allocated for it, nothing comes back
    assert attempt(stranger.REQUEST.pack(1, 0, 0, 1 << 60)) == b""
    # (f) one byte at a time, slower than the handshake allows
    monkeypatch.setattr(link_handshake, "HANDSHAKE_SECONDS", 0.6)
    start = time.monotonic()
    with socket.create_connection(rx.address, timeout=5.0) as conn:
        closed = False
        for byte in stranger.hello(0, 1):
            try:
                conn.sendall(bytes([byte]))
                time.sleep(0.2)
            except OSError:
                closed = True
                break
        if not closed:
            assert _read_all(conn) == b""
    assert time.monotonic() - start < 5.0
    _wait(lambda: rx.refused >= 7, f"not every attempt was refused: {list(rx.events)}")
    events = list(rx.events)
    assert len(events) == 7, events
    assert sum("not a parity link" in e for e in events) == 3  # (a) in the old form, (d), (e)
    assert sum("claims to be server 7" in e for e in events) == 1
    assert sum("failed authentication" in e for e in events) == 2  # (b), (c)
    assert sum("did not complete the handshake within 0.6 s" in e for e in events) == 1
    assert all("127.0.0.1:" in e for e in events)  # each names the peer
    logged = lambda: [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]  # noqa: E731
    _wait(lambda: len(logged()) == 7, "not every refusal was logged")  # logged just after it is counted
    assert sorted(logged()) == sorted(events)
    assert _blocks(holder, rb) == after_genuine and holder.applied_all() == applied
    # the member's connection is unaffected by all of it
    member.request(batches[1].tobytes())
    assert member.answer() == (0, 2, "")
    member.conn.close()


def test_an_altered_or_replayed_request_ends_the_members_connection(receiver: Any) -> None:
    rx, holder, batches, rb = receiver
    member = ParityMember(rx.address, SECRET)
    member.request(batches[0].tobytes(), alter=True)  # one bit flipped on the way
    assert _read_all(member.conn) == b""
    member = ParityMember(rx.address, SECRET)
    wire = member.request(batches[0].tobytes())
    assert member.answer() == (0, 1, "")
    member.conn.sendall(wire)  # replayed
    assert _read_all(member.conn) == b""
    member = ParityMember(rx.address, SECRET)
    header = struct.pack("<QIQ", parity_link._REQUEST.size, 1, 1 << 60)
    signed = struct.pack("<QIQ", parity_link._REQUEST.size, 1, 64)
    member.conn.sendall(header + member.header_tag(signed))  # a size other than the one the MAC covers
    assert _read_all(member.conn) == b""
    _wait(lambda: rx.refused >= 3, "the altered requests were not refused")
    assert sum("failed its MAC" in e for e in rx.events) == 3, list(rx.events)
    assert holder.applied_all() == {0: 1}


def test_a_members_malformed_request_ends_its_connection(receiver: Any) -> None:
    """Authenticated, but not one header and one batch (or naming another sender): closed, warned, nothing applied."""
    rx, holder, batches, rb = receiver
    batch = np.frombuffer(batches[0].tobytes(), np.uint8)
    request = parity_link._REQUEST.pack(1, 0, 0)
    for head, buffers in (
        (request, []),
        (request, [batch, batch]),
        (request + b"x", [batch]),
        (parity_link._REQUEST.pack(1, 2, 0), [batch]),
    ):
        member = ParityMember(rx.address, SECRET)
        member.conn.sendall(member.message(head, buffers))
        assert _read_all(member.conn) == b""
        member.conn.close()
    _wait(lambda: rx.refused >= 4, f"not every malformed request was refused: {list(rx.events)}")
    assert sum("not one batch and a 16-byte header" in e for e in rx.events) == 3, list(rx.events)
    assert sum("a request names sender 2" in e for e in rx.events) == 1, list(rx.events)
    assert holder.applied_all() == {} and holder.bytes == 0


def test_a_members_oversized_or_bad_batch_is_answered_with_its_error(receiver: Any) -> None:
    rx, holder, batches, rb = receiver
    rx.max_payload = 64
    member = ParityMember(rx.address, SECRET)
    member.announce(1 << 60)  # authenticated header: the member learns why, nothing is read or allocated
    status, applied, error = member.answer()
    assert status == 1 and "exceeds this receiver's max_payload of 64 bytes" in error
    assert _read_all(member.conn) == b""
    rx.max_payload = parity_link.MAX_PAYLOAD_BYTES
    member = ParityMember(rx.address, SECRET)
    member.request(batches[2].tobytes())  # seq 3 before 1 and 2: a gap
    status, applied, error = member.answer()
    assert (status, applied) == (1, 0) and "arrived after seq 0" in error
    wrong_sender = ParityMember(rx.address, SECRET, sender=2)  # holder 1 protects server 2 too; the batch is server 0's
    wrong_sender.request(batches[0].tobytes())
    status, applied, error = wrong_sender.answer()
    assert status == 1 and "BatchRefused" in error and "names server 0 as its source" in error
    _wait(lambda: rx.refused >= 3, "the refusals were not logged")
    assert sum("refused a batch of 127.0.0.1:" in e and "(server 0)" in e for e in rx.events) == 1
    assert sum("(server 2)" in e for e in rx.events) == 1
    assert holder.applied_all() == {} and holder.bytes == 0


def test_links_and_receivers_of_different_jobs_exchange_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A link with another job's secret is refused (its holder counts as lost); a receiver that cannot prove the
    job's secret (an impostor on a stale port) gets no batch: the link gives up after the handshake."""
    monkeypatch.setattr(parity_link, "SEND_INTERVAL", 0.01)
    shards = [small_shard() for _ in range(N)]
    bs, rb = int(shards[0].block_slots), int(shards[0].record_bytes)
    holder = _holder(bs, rb)
    rx = ParityReceiver(holder, SECRET, host="127.0.0.1")
    impostor = socket.create_server(("127.0.0.1", 0))
    heard: List[bytes] = []

    def impostor_serves() -> None:  # answers the handshake with a proof it cannot make, then listens
        conn, _ = impostor.accept()
        with conn:
            conn.recv(link_handshake.HELLO.size, socket.MSG_WAITALL)
            conn.sendall(b"r" * 32 + link_handshake.CHOICE.pack(link_handshake.MAC_GMAC))
            conn.recv(32, socket.MSG_WAITALL)
            conn.sendall(b"f" * 32)
            conn.settimeout(2.0)
            try:
                heard.append(conn.recv(1 << 20))
            except OSError:
                pass

    threading.Thread(target=impostor_serves, daemon=True).start()
    forwarders = [_core.DeltaForwarder(0, N, K, R, {"t": (bs, rb)}) for _ in range(2)]
    links = [
        RemoteHolderLink(
            forwarders[0], 1, _AddressHandle(1, rx.address), forwarders[0].set_holder(1, None), JobSecret.generate()
        ),
        RemoteHolderLink(
            forwarders[1], 1, _AddressHandle(1, impostor.getsockname()[:2]), forwarders[1].set_holder(1, None), SECRET
        ),
    ]
    try:
        for f in forwarders:
            f.set_holder(2, _core.ParityHolder(2, N, K, R, {"t": bs * rb}))
            keys = np.arange(6, dtype=np.int64)
            shards[0].push(keys, np.ones((6, 4), np.float32), 1, forwarder=f, table="t", pushes={0: 1})
        _wait(lambda: 1 in forwarders[0].progress()["down"], "the foreign link was not marked down")
        _wait(lambda: 1 in forwarders[1].progress()["down"], "the link to the impostor was not marked down")
        assert forwarders[0].errors == []  # refused at the handshake: to the link the holder is gone
        assert any("failed to prove it is holder 1" in e for e in forwarders[1].errors), forwarders[1].errors
        _wait(lambda: rx.refused >= 1, "the foreign link was not logged")
        assert "failed authentication" in rx.events[0]
        time.sleep(0.1)
        assert heard in ([], [b""])  # the impostor got no request
        assert holder.applied_all() == {} and holder.bytes == 0
    finally:
        for link in links:
            link.close()
        for f in forwarders:
            f.close()
        rx.close()
        impostor.close()


def test_a_step_link_reaching_a_parity_receiver_is_refused_naming_both(receiver: Any) -> None:
    rx, holder, batches, rb = receiver
    conn = connect(*rx.address, timeout=10.0)
    with conn, pytest.raises(LinkBroken, match="refused this step link"):
        link_handshake.open_link(conn, SECRET, "step", "server", 1, 0)
    _wait(lambda: rx.refused == 1, "the step link was not refused")
    assert "it opened a step link, and this listener takes parity links only" in rx.events[0], rx.events
    assert holder.applied_all() == {}


def test_handshakes_in_progress_are_capped(receiver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rx, holder, batches, rb = receiver
    monkeypatch.setattr(link_listener, "MAX_PENDING_HANDSHAKES", 2)
    rx.close()
    rx = ParityReceiver(holder, SECRET, host="127.0.0.1")
    idle = [socket.create_connection(rx.address, timeout=5.0) for _ in range(2)]
    time.sleep(0.1)
    with socket.create_connection(rx.address, timeout=5.0) as third:
        assert _read_all(third) == b""
    _wait(lambda: any("2 others are still in their handshake" in e for e in rx.events), f"no warning: {rx.events}")
    for conn in idle:
        conn.close()
    _wait(lambda: rx.refused >= 3, "the idle connections did not end")
    member = ParityMember(rx.address, SECRET)  # the slots are free again
    member.request(batches[0].tobytes())
    assert member.answer() == (0, 1, "")
    member.conn.close()
    rx.close()


def test_struct_sizes_are_what_the_docstring_says() -> None:
    assert link_handshake.HELLO.size == 48 and parity_link._REQUEST.size == 16 and parity_link._ANSWER.size == 9
    assert stranger.HELLO.format == link_handshake.HELLO.format and stranger.MAGIC == link_handshake.MAGIC
    assert stranger.VERSION == link_handshake.VERSION and link_handshake.PURPOSES[stranger.PARITY] == "parity"
