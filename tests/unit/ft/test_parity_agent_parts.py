"""The parts of a server's ParityAgent on their own: an injected crash's states, the push of a server armed to die
after applying it (applied and answered, never forwarded), and the parity holder's side refusing what it must."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest

from xdl_ec.ft.held_parity import HeldParity
from xdl_ec.ft.injected_crash import InjectedCrash
from xdl_ec.ft.parity_agent import ParityAgent
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.server import ParameterServer
from xdl_ec.sparse import init, optim
from xdl_ec.sparse.table_config import Table

DIM = 4
SPEC = Table("t", DIM, optim.Adagrad(0.1), init.RandomUniform(-0.05, 0.05), seed=11, block_slots=8)
SECRET = JobSecret.generate()


def test_an_injected_crash_is_armed_taken_once_and_stays_taken() -> None:
    crash = InjectedCrash()
    assert not crash.active and not crash.take_before_apply() and not crash.take_after_apply()
    crash.arm_before_apply()
    assert crash.active and crash.take_before_apply() and not crash.take_before_apply()
    assert not crash.active and not crash.taken  # a crash before the apply leaves nothing to skip after it
    crash.arm_after_apply()
    assert crash.active and not crash.taken
    assert crash.take_after_apply() and crash.taken and not crash.take_after_apply()
    assert crash.active  # taken: every later push skips forwarding


@pytest.fixture
def server() -> Iterator[ParameterServer]:
    host = ParameterServer(0, (SPEC,))
    shard = host.table("t").shard
    tables = {"t": (int(shard.block_slots), int(shard.record_bytes))}
    host.attach_agent(lambda h: ParityAgent(0, 3, 2, 1, tables, secret=SECRET))
    try:
        yield host
    finally:
        host.close()


def test_a_push_armed_to_crash_after_its_apply_is_applied_and_never_forwarded(server: ParameterServer) -> None:
    agent = server.agent
    assert isinstance(agent, ParityAgent)
    table = server.table("t")
    keys = np.arange(6, dtype=np.int64)
    grads = np.ones((6, DIM), np.float32)
    agent.push(server, table, keys, grads, 1, {0: 1})
    recorded = agent.forwarder.progress()["seq"]
    assert recorded >= 1 and agent.native_path()[0]
    agent.arm_crash_after_apply(server)
    assert agent.native_path()[0] is False  # the core must leave this push to the agent
    before = table.pull(keys).copy()
    agent.push(server, table, keys, grads, 2, {0: 2})
    assert server.crash_requested
    assert not np.array_equal(table.shard.pull(keys), before)  # applied (and answered)
    assert agent.forwarder.progress()["seq"] == recorded  # its deltas were never recorded for the holders
    agent.push(server, table, keys, grads, 3, {0: 3})  # a dying server forwards nothing more
    assert agent.forwarder.progress()["seq"] == recorded and agent.native_path()[0] is False


def test_the_holder_side_refuses_a_stale_write_and_a_closed_holder_has_no_address() -> None:
    held = HeldParity(1, 3, 2, 1, {"t": (8, 24)}, SECRET)
    assert held.security_events() == []  # no receiver yet
    block, versions = held.read("t", 0, 0, 24)
    assert versions == {} and not block.any()
    assert not held.write_if("t", 0, np.full(8 * 24, 7, np.uint8), {0: 3})  # it applied nothing of sender 0
    assert not held.read("t", 0, 0, 24)[0].any()
    held.close()
    with pytest.raises(ValueError, match="parity holder is closed"):
        held.address(lambda: False)
