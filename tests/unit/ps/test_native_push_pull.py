"""A one-worker step's push_pull over a direct link is served by the server's core (ShardServer, without the
interpreter) and answers exactly what the Python path answers: the same ack, rows, seqs and shard bytes. Whatever
that path must judge (bad input, sync steps, a crash armed, a shard under restore) it declines, changing nothing,
and the Python path serves it with its errors. Real links over loopback, the server in this process."""

from __future__ import annotations

import concurrent.futures
import hashlib
import time
from typing import Any, Iterator, List, Tuple

import numpy as np
import pytest

import xdl_ec
from xdl_ec import _core
from xdl_ec.ft.parity_agent import ParityAgent
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps import direct
from xdl_ec.ps.agent import ServerAgent
from xdl_ec.ps.api import PushAck
from xdl_ec.ps.backend import Handle
from xdl_ec.ps.direct import Link
from xdl_ec.ps.server import ParameterServer
from xdl_ec.sparse import init, optim

DIM = 4
SPEC = xdl_ec.Table("t", DIM, optim.Adam(learning_rate=0.05), init.RandomUniform(-0.05, 0.05), seed=11)
WIDE = xdl_ec.Table("w", 2, optim.Adagrad(learning_rate=0.1), init.Zeros(), seed=3)
SECRET = JobSecret.generate()


class _Handle(Handle):
    """A handle whose only backend call is ``open_links`` on a server in this process."""

    role = "server"

    def __init__(self, server: ParameterServer) -> None:
        self._server, self.index = server, server.index

    def call(self, method: str, *args: Any) -> Any:
        assert method == "open_links", method
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(self._server.open_links(*args))
        return future


@pytest.fixture
def pair() -> Iterator[Tuple[ParameterServer, ParameterServer, Link]]:
    """A linked server and its twin served in Python (direct calls), with the same tables."""
    linked, twin = ParameterServer(0, (SPEC, WIDE)), ParameterServer(0, (SPEC, WIDE))
    link = Link(_Handle(linked), SECRET, caller=0)
    yield linked, twin, link
    link.close()
    linked.close()
    twin.close()


def _steps(count: int, seed: int = 0) -> List[Tuple[Any, ...]]:
    """push_pull arguments of ``count`` steps of one worker: both tables pushed and pulled, duplicate keys."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(1, count + 1):
        keys = rng.integers(0, 40, 24).astype(np.int64)
        wide = rng.integers(0, 10, 6).astype(np.int64)
        parts = [
            ("t", keys, rng.standard_normal((keys.size, DIM)).astype(np.float32), 2 * step - 1),
            (
                "w",
                wide,
                rng.standard_normal((wide.size, 2)).astype(np.float32),
                2 * step,
                rng.integers(1, 4, wide.size).astype(np.uint32),
            ),
        ]
        pulls = [("t", rng.integers(0, 60, 30).astype(np.int64)), ("w", wide)]
        out.append((parts, step, 0, 1, pulls))
    return out


def _same(a: ParameterServer, b: ParameterServer) -> None:
    assert model_digest(a) == model_digest(b)
    assert a.last_seq == b.last_seq


def model_digest(server: ParameterServer) -> str:
    """The bytes of the server's rows (keys, values, optimizer state), in key order."""
    h = hashlib.sha256()
    for name in ("t", "w"):
        rows = server.export(name)
        order = np.argsort(rows["keys"])
        for field in ("keys", "values", "state"):
            h.update(np.ascontiguousarray(rows[field][order]).tobytes())
    return h.hexdigest()


def test_steps_served_natively_answer_what_python_answers(pair: Any) -> None:
    linked, twin, link = pair
    for args in _steps(6):
        ack, rows = link.call("push_pull", *args).result(10)
        ack_py, rows_py = twin.push_pull(*args)
        assert isinstance(ack, PushAck) and ack == ack_py
        assert len(rows) == len(rows_py)
        for got, want in zip(rows, rows_py):
            assert got.dtype == np.float32 and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    _same(linked, twin)
    native = linked.core.counters()
    assert native["requests"] == 6 and native["pushes"] == 12 and native["pulls"] == 6
    stats, stats_py = linked.stats(), twin.stats()
    for counter in (
        "requests",
        "pushes",
        "keys_pushed",
        "steps_applied",
        "pulls",
        "keys_pulled",
        "bytes_in",
        "bytes_out",
    ):
        assert stats[counter] == stats_py[counter], counter


