"""Direct links: the step's data path on Ray over one TCP connection per (caller, role) pair, served by a thread in
the role's process; Ray keeps placement, liveness and control (every other call).

Why: a Ray actor call's latency and CPU (caller, callee and their gRPC threads; the object store for large
arguments) were most of a small step's time, and a step made many of them. Over a link a call is one ``sendmsg``
and one read on each side, with the GIL released around both (figures: docs/design/ray-step.md).

What goes over a link (:data:`LINK_METHODS`): a server's ``pull``, ``push``, ``pull_stale``, ``push_pull`` and
``push_pull_stale`` (from its workers), a worker's ``train_step``, ``flush`` and ``dense_state`` (from the driver),
and ``ping`` (a link's empty call; liveness probes go through Ray). A :class:`LinkedHandle` wraps a role's Ray
handle: those methods go over its link, everything else (pings, recovery, saves, stats) to Ray as before. The
driver's :class:`BesideLinkedHandle` of a server sends the ec rebuild's agent calls (:data:`BESIDE_METHODS`:
fragment reads, block writes) and a resize's copy (``forward_slots``, ``clocks_many``, and the old server's
``load_rows`` into a fresh one) over a link of their own, beside the steps'. Calls on one link are answered in order,
one at a time, by the role's serving thread for that connection; the role object guards itself against its other
callers (a server's lock; a worker's, see :class:`~xdl_ec.ps.worker.Worker`).

A request is ``(method, args)``, an answer ``(True, value)`` or ``(False, error)``; the error is raised in the
caller as Ray raises an actor's error's cause. Messages are pickles (protocol 5, arrays out of band) framed and
MACed by the native :class:`xdl_ec._core.LinkSession`, unpickled only after the MAC checked and only into plain
data, numpy, a few xdl_ec types and exception classes (:class:`_Unpickler`); a worker's ``push_pull`` travels in a
native form (:func:`encode_call`) that a server's core serves without Python. Membership is the links' one
handshake (:mod:`xdl_ec.net.link_handshake`, purpose ``step``) under the run's
:class:`~xdl_ec.net.job_secret.JobSecret`. The messages, the native path, membership and the frames' MACs in full:
docs/design/ray-step.md, "Direct links: messages, membership, frames".

Failures: a role whose process dies closes its connections, so a call in flight fails at once with the role's
Lost error (``ServerLost``, ``WorkerLost``: "its direct link broke"); a role that stops answering fails a call
with :class:`~xdl_ec.ps.backend.CallTimeout` at the caller's timeout (the connection is then dropped: the next call
reconnects). A role whose Ray actor is dead cannot give its address: Ray's error, translated, says so. Either way
the scheduler confirms the death by a Ray ping, as for any failed call.
"""

from __future__ import annotations

import collections
import copyreg
import io
import logging
import pickle
import socket
import threading
import time
from typing import Any, Callable, Deque, Dict, FrozenSet, List, Optional, Protocol, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.net import link_handshake
from xdl_ec.net.link_handshake import MAC_GMAC as MAC_GMAC
from xdl_ec.net.link_handshake import MAC_HMAC as MAC_HMAC
from xdl_ec.net.link_handshake import MAC_OFFERED, Hello
from xdl_ec.net.link_handshake import LinkRefused as LinkRefused
from xdl_ec.net.link_listener import LinkListener, PeerRefused
from xdl_ec.net.link_socket import CONNECT_SECONDS, LinkBroken, connect, node_host
from xdl_ec.ps.api import PushAck
from xdl_ec.ps.backend import CallTimeout, Handle, RoleLost, lost_error

