"""Direct links (xdl_ec.ps.direct): framing (arrays out of band, answers in order, errors raised in the caller),
membership (a wrong secret, a stranger, a forged proof, an altered or replayed message, a stale address, a message
naming a global it may not all end in a closed connection and a warning, the method never run), and failures (a
role process killed mid-call is its Lost error at once, a stuck one a CallTimeout at the timeout). Real links over
loopback; the role runs in this process, or in a child process where it must die."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Iterator, List, Tuple

import numpy as np
import pytest

from xdl_ec.net import link_handshake
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.net.link_socket import LinkBroken, connect, recv_exactly
from xdl_ec.ps import direct
from xdl_ec.ps.backend import CallTimeout, Handle, ServerLost
from xdl_ec.ps.direct import Link, LinkedHandle, LinkHost, LinkRefused

SECRET = JobSecret.generate()


class _Foreign(Exception):
    pass


class _Role(LinkHost):
    """A stand-in server: ``pull`` echoes its arrays (and records the call), ``push`` raises the error named."""

    link_role = "server"

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.calls: List[Any] = []

    def ping(self) -> int:
        return self.index

    def pull(self, requests: Any) -> Any:
        self.calls.append(requests)
        return [(name, keys, keys.astype(np.float32)[:, None] * np.ones((1, 3), np.float32)) for name, keys in requests]

    def push(self, error: str) -> None:
        raise {"value": ValueError("bad grads"), "lost": ServerLost(3, "gone"), "foreign": _Foreign("not from here")}[
            error
        ]


class _Handle(Handle):
    """A handle whose only backend call is ``open_links`` on ``role`` (in this process), or a fixed address."""

    role = "server"

    def __init__(self, role: Any, index: int = 0, address: Any = None) -> None:
        self._role, self.index, self._address = role, index, address

    def call(self, method: str, *args: Any) -> Any:
        future: concurrent.futures.Future = concurrent.futures.Future()
        assert method == "open_links", method
        future.set_result(self._address if self._address is not None else self._role.open_links(*args))
        return future


def _link(role: _Role, secret: JobSecret = SECRET, index: int = 0, offer: Any = None) -> Link:
    return Link(_Handle(role, index), secret, caller=7, offer=offer)


@pytest.fixture
def linked() -> Iterator[Tuple[_Role, Link]]:
    """A role serving its links in this process and a Link to it, both closed after the test."""
    role = _Role()
    link = _link(role)
    yield role, link
    link.close()
    role.close_links()


@pytest.mark.parametrize("offer,algorithm", [(direct.MAC_HMAC, direct.MAC_HMAC), (None, direct.MAC_GMAC)])
def test_arrays_travel_out_of_band_and_answers_come_in_order(offer: Any, algorithm: int) -> None:
    """Both MACs (HMAC-SHA256, and AES-GMAC where both ends have it: the default here); arrays of every
    alignment and size arrive aligned and writable."""
    role = _Role()
    link = _link(role, offer=offer)
    try:
        keys = [np.arange(n, dtype=np.int64) * 3 for n in (1, 1000, 0, 70_000, 3)]
        futures = [link.call("pull", [("t", k), ("u", k[1:])]) for k in keys]  # sent before any answer is read
        for k, future in zip(keys, futures):
            for (_name, got, rows), want in zip(future.result(10.0), (k, k[1:])):
                assert got.dtype == np.int64 and np.array_equal(got, want)
                assert rows.shape == (want.size, 3) and rows.dtype == np.float32 and rows.flags.writeable
                assert rows.ctypes.data % 64 == 0 and got.ctypes.data % 64 == 0
                np.testing.assert_array_equal(rows[:, 2], want.astype(np.float32))
        assert link._session.mac == algorithm
        assert link.call("ping").result(10.0) == 0
        data, buffers = direct.encode(("pull", [("t", keys[3])]))
        assert len(buffers) == 1 and len(data) < 200  # the keys are not in the pickle
    finally:
        link.close()
        role.close_links()


def _through(obj: Any) -> Any:
    """``obj`` encoded and decoded as a link does, its buffers received into writable memory."""
    data, buffers = direct.encode(obj)
    return direct.decode(data, [memoryview(bytearray(b)) for b in buffers])


def test_every_array_comes_back_with_its_dtype_shape_and_bytes() -> None:
    """Contiguous arrays of numbers and bools travel as raw bytes with dtype.str and shape (big-endian, 0-d and
    empty ones too); others (strided, Fortran-ordered, datetimes, objects) the way numpy pickles them."""
    rng = np.random.default_rng(1)
    arrays = [rng.integers(-9, 9, (4, 5)).astype(dt) for dt in ("<i8", ">f8", "u2", "i1", "c8", "f2")]
    arrays += [
        np.array(True),
        np.zeros((0, 16), np.float32),
        np.arange(12.0).reshape(3, 4)[:, ::2],
        np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        np.array(["2026-11-27"], "datetime64[D]"),
        np.array([{"a": 1}], dtype=object),
    ]
    for want in arrays:
        got = _through(("x", [want]))[1][0]
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), want
    raw = _through(arrays[0])
    assert raw.flags.writeable and raw.flags.c_contiguous


@pytest.mark.parametrize(
    "dtype,shape", [("|O", (1,)), ("V8", (1,)), ("f4,i4", (1,)), ("not a dtype", (2,)), ("<f4", (3,)), ("<f4", "two")]
)
def test_a_malformed_array_is_an_unpickling_error(dtype: str, shape: Any) -> None:
    class Forged:
        def __reduce__(self) -> tuple:
            return direct._array, (b"\0" * 8, dtype, shape)

    with pytest.raises(pickle.UnpicklingError, match="malformed"):
        direct.decode(pickle.dumps(Forged(), protocol=5), [])


def test_errors_are_raised_in_the_caller(linked: Tuple[_Role, Link]) -> None:
    _, link = linked
    with pytest.raises(ValueError, match="bad grads"):
        link.call("push", "value").result(10.0)
    with pytest.raises(ServerLost, match="server 3 was lost: gone"):
        link.call("push", "lost").result(10.0)
    with pytest.raises(AttributeError, match="not 'export'"):
        link.call("export", "t").result(10.0)
    assert link.call("ping").result(10.0) == 0  # the link is still in step


def test_an_error_the_caller_may_not_unpickle_comes_as_a_runtime_error(linked: Tuple[_Role, Link]) -> None:
    _, link = linked
    with pytest.raises(RuntimeError, match="_Foreign: not from here"):
        link.call("push", "foreign").result(10.0)


def test_a_wrong_secret_is_refused_and_the_role_keeps_its_own(caplog: pytest.LogCaptureFixture) -> None:
    role = _Role()
    address = role.open_links(SECRET)
    try:
        with pytest.raises(LinkRefused):
            role.open_links(JobSecret.generate())  # a role serves one run's secret
        intruder = Link(_Handle(role, 0, address), JobSecret.generate(), caller=1)
        with caplog.at_level(logging.WARNING, logger="xdl_ec.ps.direct"):
            future = intruder.call("pull", [("t", np.arange(3))])
            with pytest.raises(ServerLost, match="direct link broke"):
                future.result(10.0)
            _wait_for(lambda: role._link_server.refused == 1)
        assert role.calls == [] and "failed authentication" in caplog.text
    finally:
        role.close_links()


def _wait_for(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _raw(address: Tuple[str, int]) -> socket.socket:
    conn = socket.create_connection(address, timeout=10.0)
    return conn


def _recv_all(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _closed(conn: socket.socket) -> bool:
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_stranger_and_a_stale_address_get_nothing(caplog: pytest.LogCaptureFixture) -> None:
    role = _Role(index=2)
    address = role.open_links(SECRET)
    try:
        with caplog.at_level(logging.WARNING, logger="xdl_ec.ps.direct"):
            conn = _raw(address)
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert _closed(conn)
            conn = _raw(address)  # the right magic, asking for server 5 at server 2's address
            conn.sendall(link_handshake.hello_bytes("step", "server", 5, 1))
            assert _closed(conn)
            conn = _raw(address)  # a forged proof
            conn.sendall(link_handshake.hello_bytes("step", "server", 2, 1))
            assert len(_recv_all(conn, 33)) == 33  # the role's nonce and MAC choice
            conn.sendall(os.urandom(32))
            assert _closed(conn)
            _wait_for(lambda: role._link_server.refused == 3)
        assert "not a direct link" in caplog.text and "a stale address" in caplog.text
        assert "failed authentication" in caplog.text and role.calls == []
        stale = Link(_Handle(role, 4, address), SECRET)  # a member that names the wrong index is refused too
        with pytest.raises(ServerLost):
            stale.call("ping").result(10.0)
    finally:
        role.close_links()


def test_a_parity_link_reaching_a_step_listener_is_refused_naming_both() -> None:
    role = _Role(index=0)
    address = role.open_links(SECRET)
    try:
        conn = connect(*address, timeout=10.0)
        with conn, pytest.raises(LinkBroken, match="refused this parity link"):
            link_handshake.open_link(conn, SECRET, "parity", "server", 0, 1)
        _wait_for(lambda: role._link_server.refused == 1)
        (event,) = role._link_server.events
        assert "it opened a parity link, and this listener takes step links only" in event, event
        assert role.calls == []
    finally:
        role.close_links()


class _Tap:
    """Sits on the wire between a Link and its role: the Link's connection becomes one end of a socket pair whose
    other end this relays to the role, a message at a time (recorded in ``sent``, altered by ``alter`` when set);
    the role's answers are relayed back. ``conn``: the end the Link's session now writes to."""

    def __init__(self, link: Link) -> None:
        self.real = link._conn
        self.conn, self._far = socket.socketpair()
        link._conn = self.conn
        self.sent: List[bytes] = []
        self.alter: Any = None
        threading.Thread(target=self._up, daemon=True).start()
        threading.Thread(target=self._down, daemon=True).start()

    def _up(self) -> None:
        try:
            while True:
                head = bytes(recv_exactly(self._far, 52))  # header <QIQ and its MAC
                message = head + bytes(recv_exactly(self._far, int.from_bytes(head[12:20], "little") + 32))
                self.sent.append(message)
                self.real.sendall(message if self.alter is None else self.alter(message))
        except OSError:
            pass

    def _down(self) -> None:
        try:
            while data := self.real.recv(1 << 16):
                self._far.sendall(data)
        except OSError:
            pass
        self._far.shutdown(socket.SHUT_RDWR)  # not only close: _up's recv on it would keep it open
        self._far.close()


@pytest.mark.parametrize("attack", ["altered", "replayed", "foreign global"])
def test_an_altered_replayed_or_foreign_message_closes_the_connection(
    attack: str, linked: Tuple[_Role, Link], caplog: pytest.LogCaptureFixture
) -> None:
    role, link = linked
    assert link.call("ping").result(10.0) == 0
    tap = _Tap(link)
    before = len(role.calls)
    with caplog.at_level(logging.WARNING, logger="xdl_ec.ps.direct"):
        if attack == "altered":
            tap.alter = lambda data: data[:-40] + bytes([data[-40] ^ 1]) + data[-39:]
            future = link.call("pull", [("t", np.arange(5))])
        elif attack == "replayed":
            assert len(link.call("pull", [("t", np.arange(5))]).result(10.0)) == 1
            tap.real.sendall(tap.sent[-1])  # the same bytes again: their counter is spent
            future = link.call("ping")
        else:  # a member's message whose pickle names os.system: refused before anything runs
            crafted = pickle.dumps(("pull", (os.system, "true")), protocol=5)
            real, direct.encode = direct.encode, lambda obj: (crafted, [])
            try:
                direct.send_message(tap.conn, link._session, None)
            finally:
                direct.encode = real
            future = link.call("ping")
        with pytest.raises(ServerLost, match="direct link broke"):
            future.result(10.0)
        _wait_for(lambda: role._link_server.refused == 1)
    expected = {
        "altered": "failed its MAC",
        "replayed": "failed its MAC",
        "foreign global": "may not name posix.system",
    }[attack]
    assert expected in caplog.text
    assert len(role.calls) == before + (1 if attack == "replayed" else 0)
    assert link.call("ping").result(10.0) == 0  # a new connection


_CHILD = """
import sys, time
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.direct import LinkHost