def test_a_replayed_step_is_applied_once(pair: Any) -> None:
    linked, twin, link = pair
    [args] = _steps(1)
    for _ in range(2):
        assert link.call("push_pull", *args).result(10) is not None
        twin.push_pull(*args)
    _same(linked, twin)
    assert linked.core.counters()["pushes"] == 2  # the replay's parts were skipped


@pytest.mark.parametrize("bad", ["nan", "dim", "table", "step", "participants", "repeats"])
def test_what_the_python_path_must_judge_is_declined_and_answered_there(pair: Any, bad: str) -> None:
    linked, twin, link = pair
    [(parts, step, worker, participants, pulls)] = _steps(1)
    keys, grads = parts[0][1], parts[0][2]
    if bad == "nan":
        grads[3, 1] = np.nan
    elif bad == "dim":
        parts[0] = ("t", keys, np.ones((keys.size, DIM + 1), np.float32), 1)
    elif bad == "table":
        parts[0] = ("x", keys, grads, 1)
    elif bad == "step":
        step = 0
    elif bad == "participants":
        participants, worker = 2, 1  # a sync step: buffered by the Python path, never native
    elif bad == "repeats":
        parts[1] = parts[1][:4] + (np.zeros(parts[1][1].size, np.uint32),)
    before = model_digest(linked)
    future = link.call("push_pull", parts, step, worker, participants, pulls)
    if bad == "participants":
        ack, rows = future.result(10)
        assert not ack.applied
    else:
        with pytest.raises(ValueError) as raised:
            future.result(10)
        with pytest.raises(ValueError) as raised_py:
            twin.push_pull(parts, step, worker, participants, pulls)
        assert str(raised.value) == str(raised_py.value)
        assert model_digest(linked) == before
    assert linked.core.counters()["requests"] == 0
    ack, rows = link.call("push_pull", *_steps(1)[0]).result(10)  # the link serves on
    assert linked.core.counters()["requests"] == 1


def test_arguments_not_in_the_wire_types_are_pickled_and_served_in_python(pair: Any) -> None:
    linked, twin, link = pair
    [(parts, step, worker, participants, pulls)] = _steps(1)
    parts = [
        (name, keys.astype(np.int32), grads.astype(np.float64), seq) + tuple(rest)
        for name, keys, grads, seq, *rest in parts
    ]
    assert direct.encode_call("push_pull", (parts, step, worker, participants, pulls))[0][:1] == b"\x80"
    # a table name over the native form's limit goes as a pickle too
    assert direct.encode_call("push_pull", ([], 1, 0, 1, [("x" * 2000, pulls[0][1])]))[0][:1] == b"\x80"
    ack, rows = link.call("push_pull", parts, step, worker, participants, pulls).result(10)
    ack_py, rows_py = twin.push_pull(parts, step, worker, participants, pulls)
    assert ack == ack_py
    _same(linked, twin)
    assert linked.core.counters()["requests"] == 0


def test_a_push_carrying_an_eviction_cutoff_is_pickled_and_served_in_python() -> None:
    """A part with an Evict(ttl_seconds) cutoff (its sixth item) has no field in the native form: it goes pickled,
    the server's Python path applies it and its pass frees the rows last updated before the cutoff."""
    bounded = xdl_ec.Table("b", DIM, block_slots=8, evict=xdl_ec.Evict(ttl_seconds=1.0, every_steps=2))
    linked = ParameterServer(0, (bounded,))
    link = Link(_Handle(linked), SECRET, caller=0)
    try:
        grads = np.full((2, DIM), 0.5, np.float32)
        link.call("push_pull", [("b", np.array([1, 2], np.int64), grads, 1)], 1, 0, 1, []).result(10)
        assert linked.core.counters()["requests"] == 1  # step 1: served natively
        part = ("b", np.array([3], np.int64), grads[:1], 2, None, 2)
        assert direct.encode_call("push_pull", ([part], 2, 0, 1, []))[0][:1] == b"\x80"
        link.call("push_pull", [part], 2, 0, 1, []).result(10)
        assert linked.core.counters()["requests"] == 1
        assert linked.export("b")["keys"].tolist() == [3]  # keys 1, 2 were last updated at step 1 < 2
    finally:
        link.close()
        linked.close()