LINK_METHODS: Dict[str, FrozenSet[str]] = {
    "server": frozenset({"ping", "pull", "push", "pull_stale", "push_pull", "push_pull_stale"}),
    "worker": frozenset({"ping", "train_step", "flush", "dense_state"}),
}
# the calls "beside" a role's others that a BesideLinkedHandle sends over a link of their own (its own connection,
# so its own serving thread: they never queue behind the steps' calls): a server's agent calls (the ec rebuild's
# fragment reads and block writes, which take their own locks) and a resize's copy (the driver's forward_slots and
# clocks_many to an old server, the old server's load_rows to a fresh one, and the ping that opens that link)
BESIDE_METHODS: Dict[str, FrozenSet[str]] = {
    "server": frozenset({"agent_call", "forward_slots", "clocks_many", "load_rows", "ping"}),
    "worker": frozenset(),
}
SERVED_METHODS = {role: LINK_METHODS[role] | BESIDE_METHODS[role] for role in LINK_METHODS}
MAX_PAYLOAD_BYTES = 1 << 30  # largest message a link takes (a batch's keys and rows are a few MB)
# MAC_HMAC, MAC_GMAC, MAC_OFFERED (link_handshake): the messages' MACs, computed by the native LinkSession, which
# frames, MACs, sends and receives every message; GMAC for bodies of 16 KiB and more (a 2048-sample step moves
# ~2 MB each way).

log = logging.getLogger(__name__)


_FAILED = object()  # recv_message's mark of a request a role's native path failed to serve (after a change)


_Refused = PeerRefused  # a peer broke the protocol: the role closes the connection (after a warning)


# ---- messages ----------------------------------------------------------------------------------------------
_NUMPY_GLOBALS = {
    (module, name)
    for prefix in ("numpy._core", "numpy.core")
    for module, name in (
        (f"{prefix}.numeric", "_frombuffer"),
        (f"{prefix}.multiarray", "_reconstruct"),
        (f"{prefix}.multiarray", "scalar"),
    )
} | {("numpy", "ndarray"), ("numpy", "dtype")}
# the xdl_ec types a linked call carries or answers (exception classes are allowed from xdl_ec and builtins)
_XDL_GLOBALS = {
    ("xdl_ec.ps.api", "PushAck"),
    ("xdl_ec.ps.step_result", "StepResult"),
    ("xdl_ec.ps.dense_state", "DenseState"),
    ("xdl_ec.ps.direct", "_array"),
}
_ARRAY_KINDS = frozenset("biufc?")  # the dtypes (numbers and bools) an array crosses a link as raw bytes in
_PICKLE_FIRST = 0x80  # a pickle's first byte (protocol 2 and later); the native push_pull forms start otherwise


def _allowed_exception(module: str, name: str) -> bool:
    return module == "builtins" or module == "xdl_ec" or module.startswith("xdl_ec.")


class _Unpickler(pickle.Unpickler):
    """Plain data, numpy arrays and scalars, the xdl_ec types of :data:`_XDL_GLOBALS` and exception classes of
    builtins and xdl_ec; any other global is refused (an authenticated peer still cannot make this process run
    code by a message)."""

    _found: Dict[Tuple[str, str], Any] = {}  # globals already resolved and allowed (every message names some)

    def find_class(self, module: str, name: str) -> Any:
        found = self._found.get((module, name))
        if found is not None:
            return found
        if (module, name) in _NUMPY_GLOBALS or (module, name) in _XDL_GLOBALS:
            found = super().find_class(module, name)
        elif _allowed_exception(module, name):
            found = super().find_class(module, name)
            if not (isinstance(found, type) and issubclass(found, BaseException)):
                found = None
        if found is None:
            raise pickle.UnpicklingError(f"a direct link message may not name {module}.{name}")
        self._found[(module, name)] = found
        return found


def _array(buffer: Any, dtype: str, shape: Tuple[int, ...]) -> np.ndarray:
    """The array a :class:`_Pickler` sent: ``buffer``'s bytes (received in place: writable, aligned) as ``dtype``
    (a number or bool type's ``dtype.str``) in ``shape``."""
    try:
        kind = np.dtype(dtype)
        if kind.kind not in _ARRAY_KINDS:
            raise ValueError(f"dtype {dtype!r} is not a number or bool type")
        return np.frombuffer(buffer, kind).reshape(shape)
    except (TypeError, ValueError) as err:
        raise pickle.UnpicklingError(f"a direct link message's array is malformed: {err}") from None


