"""The DeltaForwarder binding: shard mutations recorded without leaving C++, delivered to in-process holders by its
thread and to remote ones through take/ack/fail; bad input refused with the shard unchanged."""

from __future__ import annotations

import time
from typing import Any, List, Tuple

import numpy as np
import pytest

from support.parity_shards import encoded_parity, small_shard
from xdl_ec import _core

N, K, R = 3, 2, 1


def _cluster() -> Tuple[List[Any], List[Any], List[Any]]:
    shards = [small_shard() for _ in range(N)]
    bs, rb = int(shards[0].block_slots), int(shards[0].record_bytes)
    holders = [_core.ParityHolder(i, N, K, R, {"t": bs * rb}) for i in range(N)]
    forwarders = [_core.DeltaForwarder(i, N, K, R, {"t": (bs, rb)}) for i in range(N)]
    for f in forwarders:
        for h in f.holders:
            f.set_holder(h, holders[h])
    return shards, holders, forwarders


def _drain(forwarders: List[Any]) -> None:
    deadline = time.monotonic() + 10
    while any(f.progress()["pending"] for f in forwarders):
        assert time.monotonic() < deadline, "forwarders did not drain"
        time.sleep(0.001)


def test_pushes_and_inserting_pulls_keep_parity_equal_to_the_encoded_data() -> None:
    shards, holders, forwarders = _cluster()
    rng = np.random.default_rng(0)
    for step in range(1, 11):
        for s in range(N):
            keys = rng.integers(0, 60, 12).astype(np.int64)
            shards[s].pull(keys, forwarder=forwarders[s], table="t")
            shards[s].push(
                keys,
                rng.standard_normal((12, 4)).astype(np.float32),
                step,
                forwarder=forwarders[s],
                table="t",
                pushes={0: step},
            )
    _drain(forwarders)
    layout = _core.StripeLayout(N, K, R)
    stripes = max(-(-int(s.num_blocks) // K) * N for s in shards)
    rb = int(shards[0].record_bytes)
    for stripe in range(stripes):
        server, c = layout.parity_member(stripe, 0)
        stored, applied = holders[server].read_block("t", c, rb, 0, rb)
        assert np.array_equal(stored, encoded_parity(shards, stripe, K, R)), f"stripe {stripe}"
        assert all(v == forwarders[s].seq for s, v in applied.items())
    for s in range(N):
        assert forwarders[s].durable_seq(0) == 10
        assert forwarders[s].progress()["worker_seqs"] == {0: 10}


def test_a_remote_holder_is_served_through_take_and_ack() -> None:
    shards, holders, forwarders = _cluster()
    f = forwarders[0]
    generation = f.set_holder(1, None)
    keys = np.arange(0, 40, 3, dtype=np.int64)
    shards[0].push(keys, np.ones((keys.size, 4), np.float32), 1, forwarder=f, table="t", pushes={3: 1})
    assert f.take(1, generation + 1, 0.01) is None  # a transport of another link gets nothing
    taken = f.take(1, generation, 1.0)
    assert taken is not None
    batches, durable, link, last = taken
    assert batches.dtype == np.uint8 and last == 1 and durable == 0
    assert f.durable_seq(3) == 0
    f.ack(1, link, holders[1].apply(0, batches, durable))
    _drain(forwarders)
    assert f.durable_seq(3) == 1
    assert f.take(1, generation, 0.01) is None


def test_bad_forwarding_input_changes_nothing() -> None:
    shards, _, forwarders = _cluster()
    keys = np.array([1, 2, 3], np.int64)
    grads = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="no table 'other'"):
        shards[0].push(keys, grads, 1, forwarder=forwarders[0], table="other")
    with pytest.raises(ValueError, match="either return_deltas or forwarder"):
        shards[0].push(keys, grads, 1, return_deltas=True, forwarder=forwarders[0], table="t")
    with pytest.raises(ValueError, match="no table"):
        shards[0].pull(keys, forwarder=forwarders[0], table="")
    assert len(shards[0]) == 0 and forwarders[0].seq == 0
    with pytest.raises(ValueError, match="holds no parity"):
        forwarders[0].set_holder(0, None)
    with pytest.raises(ValueError):
        _core.DeltaForwarder(5, N, K, R, {"t": (8, 64)})


def test_scrubber_over_the_live_path_finds_exactly_the_stripe_of_a_flipped_bit() -> None:
    """The C++ Scrubber (what ErasureCoded.verify runs) reading shards and ParityHolders through callbacks: clean
    after forwarded training, and one bit flipped behind parity's back shows as that stripe's parity block."""
    shards, holders, forwarders = _cluster()
    rng = np.random.default_rng(1)
    for step in range(1, 6):
        for s in range(N):
            keys = rng.integers(0, 90, 16).astype(np.int64)
            shards[s].push(
                keys,
                rng.standard_normal((16, 4)).astype(np.float32),
                step,
                forwarder=forwarders[s],
                table="t",
                pushes={0: step},
            )
    for f in forwarders:
        f.flush()
    _drain(forwarders)
    bs, rb = int(shards[0].block_slots), int(shards[0].record_bytes)

    def data(server: int, block: int, offset: int, width: int) -> np.ndarray:
        whole = shards[server].read_block(block).reshape(bs, rb)
        return np.ascontiguousarray(whole[:, offset : offset + width]).reshape(-1)

    def parity(server: int, block: int, offset: int, width: int) -> np.ndarray:
        return holders[server].read_block("t", block, rb, offset, width)[0]

    scrubber = _core.Scrubber(N, K, R, bs, rb)
    stripes = max(-(-int(s.num_blocks) // K) * N for s in shards)
    assert stripes > N and scrubber.scrub(stripes, data, parity) == []
    keys, values, state = shards[2].export()
    row = 11  # export is in slot order: row 11 is slot 11, local data block 1
    values.view(np.uint32)[row, 3] ^= np.uint32(1 << 7)  # one bit of one float
    shards[2].load(keys[row : row + 1], values[row : row + 1], state[row : row + 1])  # no forwarder: parity misses it
    stripe, _ = _core.StripeLayout(N, K, R).data_slot(2, row // bs)
    holder, c = _core.StripeLayout(N, K, R).parity_member(stripe, 0)
    assert scrubber.scrub(stripes, data, parity) == [(stripe, 0, holder, c)]