class _CountingAgent(ServerAgent):
    """An agent whose push does more than a plain shard's (as cpr's counts accesses)."""

    def __init__(self, server: Any) -> None:
        self.pushed = 0

    def push(
        self,
        host: Any,
        table: Any,
        keys: Any,
        grads: Any,
        step: int,
        pushes: Any,
        repeats: Any = None,
        ttl_before: int = 0,
    ) -> None:
        self.pushed += 1
        super().push(host, table, keys, grads, step, pushes, repeats, ttl_before)


def test_an_agent_with_its_own_push_keeps_every_step_in_python(pair: Any) -> None:
    linked, twin, link = pair
    linked.attach_agent(_CountingAgent)
    assert not linked.core.native
    link.call("push_pull", *_steps(1)[0]).result(10)
    assert linked.agent.pushed == 2 and linked.core.counters()["requests"] == 0


def test_a_parity_agent_serves_natively_until_a_crash_is_armed() -> None:
    server = ParameterServer(0, (SPEC,))
    shard = server.table("t").shard
    tables = {"t": (int(shard.block_slots), int(shard.record_bytes))}
    server.attach_agent(lambda host: ParityAgent(0, 3, 2, 1, tables, secret=SECRET))
    link = Link(_Handle(server), SECRET, caller=0)
    try:
        assert server.core.native
        keys = np.arange(5, dtype=np.int64)
        parts = [("t", keys, np.ones((5, DIM), np.float32), 1)]
        link.call("push_pull", parts, 1, 0, 1, [("t", keys)]).result(10)
        assert server.core.counters()["requests"] == 1
        assert server.agent.forwarder.progress()["seq"] >= 1  # the native path recorded into the forwarder
        server.agent_call("arm_crash_before_apply")
        assert not server.core.native
        with pytest.raises(Exception, match="crashed"):
            link.call("push_pull", [("t", keys, np.ones((5, DIM), np.float32), 2)], 2, 0, 1, []).result(10)
        assert server.core.counters()["requests"] == 1 and server.crash_requested
    finally:
        link.close()
        server.close()


def test_a_malformed_native_request_closes_the_connection(pair: Any) -> None:
    linked, _, link = pair
    link.call("ping").result(10)
    head, arrays = _core.push_pull_request(*_steps(1)[0])
    direct.send_message(link._conn, link._session, None, (head, arrays[:-1]))  # a buffer short of its head
    link._conn.settimeout(10)
    assert link._conn.recv(1) == b""  # closed, with no answer
    assert any(
        "malformed push_pull request" in e and "6 buffers where its head announces 7" in e
        for e in linked._link_server.events
    )
    assert linked.core.counters()["requests"] == 0


def test_the_native_path_takes_the_servers_lock(pair: Any) -> None:
    linked, twin, link = pair
    [args] = _steps(1)
    with linked.lock:  # reentrant, as threading.RLock
        with linked.lock:
            future = link.call("push_pull", *args)
            time.sleep(0.3)
            assert linked.core.counters()["requests"] == 0 and linked.last_seq == {}  # waiting for the lock
    future.result(10)
    assert linked.core.counters()["requests"] == 1 and linked.last_seq == {0: 2}
    assert linked.lock.acquire(blocking=False)
    linked.lock.release()