class Role(LinkHost):
    link_role = "server"
    index = 0
    def ping(self):
        return 0
    def pull(self, seconds):
        sys.stdout.write("pulling\\n"); sys.stdout.flush()
        time.sleep(seconds)
        return seconds

secret = JobSecret(bytes.fromhex(sys.argv[1]))
host, port = Role().open_links(secret)
sys.stdout.write(f"{host} {port}\\n"); sys.stdout.flush()
time.sleep(600)
"""


@pytest.fixture
def child_role() -> Any:
    key = os.urandom(32)
    import xdl_ec

    package_root = os.path.dirname(os.path.dirname(os.path.abspath(xdl_ec.__file__)))  # the staged package's
    child = subprocess.Popen(
        [sys.executable, "-P", "-c", _CHILD, key.hex()],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": package_root},
    )
    try:
        host, port = child.stdout.readline().split()
        yield child, (host, int(port)), JobSecret(key)
    finally:
        child.kill()
        child.wait()


def test_a_role_killed_mid_call_is_lost_at_once(child_role: Any) -> None:
    child, address, secret = child_role
    link = Link(_Handle(None, 0, address), secret)
    assert link.call("ping").result(10.0) == 0
    future = link.call("pull", 30.0)
    assert child.stdout.readline() == "pulling\n"
    start = time.monotonic()
    os.kill(child.pid, signal.SIGKILL)
    with pytest.raises(ServerLost, match="server 0 was lost: its direct link broke"):
        future.result(60.0)
    assert time.monotonic() - start < 5.0
    # the next call cannot connect: lost as well, not a hang
    with pytest.raises(ServerLost):
        link.call("ping").result(10.0)


def test_a_stuck_role_times_out_and_the_link_reconnects(child_role: Any) -> None:
    child, address, secret = child_role
    link = Link(_Handle(None, 0, address), secret)
    future = link.call("pull", 3.0)
    start = time.monotonic()
    with pytest.raises(CallTimeout, match=r"server 0 did not answer pull\(\) within 0.5 s"):
        future.result(0.5)
    assert time.monotonic() - start < 2.0
    assert link.call("ping").result(10.0) == 0  # a fresh connection, served beside the stuck one


_SENT: List[str] = []


class _Recording(_Handle):
    """A picklable handle (a fixed address) that records the backend calls it gets."""

    def call(self, method: str, *args: Any) -> Any:
        _SENT.append(method)
        return super().call(method, *args) if method == "open_links" else None


def test_a_linked_handle_routes_only_link_methods_and_pickles_as_its_handle() -> None:
    role = _Role()
    inner = _Recording(None, 0, role.open_links(SECRET))
    linked = LinkedHandle(inner, SECRET)
    _SENT.clear()
    try:
        assert linked.call("ping").result(10.0) == 0
        linked.call("export", "t")
        assert _SENT == ["open_links", "export"]
        copy = pickle.loads(pickle.dumps(linked))
        assert type(copy) is _Recording and copy._address == inner._address
    finally:
        linked.close()
        role.close_links()


class _Agented(_Role):
    """A stand-in server that hosts an agent: ``agent_call`` answers what it was asked."""

    def agent_call(self, method: str, *args: Any) -> Any:
        return method, args


def test_a_beside_linked_handle_sends_only_beside_calls_over_its_own_link_and_pickles_as_its_handle() -> None:
    role = _Agented()
    inner = _Recording(None, 0, role.open_links(SECRET))
    beside = direct.BesideLinkedHandle(inner, SECRET)
    steps = LinkedHandle(inner, SECRET)
    _SENT.clear()
    try:
        assert beside.call_beside("agent_call", "read_many", 3).result(10.0) == ("read_many", (3,))
        assert steps.call("ping").result(10.0) == 0
        assert _SENT == ["open_links", "open_links"]  # one connection each: the beside calls have their own thread
        assert beside.link.calls == 1 and steps.link.calls == 1
        beside.call("export", "t")  # not a beside call: the backend's
        steps.call("agent_call", "read_many", 3)  # a step link does not carry agent calls
        assert _SENT[2:] == ["export", "agent_call"]
        copy = pickle.loads(pickle.dumps(beside))
        assert type(copy) is _Recording and copy._address == inner._address
        assert direct.unlinked(beside) is inner
    finally:
        beside.close()
        steps.close()
        role.close_links()