def _reduce_array(obj: np.ndarray) -> Any:
    """A C-contiguous array of numbers or bools as (its bytes out of band, ``dtype.str``, shape), rebuilt by
    :func:`_array`: a third of the time of numpy's own reduction (which pickles the dtype object), a step's cost on
    every request and answer. Other arrays go numpy's way."""
    if obj.dtype.kind in _ARRAY_KINDS and obj.flags.c_contiguous:
        return _array, (pickle.PickleBuffer(obj.data), obj.dtype.str, obj.shape)
    return obj.__reduce_ex__(5)


class _Pickler(pickle.Pickler):
    """Pickles numpy arrays with :func:`_reduce_array`. A dispatch table, not ``reducer_override``: the pickler
    looks the table up in C, where ``reducer_override`` is a Python call for every tuple and list of a message."""

    dispatch_table = {**copyreg.dispatch_table, np.ndarray: _reduce_array}


def encode(obj: Any) -> Tuple[bytes, List[memoryview]]:
    """``obj`` as (pickle, out-of-band buffers): contiguous numpy arrays are not copied."""
    buffers: List[pickle.PickleBuffer] = []
    out = io.BytesIO()
    _Pickler(out, protocol=5, buffer_callback=buffers.append).dump(obj)
    return out.getvalue(), [b.raw() for b in buffers]


def decode(data: Any, buffers: List[Any]) -> Any:
    """A message's object: a pickle, or a push_pull request or answer in its native form (``encode_call``)."""
    if len(data) and data[0] != _PICKLE_FIRST:
        if _core.is_push_pull_request(data):
            try:
                args = _core.parse_push_pull_request(data, buffers)
            except ValueError as err:
                raise pickle.UnpicklingError(f"a malformed push_pull request: {err}") from None
            return ("push_pull" if len(args) == 5 else "push_pull_stale"), args
        if _core.is_push_pull_answer(data):
            return _push_pull_answer(data, buffers)
    return _Unpickler(io.BytesIO(data), buffers=buffers).load()


def encode_call(method: str, args: Tuple[Any, ...]) -> Tuple[bytes, List[Any]]:
    """A call as a message: a server's ``push_pull`` or ``push_pull_stale`` in the native wire form when its
    arguments are in the wire's types (a server's core then serves a one-worker step without the interpreter:
    ``ShardServer.serve``), anything else pickled."""
    if method == "push_pull" or method == "push_pull_stale":
        try:
            native = _core.push_pull_request(*args)
        except TypeError:  # arguments of other types: the pickle carries them, the server's checks say what is wrong
            native = None
        if native is not None:
            return native
    return encode((method, args))


def _push_pull_answer(data: Any, buffers: List[Any]) -> Tuple[bool, Any]:
    """A native push_pull answer as the pickled one reads: (True, (PushAck or None, [rows])), and for a
    push_pull_stale call (True, (ack, [rows], (epoch, [(rows sent, clocks, sent, rows the table holds)]))), the
    arrays views of the message's buffers."""
    has_ack, server, worker, seq, step, applied, durable, has_rows, dims, stale = _core.parse_push_pull_answer(
        data, len(buffers)
    )
    ack = PushAck(server, worker, seq, step, applied, durable) if has_ack else None
    rows = [b.view(np.float32).reshape(-1, dim) for b, dim in zip(buffers, dims)] if has_rows else []
    if stale is None:
        return True, (ack, rows)
    epoch, tables = stale
    at = len(dims)
    answers = []
    for dim, table_rows in tables:
        sent_rows, clocks, sent = buffers[at : at + 3]
        at += 3
        answers.append(
            (sent_rows.view(np.float32).reshape(-1, dim), clocks.view(np.int32), sent.view(np.bool_), table_rows)
        )
    return True, (ack, rows, (epoch, answers))


