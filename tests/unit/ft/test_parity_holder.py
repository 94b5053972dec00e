"""xdl_ec._core.ParityHolder through its binding: resent batches change nothing, rollback and reset restore exact
earlier states, its parity is the encoding of the data, and bad input is a clear error that changes nothing."""

from __future__ import annotations

import threading
from typing import Dict, List, Tuple

import numpy as np
import pytest

from support.parity_reference import route
from xdl_ec import _core

N, K, R = 5, 3, 2
TABLES = {"emb": (8, 24), "wide": (4, 40)}  # name -> (block_slots, record_bytes)
CYCLES = 2
Batch = Tuple[int, Dict[str, np.ndarray], Dict[int, int]]


class Cluster:
    """N servers' records, mutated at random; each mutation of a sender is its next seq, one batch per holder."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.layout = _core.StripeLayout(N, K, R)
        self.data = {t: np.zeros((N, CYCLES * K * slots, rb), np.uint8) for t, (slots, rb) in TABLES.items()}
        self.seqs = [0] * N
        self.holders = [
            sorted(
                {
                    self.layout.parity_member(self.layout.data_slot(s, b)[0], i)[0]
                    for b in range(CYCLES * K)
                    for i in range(R)
                }
            )
            for s in range(N)
        ]

    def block_bytes(self) -> Dict[str, int]:
        return {t: slots * rb for t, (slots, rb) in TABLES.items()}

    def mutate(self, sender: int, count: int = 10) -> Dict[int, Batch]:
        self.seqs[sender] += 1
        seq = self.seqs[sender]
        stamp = {0: 2 * seq, 3: 3 * seq + sender}
        out: Dict[int, Batch] = {h: (seq, {}, dict(stamp)) for h in self.holders[sender]}
        for table, records in self.data.items():
            slots = self.rng.choice(records.shape[1], size=min(count, records.shape[1]), replace=False).astype(
                np.uint32
            )
            fresh = self.rng.integers(0, 256, size=(len(slots), records.shape[2]), dtype=np.uint8)
            xor = records[sender, slots] ^ fresh
            records[sender, slots] = fresh
            for h, update in route(self.layout, sender, slots, xor, TABLES[table][0]).items():
                out[h][1][table] = update
        return out

    def streams_to(self, holder: int, rounds: int) -> Dict[int, List[Batch]]:
        """``rounds`` mutations of every other server: {sender: its batches for ``holder``, in seq order}."""
        streams: Dict[int, List[Batch]] = {}
        for _ in range(rounds):
            for sender in range(N):
                if sender != holder and holder in self.holders[sender]:
                    streams.setdefault(sender, []).append(self.mutate(sender)[holder])
        return streams

    def expected_parity(self, table: str, holder: int, c: int) -> np.ndarray:
        slots, rb = TABLES[table]
        stripe, i = self.layout.parity_slot(holder, c)
        rows = []
        for j in range(K):
            server, block = self.layout.data_member(stripe, j)
            rows.append(self.data[table][server, block * slots : (block + 1) * slots].ravel())
        return _core.ErasureCode(K, R).encode(np.stack(rows))[i]


def wire(batches: List[Batch]) -> np.ndarray:
    return _core.serialize_batches(batches)


def all_bytes(holder, blocks: int = CYCLES * R) -> List[np.ndarray]:
    return [holder.read_block(t, c, rb, 0, rb)[0] for t, (_, rb) in TABLES.items() for c in range(blocks)]


def assert_same_blocks(a: List[np.ndarray], b: List[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_serialize_parse_round_trip() -> None:
    cluster = Cluster(1)
    batches = [cluster.mutate(0, 100)[cluster.holders[0][0]] for _ in range(3)] + [(4, {}, {})]
    back = _core.parse_batches(wire(batches))
    assert [(s, sorted(u), w, f) for s, u, w, f in back] == [(s, sorted(u), w, s) for s, u, w in batches]
    for (_, got, _, _), (_, sent, _) in zip(back, batches):
        for table in sent:
            assert got[table].dtype == np.uint8
            np.testing.assert_array_equal(got[table], sent[table])
    from_bytes = _core.parse_batches(bytes(wire(batches)))  # bytes objects are accepted too
    assert [(s, w) for s, _, w, _ in from_bytes] == [(s, w) for s, _, w, _ in back]
    np.testing.assert_array_equal(wire(back), wire(batches))


def test_parity_is_the_encoding_of_the_data() -> None:
    cluster = Cluster(2)
    holders = [_core.ParityHolder(h, N, K, R, cluster.block_bytes()) for h in range(N)]
    rng = np.random.default_rng(0)
    for _ in range(25):
        sender = int(rng.integers(N))
        for h, batch in cluster.mutate(sender).items():
            assert holders[h].apply(sender, wire([batch]), 0) == batch[0]
    for h, holder in enumerate(holders):
        for table, (_, rb) in TABLES.items():
            for c in range(CYCLES * R):
                block, _ = holder.read_block(table, c, rb, 0, rb)
                np.testing.assert_array_equal(block, cluster.expected_parity(table, h, c))
    assert sum(h.bytes for h in holders) > 0


def test_resent_batches_give_the_bytes_of_applying_each_once() -> None:
    cluster = Cluster(3)
    holder = _core.ParityHolder(0, N, K, R, cluster.block_bytes())
    once = _core.ParityHolder(0, N, K, R, cluster.block_bytes())
    streams = cluster.streams_to(0, 8)
    assert len(streams) >= 2
    for sender, stream in streams.items():
        # in chunks, each resending the previous chunk's last batch
        for at in range(0, len(stream), 3):
            chunk = stream[max(0, at - 1) : at + 3]
            assert holder.apply(sender, wire(chunk), at - 2) == chunk[-1][0]
            assert holder.worker_seqs(sender) == chunk[-1][2]
        for batch in stream:
            once.apply(sender, wire([batch]), 0)
    assert holder.applied_all() == once.applied_all() == {s: len(st) for s, st in streams.items()}
    assert_same_blocks(all_bytes(holder), all_bytes(once))
    for table, (_, rb) in TABLES.items():
        for c in range(CYCLES * R):
            columns, versions = holder.read_block(table, c, rb, 4, 9)
            whole = once.read_block(table, c, rb, 0, rb)[0].reshape(-1, rb)
            np.testing.assert_array_equal(columns, whole[:, 4:13].reshape(-1))
            assert versions == holder.applied_all()
        assert holder.num_blocks(table) == once.num_blocks(table)
    assert holder.bytes == once.bytes > 0


def test_rollback_and_reset_restore_exact_earlier_states() -> None:
    cluster = Cluster(4)
    h = cluster.holders[0][0]
    holder = _core.ParityHolder(h, N, K, R, cluster.block_bytes())
    stream = [cluster.mutate(0, 30)[h] for _ in range(6)]
    holder.apply(0, wire(stream[:1]), 0)
    at1 = all_bytes(holder)
    holder.apply(0, wire(stream[1:2]), 0)
    at2 = all_bytes(holder)
    holder.apply(0, wire(stream[2:]), 1)
    with pytest.raises(ValueError, match="undo log starts at seq 2"):
        holder.rollback(0, 0)
    assert holder.applied(0) == 6
    assert holder.rollback(0, 2) == stream[1][2]
    assert holder.applied(0) == 2
    assert_same_blocks(all_bytes(holder), at2)
    assert holder.rollback(0, 1) == stream[0][2]  # the base: seq 1 left the log
    assert_same_blocks(all_bytes(holder), at1)
    holder.reset_sender(0, 9, {1: 40})
    assert holder.applied(0) == 9 and holder.worker_seqs(0) == {1: 40}
    assert holder.rollback(0, 9) == {1: 40}
    data = np.full(holder.block_bytes("emb"), 7, np.uint8)
    before = all_bytes(holder)
    for expected in ({0: 8}, {0: 9, 4: 1}):  # not the applied versions: refused, nothing written
        assert not holder.write_block_if("emb", 1, data, expected)
    assert_same_blocks(all_bytes(holder), before)
    assert holder.write_block_if("emb", 1, data, {0: 9, 4: 0})  # a sender never seen counts as 0
    np.testing.assert_array_equal(holder.read_block("emb", 1, 24, 0, 24)[0], data)


def test_concurrent_senders_from_python_threads() -> None:
    cluster = Cluster(5)
    streams = cluster.streams_to(0, 20)
    holder = _core.ParityHolder(0, N, K, R, cluster.block_bytes())
    errors: List[BaseException] = []

    def send(sender: int) -> None:
        try:
            for batch in streams[sender]:
                holder.apply(sender, wire([batch]), 0)
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=send, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert holder.applied_all() == {s: len(stream) for s, stream in streams.items()}
    for table, (_, rb) in TABLES.items():
        for c in range(CYCLES * R):
            np.testing.assert_array_equal(
                holder.read_block(table, c, rb, 0, rb)[0], cluster.expected_parity(table, 0, c)
            )


def test_bad_input_is_a_clear_error_and_changes_nothing() -> None:
    cluster = Cluster(6)
    h = cluster.holders[0][0]
    holder = _core.ParityHolder(h, N, K, R, cluster.block_bytes())
    stream = [cluster.mutate(0, 100)[h] for _ in range(3)]
    holder.apply(0, wire(stream[:1]), 0)
    before = all_bytes(holder)
    good = wire(stream[1:2])

    def unchanged() -> None:
        assert holder.applied_all() == {0: 1}
        assert holder.worker_seqs(0) == stream[0][2]
        assert_same_blocks(all_bytes(holder), before)

    with pytest.raises(TypeError, match="batches: expected uint8 bytes"):
        holder.apply(0, good.astype(np.float64), 0)
    with pytest.raises(TypeError, match="batches: expected a 1-D uint8 numpy array or bytes, got list"):
        holder.apply(0, list(good), 0)
    with pytest.raises(ValueError, match="batches: expected a 1-D"):
        holder.apply(0, good.reshape(1, -1), 0)
    with pytest.raises(ValueError, match="ParseBatches: truncated"):
        holder.apply(0, good[:-5], 0)
    with pytest.raises(ValueError, match="trailing bytes"):
        holder.apply(0, np.concatenate([good, good[:3]]), 0)
    with pytest.raises(ValueError, match="bad magic"):
        holder.apply(0, good[4:], 0)
    renamed = (stream[1][0], {"nope" if t == "wide" else t: u for t, u in stream[1][1].items()}, stream[1][2])
    with pytest.raises(ValueError, match=r"no parity of table 'nope' \(it has 'emb', 'wide'\)"):
        holder.apply(0, wire([renamed]), 0)
    with pytest.raises(ValueError, match="batch seq 3 .* arrived after seq 1"):
        holder.apply(0, wire(stream[2:]), 0)
    unchanged()
    with pytest.raises(ValueError, match="data has 10 bytes, a parity block of table 'emb' has 192"):
        holder.write_block_if("emb", 0, np.zeros(10, np.uint8), {0: 1})
    with pytest.raises(ValueError, match="no parity of table 'x'"):
        holder.write_block("x", 0, np.zeros(192, np.uint8))
    with pytest.raises(ValueError, match="no parity of table 'x'"):
        holder.read_block("x", 0, 24, 0, 24)
    with pytest.raises(ValueError, match="offset/width"):
        holder.read_block("emb", 0, 24, 20, 8)
    with pytest.raises(ValueError, match="record_bytes"):
        holder.read_block("emb", 0, 0, 0, 1)
    with pytest.raises(ValueError, match="to_seq must be >= 0"):
        holder.rollback(0, -1)
    unchanged()
    with pytest.raises(TypeError, match=r"batches\[0\]: expected a \(seq"):
        _core.serialize_batches([[1, {}, {}]])
    with pytest.raises(ValueError, match=r"batches\[0\] table 'emb': ParityUpdate::Parse"):
        _core.serialize_batches([(1, {"emb": np.zeros(30, np.uint8)}, {})])
    with pytest.raises(ValueError, match="seqs start at 1"):
        _core.serialize_batches([(0, {}, {})])
    with pytest.raises(ValueError, match="ErasureCode: k=3, r=9 out of range"):
        _core.ParityHolder(0, 12, 3, 9, {"emb": 192})
    with pytest.raises(ValueError, match="block bytes of table 'emb' must be >= 1"):
        _core.ParityHolder(0, 5, 3, 2, {"emb": 0})
    holder.close()
    assert holder.closed
    with pytest.raises(_core.HolderClosed, match=f"parity holder on server {h} is closed"):
        holder.apply(0, good, 0)
    with pytest.raises(RuntimeError):
        holder.apply(0, good, 0)
    unchanged()  # reads still work
