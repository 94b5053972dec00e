"""Parity batches between processes (xdl_ec.ft.parity_link): RemoteHolderLinks deliver a DeltaForwarder's batches
over TCP to ParityReceivers, in order and exactly once, so parity equals the encoded data; a holder whose
connection breaks, that refuses, or that a stale address reaches is marked down. Runs without Ray: the links and
receivers are the real ones, only the address lookup (a Ray call in a cluster) is answered in this process."""

from __future__ import annotations

import concurrent.futures
import socket
import time
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from support.parity_shards import encoded_parity, small_shard
from xdl_ec import _core
from xdl_ec.ft import parity_link
from xdl_ec.ft.parity_agent import ParityAgent, parity_agent_for
from xdl_ec.ft.parity_link import ParityReceiver, RemoteHolderLink
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.api import ServerAPI
from xdl_ec.ps.backend import Handle, LocalBackend
from xdl_ec.ps.client import PSClient
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.server import ParameterServer
from xdl_ec.sparse import init, optim
from xdl_ec.sparse.table_config import Table

N, K, R = 3, 2, 1
SECRET = JobSecret.generate()


class AddressHandle(Handle):
    """A holder's server as a RemoteHolderLink sees it: it answers its agent's ``parity_address``."""

    role = "server"

    def __init__(self, index: int, address: Tuple[str, int], holder: Any = None) -> None:
        self.index, self.address, self.holder = index, address, holder
        self.applied_by_call = 0

    def call(self, method: str, *args: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        if args == ("parity_address",):
            future.set_result(self.address)
        else:  # what ParityAgent.apply_parity does behind a Ray call
            assert method == "agent_call" and args[0] == "apply_parity" and self.holder is not None, (method, args)
            self.applied_by_call += 1
            future.set_result(self.holder.apply(*args[1:]))
        return future


@pytest.fixture
def fast_links(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parity_link, "SEND_INTERVAL", 0.01)
    monkeypatch.setattr(parity_link, "POLL_SECONDS", 0.05)


def _cluster() -> Tuple[List[Any], List[Any], List[Any], List[ParityReceiver], Dict[Tuple[int, int], RemoteHolderLink]]:
    """Every holder of every forwarder served through a RemoteHolderLink to its server's ParityReceiver."""
    shards = [small_shard() for _ in range(N)]
    bs, rb = int(shards[0].block_slots), int(shards[0].record_bytes)
    holders = [_core.ParityHolder(i, N, K, R, {"t": bs * rb}) for i in range(N)]
    receivers = [ParityReceiver(h, SECRET, host="127.0.0.1") for h in holders]
    forwarders = [_core.DeltaForwarder(i, N, K, R, {"t": (bs, rb)}) for i in range(N)]
    links = {}
    for i, f in enumerate(forwarders):
        for h in f.holders:
            links[(i, h)] = RemoteHolderLink(
                f, h, AddressHandle(h, receivers[h].address), f.set_holder(h, None), SECRET
            )
    return shards, holders, forwarders, receivers, links


def _close(forwarders: List[Any], receivers: List[ParityReceiver], links: Dict[Any, RemoteHolderLink]) -> None:
    for link in links.values():
        link.close()
    for f in forwarders:
        f.close()
    for r in receivers:
        r.close()


def _wait(condition: Any, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.002)


def _train(shards: List[Any], forwarders: List[Any], steps: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for step in range(1, steps + 1):
        for s in range(N):
            keys = np.unique(rng.integers(0, 60, 12).astype(np.int64))
            shards[s].pull(keys, forwarder=forwarders[s], table="t")
            grads = rng.standard_normal((keys.size, 4)).astype(np.float32)
            shards[s].push(keys, grads, step, forwarder=forwarders[s], table="t", pushes={0: step})


def test_remote_links_keep_parity_equal_to_the_encoded_data(fast_links: None) -> None:
    shards, holders, forwarders, receivers, links = _cluster()
    try:
        _train(shards, forwarders, 12)
        _wait(lambda: not any(f.progress()["pending"] for f in forwarders), "links did not deliver")
        layout = _core.StripeLayout(N, K, R)
        stripes = max(int(s.num_blocks) for s in shards)
        for stripe in range(stripes):
            server, block = layout.parity_member(stripe, 0)
            np.testing.assert_array_equal(
                holders[server].read_block("t", block, int(shards[0].record_bytes), 0, int(shards[0].record_bytes))[0],
                encoded_parity(shards, stripe, K, R),
            )
        for i, f in enumerate(forwarders):
            assert {h: holders[h].applied(i) for h in f.holders} == {h: f.seq for h in f.holders}
            _wait(lambda f=f: f.durable_seq(0) == 12, "durable seq did not reach the last push")
        assert all(link.sends >= 1 and link.bytes_sent > 0 for link in links.values())
        assert sum(r.batches_received for r in receivers) == sum(link.sends for link in links.values())
    finally:
        _close(forwarders, receivers, links)


def test_a_holder_whose_connection_breaks_is_down_as_lost(fast_links: None) -> None:
    shards, holders, forwarders, receivers, links = _cluster()
    try:
        _train(shards, forwarders, 2)
        _wait(lambda: not any(f.progress()["pending"] for f in forwarders), "links did not deliver")
        receivers[1].close()  # server 1's process is gone: its connections break, its port is closed
        _train(shards, forwarders, 2, seed=1)
        for i, f in enumerate(forwarders):
            if 1 in f.holders:
                _wait(lambda f=f: 1 in f.progress()["down"], f"server {i} did not mark holder 1 down")
                assert f.errors == []  # a lost holder is no error to report
                assert f.durable_seq(0) == 2  # what holder 1 applied before it was lost stays the watermark
    finally:
        _close(forwarders, receivers, links)


def test_a_holder_that_refuses_or_is_reached_at_a_stale_address_is_down(fast_links: None) -> None:
    shards, holders, forwarders, receivers, links = _cluster()
    try:
        stale = links[(0, 1)]  # server 0's link to holder 1 now reaches holder 2's receiver (a stale address)
        stale.close()
        links[(0, 1)] = RemoteHolderLink(
            forwarders[0], 1, AddressHandle(1, receivers[2].address), forwarders[0].set_holder(1, None), SECRET
        )
        holders[2].close()  # and holder 2 refuses every batch (HolderClosed)
        _train(shards, forwarders, 2)
        # the wrong receiver ends the handshake (the link claims holder 1): to the link the holder is lost
        _wait(lambda: 1 in forwarders[0].progress()["down"], "the stale link was not marked down")
        assert any("claims to be server 0 linking to holder 1" in e for e in receivers[2].events), receivers[2].events
        _wait(lambda: 2 in forwarders[1].progress()["down"], "the refusing holder was not marked down")
        assert any("HolderClosed" in e for e in forwarders[1].errors), forwarders[1].errors
        assert holders[1].applied(0) == 0  # nothing of server 0 reached the wrong holder or the right one
    finally:
        _close(forwarders, receivers, links)


def test_a_receiver_whose_server_is_crashing_drops_the_connection(fast_links: None) -> None:
    shards, holders, forwarders, receivers, links = _cluster()
    try:
        receivers[1].close()
        crashing = ParityReceiver(holders[1], SECRET, lambda: True, host="127.0.0.1")
        receivers[1] = crashing
        links[(0, 1)].close()
        links[(0, 1)] = RemoteHolderLink(
            forwarders[0], 1, AddressHandle(1, crashing.address), forwarders[0].set_holder(1, None), SECRET
        )
        _train(shards, forwarders, 1)
        _wait(lambda: 1 in forwarders[0].progress()["down"], "the crashing holder was not marked down")
        assert forwarders[0].errors == [] and holders[1].applied(0) == 0
    finally:
        _close(forwarders, receivers, links)


class _StuckReceiver(ParityReceiver):
    """A holder's receiver that completes the handshake, then never reads or answers (a process that hangs)."""

    def _converse(self, conn: socket.socket, peer: str, authenticated: Any) -> None:
        while not self._closed:
            time.sleep(0.05)


def test_a_holder_that_stops_reading_is_down_at_the_call_timeout(
    fast_links: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parity_link, "CALL_TIMEOUT", 0.5)
    shards, holders, forwarders, receivers, links = _cluster()
    stuck = _StuckReceiver(holders[1], SECRET, host="127.0.0.1")
    try:
        links[(0, 1)].close()
        links[(0, 1)] = RemoteHolderLink(
            forwarders[0], 1, AddressHandle(1, stuck.address), forwarders[0].set_holder(1, None), SECRET
        )
        start = time.monotonic()
        _train(shards, forwarders, 1)
        _wait(lambda: 1 in forwarders[0].progress()["down"], "the stuck holder was not marked down")
        assert time.monotonic() - start < 5.0
        assert any("TimeoutError" in e or "LinkTimeout" in e for e in forwarders[0].errors), forwarders[0].errors
        # the other holders, and the other servers' links to holder 1, are untouched
        _wait(lambda: not forwarders[1].progress()["pending"], "server 1's links did not deliver")
        assert forwarders[1].progress()["down"] == []
    finally:
        stuck.close()
        _close(forwarders, receivers, links)


def test_answered_push_acks_drop_durable_pushes_without_asking_the_backend_again() -> None:
    backend = LocalBackend()
    spec = Table("t", 4, optim.Adagrad(0.1), init.RandomUniform(-0.1, 0.1), block_slots=8)
    servers = [backend.start("server", i, ParameterServer, i, (spec,)) for i in range(N)]
    try:
        for s in servers:
            Remote(s, ServerAPI).attach_agent(parity_agent_for, N, K, R, 0, None, SECRET).result()
        for s in servers:
            Remote(s, ParityAgent, agent=True).connect(servers).result()
        client = PSClient(servers, push_log=True)
        rng = np.random.default_rng(3)
        for step in range(1, 6):
            keys = np.unique(rng.integers(0, 100, 20).astype(np.int64))
            acks = client.push({"t": (keys, rng.standard_normal((keys.size, 4)).astype(np.float32))}, step)
            assert client._unread == []  # awaited here: nothing left for the next push to ask about
            for ack in acks:
                assert all(seq > ack.durable for seq in client.push_log[ack.server])
                assert ack.seq in client.push_log[ack.server] or ack.seq <= ack.durable
    finally:
        backend.shutdown()


def test_a_link_that_cannot_connect_to_the_receiver_sends_through_calls(fast_links: None) -> None:
    """A holder whose server answers but whose receiver cannot be reached (e.g. a firewall between nodes): the link
    falls back to calls of apply_parity, and parity stays exact."""
    shards, holders, forwarders, receivers, links = _cluster()
    try:
        closed = socket.create_server(("127.0.0.1", 0))
        unreachable = closed.getsockname()[:2]
        closed.close()  # nothing listens there any more: connecting is refused
        handle = AddressHandle(2, unreachable, holders[2])
        links[(0, 2)].close()
        links[(0, 2)] = RemoteHolderLink(forwarders[0], 2, handle, forwarders[0].set_holder(2, None), SECRET)
        _train(shards, forwarders, 6)
        _wait(lambda: not any(f.progress()["pending"] for f in forwarders), "links did not deliver")
        assert links[(0, 2)].transport.startswith("ray (no connection to") and handle.applied_by_call >= 1
        assert links[(0, 1)].transport == "tcp" and all(f.progress()["down"] == [] for f in forwarders)
        layout = _core.StripeLayout(N, K, R)
        rb = int(shards[0].record_bytes)
        for stripe in range(max(int(s.num_blocks) for s in shards)):
            server, block = layout.parity_member(stripe, 0)
            np.testing.assert_array_equal(
                holders[server].read_block("t", block, rb, 0, rb)[0], encoded_parity(shards, stripe, K, R)
            )
    finally:
        _close(forwarders, receivers, links)


def test_a_link_reports_every_delivery_acked_or_failed(fast_links: None) -> None:
    """on_delivery runs after each send once its answer (or failure) is in: what wakes a ParityAgent.drain."""
    shards, holders, forwarders, receivers, links = _cluster()
    calls: List[int] = []
    try:
        links[(0, 1)].close()
        link = links[(0, 1)] = RemoteHolderLink(
            forwarders[0],
            1,
            AddressHandle(1, receivers[1].address),
            forwarders[0].set_holder(1, None),
            SECRET,
            lambda: calls.append(1),
        )
        _train(shards, forwarders, 4)
        _wait(
            lambda: not forwarders[0].progress()["pending"] and len(calls) == link.sends >= 1,
            "every acked send was not reported",
        )
        receivers[1].close()  # the next send fails: reported too
        _train(shards, forwarders, 1, seed=1)
        _wait(
            lambda: 1 in forwarders[0].progress()["down"] and len(calls) == link.sends,
            "the failed send was not reported",
        )
    finally:
        _close(forwarders, receivers, links)


class _Server:
    """What a ParityAgent reads of its server here: whether it is crashing."""

    crash_requested = False


def test_agent_drain_flushes_its_links_and_returns_once_every_holder_applied_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Links that would wait a minute between sends: drain has them send now, waits until every holder applied
    every delta (durable up to the last push), and the parity equals the encoded data."""
    monkeypatch.setattr(parity_link, "SEND_INTERVAL", 60.0)
    monkeypatch.setattr(parity_link, "POLL_SECONDS", 0.05)
    shards = [small_shard() for _ in range(N)]
    bs, rb = int(shards[0].block_slots), int(shards[0].record_bytes)
    servers = [_Server() for _ in range(N)]
    agents = [ParityAgent(i, N, K, R, {"t": (bs, rb)}, secret=SECRET) for i in range(N)]
    try:
        addresses = [agent.parity_address(server) for agent, server in zip(agents, servers)]
        for i, agent in enumerate(agents):
            for h in agent.forwarder.holders:
                agent.set_holder(servers[i], h, AddressHandle(h, addresses[h]))
        for rounds in (8, 4):  # the first sends go out at once; then each link waits out its interval
            _train(shards, [agent.forwarder for agent in agents], rounds, seed=rounds)
            for i, agent in enumerate(agents):
                progress = agent.drain(servers[i], 30.0)
                assert not progress["pending"] and progress["live_applied"] == progress["seq"] > 0
                assert progress["errors"] == [] and progress["down"] == []
                assert agent.forwarder.durable_seq(0) == 8  # the highest push seq recorded (the first round's)
                assert {h: agents[h].holder.applied(i) for h in agent.forwarder.holders} == {
                    h: progress["seq"] for h in agent.forwarder.holders
                }
        layout = _core.StripeLayout(N, K, R)
        for stripe in range(max(int(s.num_blocks) for s in shards)):
            server, block = layout.parity_member(stripe, 0)
            np.testing.assert_array_equal(
                agents[server].holder.read_block("t", block, rb, 0, rb)[0], encoded_parity(shards, stripe, K, R)
            )
        for bad in (-1, 61, "1", True):
            with pytest.raises(ValueError, match="timeout: must be seconds"):
                agents[0].drain(servers[0], bad)
    finally:
        for agent in agents:
            agent.close()