def _error_answer(err: BaseException) -> BaseException:
    """``err`` itself when the caller can unpickle it (an exception of builtins or xdl_ec with picklable
    arguments), else a RuntimeError naming its type and message."""
    cls = type(err)
    if _allowed_exception(cls.__module__, cls.__qualname__):
        try:
            decode(*encode(err))
            return err
        except Exception:  # noqa: BLE001 - not picklable, or an argument the caller may not unpickle
            pass
    return RuntimeError(f"{cls.__module__}.{cls.__qualname__}: {err}")


def send_message(conn: socket.socket, session: Any, obj: Any, encoded: Optional[Tuple[Any, List[Any]]] = None) -> int:
    """Sends ``obj`` (or what ``encoded`` gives: (head, buffers)) as one message (one ``sendmsg`` where the
    kernel takes it all); returns its bytes.

    Wire form: header ``<QIQ`` (pickle bytes, buffer count, body bytes) + its MAC, then the body: the buffers'
    lengths (``<Q`` each), the pickle, and each buffer at the next multiple of 64 bytes of the body (zero bytes
    between), then the MAC of header and body (framed and MACed by the session, in place)."""
    data, buffers = encoded if encoded is not None else encode(obj)
    try:
        return session.send(conn.fileno(), data, buffers)
    except _core.LinkClosed as err:
        raise LinkBroken(str(err)) from None


def recv_message(
    conn: socket.socket,
    session: Any,
    deadline: Optional[float] = None,
    max_payload: int = MAX_PAYLOAD_BYTES,
    serve: Optional[Callable[..., Any]] = None,
) -> Any:
    """The next message, checked (two reads: header, then body); LinkBroken, socket.timeout past ``deadline``
    (time.monotonic()) or _Refused (a MAC that does not match, a message too large). Arrays are unpickled in
    place from the message (aligned, writable). ``serve`` (a role's ``serve_link``, no deadline): the messages it
    serves natively first; a failure of one comes back as ``(_FAILED, error)``."""
    timeout = None if deadline is None else deadline - time.monotonic()
    try:
        if serve is not None:
            data, buffers, failure = serve(session, conn.fileno(), max_payload)
            if failure is not None:
                return _FAILED, failure
        else:
            data, buffers = session.receive(conn.fileno(), timeout, max_payload)
    except _core.LinkRejected as err:
        raise _Refused(str(err)) from None
    except _core.LinkTimeout as err:
        raise socket.timeout(str(err)) from None
    except _core.LinkClosed as err:
        raise LinkBroken(str(err)) from None
    return decode(data, buffers)


