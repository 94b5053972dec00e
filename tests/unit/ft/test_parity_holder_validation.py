"""ParityHolder.apply takes a batch only when it agrees with the stripe layout (cpp/include/xdl_ec/parity_holder.h),
one test per rule, through the binding a ParityReceiver uses: the batches are routed by the independent Python
reference (support.parity_reference), serialised, then altered as a confused or hostile peer would. A refused
batch raises BatchRefused (a ValueError) naming the rule and changes no byte, seq or allocation."""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from support.parity_reference import route
from xdl_ec import _core

N, K, R = 7, 3, 2  # holder 4 protects servers 0..3 ((4 - s) mod 7 in [1, 5)), not 5 or 6
HOLDER, SLOTS, RECORD = 4, 4, 16


def _update(sender: int, slots: List[int], seed: int = 0) -> np.ndarray:
    layout = _core.StripeLayout(N, K, R)
    xor = np.random.default_rng(seed).integers(1, 256, (len(slots), RECORD), dtype=np.uint8)
    return route(layout, sender, np.asarray(slots, np.int64), xor, SLOTS)[HOLDER]


def _batch(seq: int, update: np.ndarray) -> np.ndarray:
    return _core.serialize_batches([(seq, {"t": update}, {0: seq})])


def _entries(update: np.ndarray) -> Tuple[bytes, List[List[int]], bytes]:
    raw = update.tobytes()
    count = struct.unpack_from("<Q", raw, 16)[0]
    entries = [list(struct.unpack_from("<QIBB", raw, 24 + 14 * e)) for e in range(count)]
    return raw[:24], entries, raw[24 + 14 * count :]


def _rebuilt(header: bytes, entries: List[List[int]], deltas: bytes) -> np.ndarray:
    return np.frombuffer(header + b"".join(struct.pack("<QIBB", *e) for e in entries) + deltas, np.uint8)


def _altered(update: np.ndarray, **fields: int) -> np.ndarray:
    """The update with its first entry's fields (parity_block, offset, parity_member, data_member) changed."""
    header, entries, deltas = _entries(update)
    names = ["parity_block", "offset", "parity_member", "data_member"]
    for name, value in fields.items():
        entries[0][names.index(name)] = value
    return _rebuilt(header, entries, deltas)


def _state(holder: Any) -> Tuple[Dict[int, int], int, List[bytes]]:
    blocks = [holder.read_block("t", c, RECORD, 0, RECORD)[0].tobytes() for c in range(holder.num_blocks("t"))]
    return holder.applied_all(), holder.bytes, blocks


@pytest.fixture
def holder() -> Any:
    h = _core.ParityHolder(HOLDER, N, K, R, {"t": SLOTS * RECORD})
    h.apply(0, _batch(1, _update(0, list(range(SLOTS * K)))), 0)  # cycle 0 of server 0
    return h


def _refused(holder: Any, sender: int, batch: np.ndarray, why: str) -> None:
    before = _state(holder)
    with pytest.raises(_core.BatchRefused, match=why):
        holder.apply(sender, batch, 0)
    assert _state(holder) == before


def test_a_routed_batch_of_a_protected_sender_applies(holder: Any) -> None:
    assert [s for s in range(N + 2) if holder.protects(s)] == [0, 1, 2, 3]
    assert holder.apply(0, _batch(2, _update(0, [1, 5])), 0) == 2
    assert issubclass(_core.BatchRefused, ValueError)


def test_its_own_index_as_sender_is_refused(holder: Any) -> None:
    _refused(holder, HOLDER, _core.serialize_batches([(10**9, {}, {0: 1}, 1)]), "refused batches from itself")


@pytest.mark.parametrize("stranger", [5, 6, 7, 1 << 20])
def test_a_sender_it_protects_no_stripe_of_is_refused(holder: Any, stranger: int) -> None:
    _refused(holder, stranger, _batch(1, _update(0, [1])), "protects no stripe of that server")


def test_an_update_naming_another_source_or_holder_is_refused(holder: Any) -> None:
    update = _update(0, [1, 2])
    raw = bytearray(update.tobytes())
    struct.pack_into("<I", raw, 4, 1)  # source: server 1 (holder 4 protects it too)
    _refused(holder, 0, _batch(2, np.frombuffer(bytes(raw), np.uint8)), "names server 1 as its source")
    raw = bytearray(update.tobytes())
    struct.pack_into("<I", raw, 8, 3)
    _refused(holder, 0, _batch(2, np.frombuffer(bytes(raw), np.uint8)), "meant for parity holder 3")


def test_an_entry_disagreeing_with_the_layout_is_refused(holder: Any) -> None:
    update = _update(0, [1])  # holder 4 is parity member 1 of the stripes where server 0 is data member 0
    _, entries, _ = _entries(update)
    block, offset, i, j = entries[0]
    assert (i, j) == (1, 0)
    _refused(holder, 0, _batch(2, _altered(update, data_member=1)), "data member 1 of that stripe is server 1")
    _refused(holder, 0, _batch(2, _altered(update, parity_member=0)), "is parity member 1 of its stripe")
    _refused(holder, 0, _batch(2, _altered(update, data_member=3)), "data member")  # outside [0, k)


def test_an_entry_off_a_record_boundary_is_refused(holder: Any) -> None:
    update = _update(0, [1])
    _, entries, _ = _entries(update)
    _refused(holder, 0, _batch(2, _altered(update, offset=entries[0][1] + 1)), "not at a record boundary")


@pytest.mark.parametrize("block", [100_000_001, (1 << 36) + 1, (1 << 63) + 1])
def test_a_block_far_beyond_the_extent_is_refused_without_allocating(holder: Any, block: int) -> None:
    _refused(holder, 0, _batch(2, _altered(_update(0, [1]), parity_block=block)), "beyond the table's extent")


def test_growth_is_what_the_senders_inserts_justify_or_the_driver_declared(holder: Any) -> None:
    far = _update(0, [6 * SLOTS * K])  # cycle 6 of server 0; one entry, the extent is cycle 0
    _refused(holder, 0, _batch(2, far), "beyond the table's extent")
    filled = _update(0, list(range(SLOTS * K, 6 * SLOTS * K)))  # cycles 1..5 filled in order: 20 entries here
    assert holder.apply(0, _batch(2, filled), 0) == 2
    assert holder.apply(0, _batch(3, far), 0) == 3
    fresh = _core.ParityHolder(HOLDER, N, K, R, {"t": SLOTS * RECORD})  # a replacement, told the rebuild extent
    with pytest.raises(_core.BatchRefused, match="beyond"):
        fresh.apply(1, _batch(1, _update(1, [9 * SLOTS * K])), 0)
    fresh.set_extent("t", 10 * R)
    assert fresh.apply(1, _batch(1, _update(1, [9 * SLOTS * K])), 0) == 1