def test_a_caching_workers_steps_served_natively_answer_what_python_answers(pair: Any) -> None:
    linked, twin, link = pair
    rng = np.random.default_rng(5)
    known_linked: dict = {}
    known_twin: dict = {}
    epochs = {}
    for args in _steps(5, seed=2):
        parts, step, worker, participants, pulls = args
        keys = rng.integers(0, 50, 20).astype(np.int64)
        answers = []
        for server, known_map in ((linked, known_linked), (twin, known_twin)):
            known = np.array([known_map.get(int(k), -1) for k in keys], np.int32)
            # the copies came from the server's epoch, except at step 3 (as after a reload: every key sent)
            epoch = server.epoch if step != 3 else server.epoch + 1
            stale = [("t", keys, known, 1)]
            if server is linked:
                answer = link.call("push_pull_stale", parts, step, worker, participants, pulls, stale, epoch).result(10)
            else:
                answer = twin.push_pull_stale(parts, step, worker, participants, pulls, stale, epoch)
            ack, rows, (server_epoch, [(sent_rows, clocks, sent, table_rows)]) = answer
            for k, c in zip(keys, clocks):
                known_map[int(k)] = int(c)
            epochs[id(server)] = server_epoch
            answers.append((ack, rows, sent_rows, clocks, sent, table_rows))
        (ack, rows, sent_rows, clocks, sent, table_rows), (ack_py, rows_py, *expected) = answers
        assert isinstance(ack, PushAck) and ack == ack_py
        for got, want in zip(rows, rows_py):
            np.testing.assert_array_equal(got, want)
        for got, want in zip((sent_rows, clocks, sent), expected[:3]):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
        assert table_rows == expected[3]
        if step == 3:
            assert sent.all()  # another epoch: every key sent
    assert epochs[id(linked)] == linked.epoch
    _same(linked, twin)
    assert linked.core.counters()["requests"] == 5
    stats, stats_py = linked.stats(), twin.stats()
    for counter in ("pulls", "keys_pulled", "bytes_in", "bytes_out"):
        assert stats[counter] == stats_py[counter], counter


# ---- table groups (issue #49): a group's part and pull, one array each, served by one native call -------------
PAIR = xdl_ec.Table("v", DIM, optim.SGD(learning_rate=0.1), init.RandomUniform(-0.1, 0.1), seed=29)


def _group_steps(count: int) -> List[Tuple[Any, ...]]:
    """push_pull arguments where tables t and v (one dim, their own optimizers and seeds) go as one group part and
    one group pull, after table w's plain part and pull."""
    rng = np.random.default_rng(5)
    out = []
    for step in range(1, count + 1):
        t_keys, v_keys = np.unique(rng.integers(0, 40, 20)), np.unique(rng.integers(0, 40, 9))
        keys = np.concatenate([t_keys, v_keys]).astype(np.int64)
        offsets = np.array([0, t_keys.size, keys.size], np.int64)
        grads = rng.standard_normal((keys.size, DIM)).astype(np.float32)
        wide = rng.integers(0, 10, 6).astype(np.int64)
        parts = [
            ("w", wide, rng.standard_normal((wide.size, 2)).astype(np.float32), 3 * step - 2),
            (("t", "v"), offsets, keys, grads, 3 * step - 1),
        ]
        pull_keys = np.concatenate([rng.integers(0, 60, 7), rng.integers(0, 60, 5)]).astype(np.int64)
        pulls = [("w", wide), (("t", "v"), np.array([0, 7, 12], np.int64), pull_keys, DIM)]
        out.append((parts, step, 0, 1, pulls))
    return out