# ---- the role's side ---------------------------------------------------------------------------------------
class LinkServer(LinkListener):
    """Serves the :data:`SERVED_METHODS` of ``role`` of ``obj`` (its ``index`` read at each handshake: a spare
    server takes a dead one's index) to callers proving membership with ``secret``; one thread per connection runs
    its calls in order. ``refuse()`` True (the role is going down) drops connections instead of answering."""

    def __init__(
        self,
        obj: Any,
        role: str,
        secret: Any,
        host: Optional[str] = None,
        refuse: Callable[[], bool] = lambda: False,
        max_payload: int = MAX_PAYLOAD_BYTES,
    ) -> None:
        from xdl_ec.net.job_secret import JobSecret

        if not isinstance(secret, JobSecret):
            raise TypeError(f"LinkServer: secret must be the run's JobSecret, got {type(secret).__name__}")
        if role not in LINK_METHODS:
            raise ValueError(f"role: one of {sorted(LINK_METHODS)}, got {role!r}")
        self.obj, self.role, self.secret = obj, role, secret
        self.methods = SERVED_METHODS[role]
        self._refuse = refuse
        self.max_payload = max_payload
        self.calls = 0
        # TCP also between processes of one machine: over loopback it beat a Unix socket for the large messages
        # of a step (measured: 12,000 keys a call, ~1.7 MB each way: 0.25 ms of CPU per side against 0.3)
        super().__init__(host or node_host(), f"xdl-ec-link-{role}{obj.index}")

    def __repr__(self) -> str:
        return f"LinkServer({self.role} {self.obj.index}, address={self.address})"

    def _describe(self) -> str:
        return f"direct link of {self.role} {self.obj.index}"

    def _authenticate(self, conn: socket.socket, peer: str) -> Tuple[Any, int]:
        """The links' handshake (:mod:`xdl_ec.net.link_handshake`) for a step link to this role and index."""

        def admit(hello: Hello) -> None:
            if hello.role != self.role or hello.index != self.obj.index:
                raise _Refused(
                    f"refused {peer}: it asked for {hello.role} {hello.index}, this is {self.role} "
                    f"{self.obj.index} (a stale address?)"
                )

        session, hello = link_handshake.accept_link(conn, peer, self.secret, "step", admit)
        return session, hello.caller

    def _converse(self, conn: socket.socket, peer: str, authenticated: Tuple[Any, int]) -> None:
        session, caller = authenticated
        who = f"{peer} (caller {caller})"
        # a server serves its workers' one-worker steps natively (ParameterServer.serve_link) and the rest here
        serve = getattr(self.obj, "serve_link", None)
        while True:
            try:
                method, args = recv_message(conn, session, max_payload=self.max_payload, serve=serve)
            except pickle.UnpicklingError as err:
                raise _Refused(f"closed the connection of {who}: {err}") from None
            except _Refused as err:
                raise _Refused(f"closed the connection of {who}: {err}") from None
            if method is _FAILED:
                send_message(conn, session, (False, _error_answer(args)))
                continue
            if self._refuse():
                return  # going down: the caller sees its link break
            if method not in self.methods:
                answer: Any = (False, AttributeError(f"{self.role} links serve {sorted(self.methods)}, not {method!r}"))
            else:
                try:
                    answer = (True, getattr(self.obj, method)(*args))
                except BaseException as err:  # noqa: BLE001 - the caller raises it, as Ray raises a cause
                    answer = (False, _error_answer(err))
                self.calls += 1
            try:
                send_message(conn, session, answer)
            except (pickle.PicklingError, TypeError, AttributeError) as err:
                send_message(conn, session, (False, RuntimeError(f"{method}: answer not sendable: {err}")))


class LinkHost:
    """A role's ``open_links`` (mixed into ParameterServer and Worker): its LinkServer, started on the first call
    with the run's secret."""

    _link_server: Optional[LinkServer] = None
    link_role = "server"

    def open_links(self, secret: Any) -> Tuple[str, int]:
        """Starts serving direct links to members of the run holding ``secret`` (once; the same secret after) and
        answers their address."""
        lock = self.__dict__.setdefault("_link_lock", threading.Lock())
        with lock:
            server = self._link_server
            if server is None:
                server = self._link_server = LinkServer(
                    self, self.link_role, secret, refuse=lambda: bool(getattr(self, "crash_requested", False))
                )
            elif server.secret != secret:
                raise LinkRefused(
                    f"{self.link_role} {getattr(self, 'index', '?')}: its links serve another run's secret"
                )
            return server.address

    def close_links(self) -> None:
        server, self._link_server = self._link_server, None
        if server is not None:
            server.close()


# ---- the caller's side -------------------------------------------------------------------------------------
class LinkFuture:
    """The answer of one call over a link (``result(timeout)``, ``done()``), read when asked for."""

    __slots__ = ("_link", "method", "_done", "_value", "_error")

    def __init__(self, link: Optional["Link"], method: str, error: Optional[BaseException] = None) -> None:
        self._link, self.method = link, method
        self._done, self._value, self._error = error is not None, None, error

    def _set(self, ok: bool, value: Any) -> None:
        self._done = True
        if ok:
            self._value = value
        else:
            self._error = value

    def done(self) -> bool:
        if not self._done and self._link is not None:
            self._link.poll()
        return self._done

    def result(self, timeout: Optional[float] = None) -> Any:
        if not self._done and self._link is not None:  # a future made failed (no link) is done
            self._link.wait(self, timeout)
        if self._error is not None:
            raise self._error
        return self._value