def _as_tables(args: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """The same step as the tables' own parts and pulls (what a group stands for)."""
    parts, step, worker, participants, pulls = args
    (w, (tables, offsets, keys, grads, first)) = parts
    own = [w] + [
        (t, keys[offsets[i] : offsets[i + 1]], grads[offsets[i] : offsets[i + 1]], first + i)
        for i, t in enumerate(tables)
    ]
    (wp, (_, pull_offsets, pull_keys, _)) = pulls
    own_pulls = [wp] + [(t, pull_keys[pull_offsets[i] : pull_offsets[i + 1]]) for i, t in enumerate(tables)]
    return own, step, worker, participants, own_pulls


@pytest.fixture
def trio() -> Iterator[Tuple[ParameterServer, ParameterServer, ParameterServer, Link]]:
    """A linked server, its twin served in Python, and a third one stepping the tables' own parts."""
    servers = [ParameterServer(0, (SPEC, WIDE, PAIR)) for _ in range(3)]
    link = Link(_Handle(servers[0]), SECRET, caller=0)
    yield servers[0], servers[1], servers[2], link
    link.close()
    for s in servers:
        s.close()


def _digest(server: ParameterServer) -> str:
    h = hashlib.sha256()
    for name in ("t", "v", "w"):
        rows = server.export(name)
        order = np.argsort(rows["keys"])
        for field in ("keys", "values", "state"):
            h.update(np.ascontiguousarray(rows[field][order]).tobytes())
    return h.hexdigest()


def test_a_group_part_and_pull_served_natively_are_the_tables_own(trio: Any) -> None:
    linked, twin, own, link = trio
    for args in _group_steps(5):
        ack, rows = link.call("push_pull", *args).result(10)
        ack_py, rows_py = twin.push_pull(*args)
        ack_own, rows_own = own.push_pull(*_as_tables(args))
        assert ack == ack_py == ack_own  # the last seq: the group's last table's
        assert len(rows) == len(rows_py) == 2  # w's, and ONE array for the group
        for got, want in zip(rows, rows_py):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(rows[1], np.concatenate(rows_own[1:]))
    assert _digest(linked) == _digest(twin) == _digest(own)
    assert linked.last_seq == twin.last_seq == own.last_seq == {0: 15}
    native = linked.core.counters()
    assert native["requests"] == 5 and native["pushes"] == 15  # every table's part, served natively
    for counter in ("pushes", "keys_pushed", "keys_pulled", "bytes_in", "bytes_out"):
        assert linked.stats()[counter] == own.stats()[counter], counter


def test_a_replayed_group_applies_only_the_tables_not_applied_yet(trio: Any) -> None:
    linked, _twin, own, link = trio
    [args] = _group_steps(1)
    own_parts, step, worker, participants, _ = _as_tables(args)
    for server in (linked, own):  # w's and t's parts arrived before (seqs 1, 2), v's (3) did not
        server.push(own_parts[:2], step, worker, participants)
    link.call("push_pull", *args).result(10)
    own.push_pull(*_as_tables(args))
    assert _digest(linked) == _digest(own)
    assert linked.core.counters()["pushes"] == 1  # v's part only


@pytest.mark.parametrize("bad", ["offsets", "dim", "table", "nan"])
def test_a_bad_group_is_declined_natively_and_refused_by_python_with_its_reason(trio: Any, bad: str) -> None:
    linked, twin, _own, link = trio
    [(parts, step, worker, participants, pulls)] = _group_steps(1)
    tables, offsets, keys, grads, first = parts[1]
    if bad == "offsets":
        parts[1] = (tables, offsets[::-1].copy(), keys, grads, first)
        message = "offsets must rise from 0"
    elif bad == "dim":
        parts[1] = (("t", "w"), offsets, keys, grads, first)
        message = r"grads must have shape \(len\(keys\), dim\) = \(8, 2\)"
    elif bad == "table":
        parts[1] = (("t", "x"), offsets, keys, grads, first)
        message = "'x'"
    else:
        grads[-1, 0] = np.inf
        message = "NaN or Inf"
    before = _digest(linked)
    with pytest.raises(ValueError, match=message):
        link.call("push_pull", parts, step, worker, participants, pulls).result(10)
    with pytest.raises(ValueError, match=message):
        twin.push_pull(parts, step, worker, participants, pulls)
    assert _digest(linked) == before
    assert linked.core.counters()["requests"] == 0


def test_a_plain_part_after_a_group_part_is_pickled_keeping_its_order() -> None:
    [(parts, step, worker, participants, pulls)] = _group_steps(1)
    assert _core.push_pull_request(parts, step, worker, participants, pulls) is not None
    assert _core.push_pull_request(parts[::-1], step, worker, participants, pulls) is None
    assert _core.push_pull_request(parts, step, worker, participants, pulls[::-1]) is None
    head, arrays = _core.push_pull_request(parts, step, worker, participants, pulls)
    got = _core.parse_push_pull_request(
        head, [np.frombuffer(np.ascontiguousarray(a).tobytes(), np.uint8) for a in arrays]
    )
    (w, group), (_, group_pull) = got[0], got[4]
    assert w[0] == "w" and group[0] == ("t", "v") and group[4] == parts[1][4]
    for mine, sent in zip(group[1:4], parts[1][1:4]):
        np.testing.assert_array_equal(mine, sent)
    assert group_pull[0] == ("t", "v") and group_pull[3] == DIM
    np.testing.assert_array_equal(group_pull[2], pulls[1][2])