class Link:
    """One connection to the role behind ``handle`` (its Ray handle, for the address), opened on the first call.
    ``caller``: this end's id in the handshake (a worker's index, -1 for the driver)."""

    def __init__(self, handle: Handle, secret: Any, caller: int = -1, offer: Optional[int] = None) -> None:
        self.handle, self.secret, self.caller = handle, secret, caller
        self.offer = MAC_OFFERED if offer is None else offer  # MACs this end offers (bits)

        self._conn: Optional[socket.socket] = None
        self._session: Any = None  # the connection's LinkSession
        self._waiting: Deque[LinkFuture] = collections.deque()
        self._lock = threading.RLock()
        self.calls = 0
        self.bytes_sent = 0

    def _lost(self, why: str) -> RoleLost:
        return lost_error(self.handle.role, self.handle.index, why)

    def _connect(self) -> socket.socket:
        from xdl_ec.ps.remote import Remote

        host, port = Remote(self.handle, LinkAPI).open_links(self.secret).result(CONNECT_SECONDS)
        conn = connect(host, port, CONNECT_SECONDS)
        try:
            session = link_handshake.open_link(
                conn, self.secret, "step", self.handle.role, self.handle.index, self.caller, self.offer
            )
        except LinkRefused as err:
            conn.close()
            raise LinkRefused(
                f"the direct link of {self.handle.role} {self.handle.index} at {host}:{port}: {err}"
            ) from None
        except BaseException:
            conn.close()
            raise
        self._conn, self._session = conn, session
        return conn

    def call(self, method: str, *args: Any) -> LinkFuture:
        """Sends ``method(*args)``; a failure to connect or send is the future's error, never raised here (a call
        sent is a call that may run, as a Ray call's submission)."""
        with self._lock:
            try:
                conn = self._conn if self._conn is not None else self._connect()
                self.bytes_sent += send_message(conn, self._session, None, encode_call(method, args))
            except (RoleLost, CallTimeout) as err:  # from Ray, asking for the address: a dead or stuck role
                self._break(err)
                return LinkFuture(None, method, err)
            except socket.timeout:
                error: BaseException = CallTimeout(self.handle.role, self.handle.index, method, CONNECT_SECONDS)
                self._break(error)
                return LinkFuture(None, method, error)
            except OSError as err:
                error = self._lost(f"its direct link broke ({err!r})")
                self._break(error)
                return LinkFuture(None, method, error)
            self.calls += 1
            future = LinkFuture(self, method)
            self._waiting.append(future)
            return future

    def _break(self, error: BaseException) -> None:
        """Drops the connection; every call waiting on it fails with ``error``."""
        conn, self._conn, self._session = self._conn, None, None
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
        waiting, self._waiting = self._waiting, collections.deque()
        for future in waiting:
            future._set(False, error)

    def _read_one(self, deadline: Optional[float], method: str, timeout: Optional[float]) -> None:
        if self._conn is None:  # broken meanwhile: _break failed every waiting future
            return
        try:
            ok, value = recv_message(self._conn, self._session, deadline)
        except socket.timeout:
            self._break(CallTimeout(self.handle.role, self.handle.index, method, timeout or 0.0))
            return
        except LinkBroken as err:
            self._break(self._lost(f"its direct link broke ({err})"))
            return
        except (OSError, _Refused, pickle.UnpicklingError) as err:
            self._break(self._lost(f"its direct link broke ({err})"))
            return
        finally:
            if self._conn is not None:
                self._conn.settimeout(None)
        if self._waiting:
            self._waiting.popleft()._set(ok, value)

    def wait(self, future: LinkFuture, timeout: Optional[float]) -> None:
        """Reads answers in order until ``future``'s (or the link breaks, or ``timeout`` seconds pass)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not future._done:
                self._read_one(deadline, future.method, timeout)

    def poll(self) -> None:
        """Reads the answers that have arrived, without waiting for more."""
        import select

        with self._lock:
            while self._waiting and self._conn is not None:
                readable, _, _ = select.select([self._conn], [], [], 0)
                if not readable:
                    return
                self._read_one(time.monotonic() + CONNECT_SECONDS, self._waiting[0].method, CONNECT_SECONDS)

    def fileno(self) -> Optional[int]:
        conn = self._conn
        return None if conn is None else conn.fileno()

    def close(self) -> None:
        with self._lock:
            self._break(self._lost("its direct link was closed"))


class LinkAPI(Protocol):
    """What a caller asks a linked role through Ray."""

    def open_links(self, secret: Any) -> Tuple[str, int]: ...


class _OverLink(Handle):
    """``handle`` (a role's Ray handle, unwrapped if linked already) with some of its calls sent over a direct
    :class:`Link` proven with ``secret`` (which ones: the subclass's ``call`` / ``call_beside``). Pickles as
    ``handle`` (a connection stays in its process)."""

    def __init__(self, handle: Handle, secret: Any, caller: int, methods: FrozenSet[str]) -> None:
        handle = unlinked(handle)
        self.handle = handle
        self.role, self.index, self.node = handle.role, handle.index, getattr(handle, "node", None)
        self.methods = methods
        self.link = Link(handle, secret, caller)

    def call(self, method: str, *args: Any) -> Any:
        return self.handle.call(method, *args)

    def call_beside(self, method: str, *args: Any) -> Any:
        return self.handle.call_beside(method, *args)

    def close(self) -> None:
        self.link.close()

    def __reduce__(self) -> tuple:
        return (_same, (self.handle,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.role} {self.index})"


class LinkedHandle(_OverLink):
    """``handle`` with its :data:`LINK_METHODS` (the steps' calls) sent over a direct link; every other call goes to
    ``handle``."""

    def __init__(self, handle: Handle, secret: Any, caller: int = -1) -> None:
        super().__init__(handle, secret, caller, LINK_METHODS[handle.role])

    def call(self, method: str, *args: Any) -> Any:
        if method in self.methods:
            return self.link.call(method, *args)
        return self.handle.call(method, *args)


class BesideLinkedHandle(_OverLink):
    """``handle`` (a server's Ray handle) whose calls beside its others (:data:`BESIDE_METHODS`, the ec rebuild's)
    go over a direct link of their own: a connection served by its own thread, as Ray's ``beside`` concurrency group
    is, at a link's cost (one ``sendmsg`` and one read a side, blocks received in place) instead of a Ray call's
    (its CPU over both processes, docs/design/ray-step.md, and the object store for blocks over 100 KB). Every other
    call goes to ``handle``."""

    def __init__(self, handle: Handle, secret: Any, caller: int = -1) -> None:
        super().__init__(handle, secret, caller, BESIDE_METHODS[handle.role])

    def call_beside(self, method: str, *args: Any) -> Any:
        if method in self.methods:
            return self.link.call(method, *args)
        return self.handle.call_beside(method, *args)


def _same(handle: Handle) -> Handle:
    return handle


def unlinked(handle: Handle) -> Handle:
    """The Ray handle behind ``handle``."""
    return handle.handle if isinstance(handle, _OverLink) else handle


def wait_first_linked(futures: List[LinkFuture], timeout: Optional[float]) -> List[LinkFuture]:
    """The futures of ``futures`` that are done, waiting up to ``timeout`` for at least one (their links' sockets
    selected on)."""
    import select

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done = [f for f in futures if f.done()]
        if done:
            return done
        links = {id(f._link): f._link for f in futures if f._link is not None}
        fds = [fd for link in links.values() if (fd := link.fileno()) is not None]
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return []
        if not fds:
            return [f for f in futures if f.done()]
        select.select(fds, [], [], remaining)
