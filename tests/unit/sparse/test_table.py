"""EmbeddingTable: rows, optimizers' bookkeeping, erase/reuse, growth, export/load, memory and bad input."""

from __future__ import annotations

import gc
import gzip

import numpy as np
import pytest

import xdl_ec
from support.paths import SHARED_DATA  # noqa: E402
from xdl_ec import _core
from xdl_ec.sparse import init, optim

DATA = SHARED_DATA


def table(dim: int = 8, **kw) -> xdl_ec.EmbeddingTable:
    kw.setdefault("optimizer", optim.Adagrad(0.1))
    return xdl_ec.EmbeddingTable("t", dim, **kw)


def snapshot(t: xdl_ec.EmbeddingTable):
    """Everything a rejected call must leave alone: exported rows, raw block bytes, row count, step."""
    e = t.export()
    blocks = b"".join(t.shard.read_block(b).tobytes() for b in range(t.shard.num_blocks))
    return e["keys"].tobytes(), e["values"].tobytes(), e["state"].tobytes(), blocks, len(t), t.step


# ---- rows -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 3, 2763])
def test_pulled_rows_are_aligned_for_tensorflow_and_the_callers_own(n: int) -> None:
    t = table(dim=16)
    rows = t.pull(np.arange(n, dtype=np.int64))
    assert rows.shape == (n, 16) and rows.flags.c_contiguous and rows.flags.writeable
    assert rows.ctypes.data % 64 == 0  # TF's alignment: an eager tensor wraps the buffer instead of copying it
    if n:
        before = t.pull(np.arange(n, dtype=np.int64))
        rows[:] = 7.0  # the caller's copy: the table is not changed through it
        np.testing.assert_array_equal(t.pull(np.arange(n, dtype=np.int64)), before)


def test_pull_inserts_rows_that_depend_on_seed_and_key_only() -> None:
    keys = np.array([3, -9, 1 << 62, 0, 77], dtype=np.int64)
    a = table(block_slots=2, seed=5)
    b = table(block_slots=1024, seed=5, optimizer="sgd")
    rows_a = a.pull(keys)
    rows_b = b.pull(keys[::-1])[::-1]
    assert rows_a.dtype == np.float32 and rows_a.shape == (5, 8)
    np.testing.assert_array_equal(rows_a, rows_b)  # other shard, order, block size and optimizer
    for i, k in enumerate(keys):
        np.testing.assert_array_equal(rows_a[i], _core.initialize_row(a.initializer.to_config(), 5, int(k), 8))
    assert not np.array_equal(rows_a, table(seed=6).pull(keys))
    assert len(a) == 5
    c = table()
    dup = c.pull([42, 42, 42])  # a new key repeated in one pull is inserted once
    assert len(c) == 1 and np.array_equal(dup[0], dup[1]) and np.array_equal(dup[0], dup[2])
    np.testing.assert_array_equal(a.pull(keys), rows_a)  # a second pull inserts nothing
    assert len(a) == 5


def test_initializer_statistics() -> None:
    keys = np.arange(20000, dtype=np.int64)  # sequential keys must still look random
    rows = table(16, initializer=init.TruncatedNormal(0.5, 0.1)).pull(keys)
    assert np.all(np.abs(rows - 0.5) <= 0.2 + 1e-6)
    assert abs(rows.mean() - 0.5) < 0.002
    assert abs(rows.std() - 0.1 * 0.87962566) < 0.002  # stddev of a normal truncated at 2 sigma
    rows = table(16, initializer=init.RandomUniform(-1.0, 3.0)).pull(keys)
    assert rows.min() >= -1.0 and rows.max() < 3.0
    assert abs(rows.mean() - 1.0) < 0.02 and abs(rows.var() - 16.0 / 12.0) < 0.02
    # Neighbouring elements and keys are uncorrelated.
    assert abs(np.corrcoef(rows[:, 0], rows[:, 1])[0, 1]) < 0.03
    assert abs(np.corrcoef(rows[:-1, 0], rows[1:, 0])[0, 1]) < 0.03
    np.testing.assert_array_equal(table(4, initializer="zeros").pull([1, 2]), np.zeros((2, 4), np.float32))
    np.testing.assert_array_equal(
        table(4, initializer=init.Constant(0.25)).pull([1]), np.full((1, 4), 0.25, np.float32)
    )


def test_push_sums_duplicates_and_counts_steps() -> None:
    t = table(2, optimizer=optim.SGD(0.5), initializer="zeros")
    t.push(np.array([4, 9, 4]), np.array([[1, 2], [10, 20], [3, 4]], np.float32))
    np.testing.assert_array_equal(t.pull([4, 9]), [[-2.0, -3.0], [-5.0, -10.0]])
    assert t.step == 1
    t.push([4], [[1.0, 1.0]], step=100)  # an explicit step leaves the counter alone
    assert t.step == 1
    t.push([4], [[1.0, 1.0]])
    assert t.step == 2


@pytest.mark.parametrize("optimizer", [optim.SGD(0.5), optim.Adagrad(0.1), optim.Adam(0.01)], ids=str)
def test_push_with_repeats_takes_that_many_steps_of_the_mean(optimizer) -> None:
    """A row that sums c gradients (a worker cache's write-back) takes c steps of sum / c: bit for bit c pushes."""
    once, steps = table(4, optimizer=optimizer), table(4, optimizer=optimizer)
    keys = np.array([3, 8, 3, 5])
    grads = np.arange(16, dtype=np.float32).reshape(4, 4) / 7 - 1
    repeats = np.array([2, 3, 1, 1])  # key 3: 2 + 1 = 3 steps of its summed gradient / 3
    once.push(keys, grads, step=4, repeats=repeats)
    for key, total, count in ((3, grads[0] + grads[2], 3), (8, grads[1], 3), (5, grads[3], 1)):
        for _ in range(count):
            steps.push([key], (total * np.float32(1.0 / count))[None], step=4)
    assert snapshot(once)[:4] == snapshot(steps)[:4]
    # ones over unique keys are the plain push (a repeated key's counts add up: its rows came from several steps)
    plain, counted = table(4, optimizer=optimizer), table(4, optimizer=optimizer)
    plain.push(keys[1:], grads[1:], step=2)
    counted.push(keys[1:], grads[1:], step=2, repeats=np.ones(3, np.int64))
    assert snapshot(plain) == snapshot(counted)


def test_adam_bias_correction_uses_the_given_step() -> None:
    a = table(4, optimizer=optim.Adam(0.01))
    b = table(4, optimizer=optim.Adam(0.01))
    g = np.ones((1, 4), np.float32)
    a.push([1], g, step=1)
    b.push([1], g, step=50)
    assert not np.array_equal(a.pull([1]), b.pull([1]))
    c = table(4, optimizer=optim.Adam(0.01))
    c.push([1], g)  # own counter: step 1
    np.testing.assert_array_equal(a.pull([1]), c.pull([1]))


def test_find_does_not_insert() -> None:
    t = table()
    t.pull([1, 2])
    rows, found = t.find([2, 5, 1])
    assert found.tolist() == [True, False, True]
    np.testing.assert_array_equal(rows[1], np.zeros(8, np.float32))
    np.testing.assert_array_equal(rows[[0, 2]], t.pull([2, 1]))
    assert len(t) == 2


def test_erase_frees_slots_for_reuse_and_rows_come_back_initial() -> None:
    t = table(4, block_slots=4)
    keys = np.arange(100, 110)
    initial = t.pull(keys)
    t.push(keys, np.ones((10, 4), np.float32))
    assert t.erase([101, 105, 109, 12345]) == 3
    assert t.erase([101]) == 0
    assert len(t) == 7
    stats = t.memory_stats()
    assert stats["slots"] == 10 and stats["free_slots"] == 3
    t.pull([500, 501, 502, 503])
    stats = t.memory_stats()
    assert stats["slots"] == 11 and stats["free_slots"] == 0  # three reused, one new
    np.testing.assert_array_equal(t.pull([105]), initial[[5]])


def test_growth_across_many_blocks_and_export_load_round_trip() -> None:
    rng = np.random.default_rng(0)
    t = table(3, optimizer=optim.Ftrl(0.1, l1=0.01), block_slots=16)
    keys = rng.choice(1 << 50, size=5000, replace=False).astype(np.int64)
    t.push(keys, rng.normal(size=(5000, 3)).astype(np.float32))
    assert len(t) == 5000 and t.shard.num_blocks == 5000 // 16 + 1
    t.erase(keys[:1000])
    e = t.export()
    assert e["keys"].shape == (4000,) and e["values"].shape == (4000, 3) and e["state"].shape == (4000, 6)
    assert set(e["keys"].tolist()) == set(keys[1000:].tolist())
    u = table(3, optimizer=optim.Ftrl(0.1, l1=0.01), block_slots=16)
    u.load(e["keys"], e["values"], e["state"])
    f = u.export()
    for name in ("keys", "values", "state"):
        np.testing.assert_array_equal(f[name], e[name])
    np.testing.assert_array_equal(u.pull(keys[1000:]), t.pull(keys[1000:]))
    # Same pushes from here on give the same rows: the state came along.
    g = rng.normal(size=(4000, 3)).astype(np.float32)
    t.push(keys[1000:], g, step=2)
    u.push(keys[1000:], g, step=2)
    np.testing.assert_array_equal(u.pull(keys[1000:]), t.pull(keys[1000:]))
    # state=None: fresh optimizer state (FTRL: accum = initial accumulator, linear = 0).
    v = table(3, optimizer=optim.Ftrl(0.1), block_slots=16)
    v.load(e["keys"][:2], e["values"][:2])
    np.testing.assert_array_equal(v.export()["state"], np.tile(np.float32([0.1] * 3 + [0.0] * 3), (2, 1)))


def test_memory_stats_and_index_overhead() -> None:
    t = table(16, block_slots=1024)
    t.pull(np.arange(100_000))
    s = t.memory_stats()
    assert s["live_rows"] == 100_000 and s["record_bytes"] == 12 + 4 * 32
    assert s["slot_bytes"] == 98 * 1024 * s["record_bytes"]
    assert s["index_bytes"] <= 0.25 * s["raw_bytes"]
    assert s["index_overhead"] == pytest.approx(s["index_bytes"] / s["raw_bytes"])
    assert s["bytes_per_row"] < 1.3 * s["record_bytes"]


def test_key_dtypes_and_noncontiguous_inputs() -> None:
    t = table(4, optimizer=optim.SGD(0.5), initializer="zeros")
    t.pull(np.array([1, 2, 3], dtype=np.int32))
    t.pull(np.array([2**64 - 1], dtype=np.uint64))  # wraps bit for bit to -1
    assert sorted(t.export()["keys"].tolist()) == [-1, 1, 2, 3]
    keys = np.arange(10)[::2]  # non-contiguous
    grads = np.ones((5, 8), np.float64)[:, ::2]  # non-contiguous float64: converted
    t.push(keys, grads)
    np.testing.assert_array_equal(t.pull(keys), np.full((5, 4), -0.5, np.float32))
    t.push([0], np.ones((1, 4), np.float16))
    np.testing.assert_array_equal(t.pull([0]), np.full((1, 4), -1.0, np.float32))
    assert t.pull([]).shape == (0, 4)
    t.push([], np.zeros((0, 4), np.float32))


# ---- bad input: a clear error naming the argument, and not one byte changed ----------------------

BAD_CALLS = [
    ("pull float keys", lambda t: t.pull(np.array([1.0, 2.0])), TypeError, "keys"),
    ("pull bool keys", lambda t: t.pull(np.array([True])), TypeError, "keys"),
    ("pull str keys", lambda t: t.pull(["a"]), TypeError, "keys"),
    ("pull object keys", lambda t: t.pull(np.array([1, None], dtype=object)), TypeError, "keys"),
    ("pull scalar key", lambda t: t.pull(np.int64(3)), ValueError, "keys"),
    ("pull 2-D keys", lambda t: t.pull(np.ones((2, 2), np.int64)), ValueError, "keys"),
    ("push float keys", lambda t: t.push([1.5], np.zeros((1, 8))), TypeError, "keys"),
    ("push count mismatch", lambda t: t.push([1, 2, 3], np.zeros((2, 8))), ValueError, "grads"),
    ("push dim mismatch", lambda t: t.push([1, 2], np.zeros((2, 7))), ValueError, "grads"),
    ("push 1-D grads", lambda t: t.push([1], np.zeros(8)), ValueError, "grads"),
    ("push int grads", lambda t: t.push([1], np.zeros((1, 8), np.int32)), TypeError, "grads"),
    ("push NaN grad", lambda t: t.push([1, 99], np.array([[0.1] * 8, [0.1] * 7 + [np.nan]])), ValueError, "grads"),
    ("push Inf grad", lambda t: t.push([1, 99], np.array([[np.inf] + [0.1] * 7, [0.1] * 8])), ValueError, "grads"),
    ("push float64 overflow", lambda t: t.push([1], np.full((1, 8), 1e300)), ValueError, "grads"),
    ("push step 0", lambda t: t.push([1], np.zeros((1, 8)), step=0), ValueError, "step"),
    ("push step float", lambda t: t.push([1], np.zeros((1, 8)), step=1.0), TypeError, "step"),
    ("push repeats 0", lambda t: t.push([1, 2], np.ones((2, 8)), repeats=[1, 0]), ValueError, "repeats"),
    ("push repeats shape", lambda t: t.push([1, 2], np.ones((2, 8)), repeats=[1]), ValueError, "repeats"),
    ("push repeats float", lambda t: t.push([1], np.ones((1, 8)), repeats=[1.5]), TypeError, "repeats"),
    ("push repeats too many", lambda t: t.push([1, 1], np.ones((2, 8)), repeats=[65536, 1]), ValueError, "repeats"),
    ("erase float keys", lambda t: t.erase([1.0]), TypeError, "keys"),
    ("find 2-D keys", lambda t: t.find([[1]]), ValueError, "keys"),
    ("load values shape", lambda t: t.load([1, 2], np.zeros((2, 3))), ValueError, "values"),
    ("load state shape", lambda t: t.load([1], np.zeros((1, 8)), np.zeros((1, 9))), ValueError, "state"),
    ("load duplicate keys", lambda t: t.load([5, 5], np.zeros((2, 8))), ValueError, "unique"),
    ("load NaN values", lambda t: t.load([5], np.full((1, 8), np.nan)), ValueError, "values"),
]


@pytest.mark.parametrize("what,call,error,names", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_is_rejected_without_changing_a_byte(what, call, error, names) -> None:
    t = table(8, block_slots=4)
    t.pull(np.arange(10))
    t.push(np.arange(5), np.ones((5, 8), np.float32))
    before = snapshot(t)
    with pytest.raises(error, match=names):
        call(t)
    assert snapshot(t) == before


@pytest.mark.parametrize(
    "kwargs,error,names",
    [
        (dict(optimizer=optim.SGD), TypeError, "optimizer"),
        (dict(optimizer="rmsprop"), ValueError, "adagrad, adam, ftrl, momentum, sgd"),
        (dict(optimizer=42), TypeError, "optimizer"),
        (dict(initializer="glorot"), ValueError, "truncated_normal"),
        (dict(dim=0), ValueError, "dim"),
        (dict(dim=2.0), TypeError, "dim"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(block_slots=0), ValueError, "block_slots"),
        (dict(name=""), TypeError, "name"),
    ],
)
def test_bad_table_arguments(kwargs, error, names) -> None:
    args = dict(name="t", dim=4)
    args.update(kwargs)
    with pytest.raises(error, match=names):
        xdl_ec.EmbeddingTable(**args)


@pytest.mark.parametrize(
    "make,names",
    [
        (lambda: optim.SGD(-0.1), "learning_rate"),
        (lambda: optim.Adagrad(learning_rate=float("nan")), "learning_rate"),
        (lambda: optim.Momentum(0.1, momentum=-1), "momentum"),
        (lambda: optim.Adam(beta1=1.0), "beta1"),
        (lambda: optim.Adam(epsilon=0.0), "epsilon"),
        (lambda: optim.Ftrl(0.0), "learning_rate"),
        (lambda: optim.Ftrl(0.1, learning_rate_power=0.5), "learning_rate_power"),
        (lambda: optim.Ftrl(0.1, l1=-1.0), "l1"),
        (lambda: optim.get("adagrad", learning_rate=-1.0), "learning_rate"),
        (lambda: init.TruncatedNormal(stddev=0.0), "stddev"),
        (lambda: init.RandomUniform(1.0, 1.0), "minval"),
        (lambda: init.Constant(float("inf")), "value"),
    ],
)
def test_bad_hyper_parameters_name_the_field(make, names) -> None:
    with pytest.raises(ValueError, match=names):
        make()


def test_optimizer_and_initializer_lookup_by_name() -> None:
    assert optim.get("Adam", learning_rate=0.5) == optim.Adam(learning_rate=0.5)
    assert isinstance(optim.get("ftrl"), optim.Ftrl)
    o = optim.Momentum(0.1)
    assert optim.get(o) is o
    assert init.get("uniform", minval=0.0, maxval=1.0) == init.RandomUniform(0.0, 1.0)
    assert isinstance(init.get("zeros"), init.Zeros)
    with pytest.raises(TypeError, match="optimizer"):
        optim.get(None)


# ---- binding details others build on ---------------------------------------------------------------


def test_deltas_are_old_xor_new_record_bytes() -> None:
    t = table(4, block_slots=8, optimizer=optim.Adam(0.1))
    shard = t.shard
    t.pull(np.arange(6))
    image = np.concatenate([shard.read_block(b) for b in range(shard.num_blocks)])
    slots, xor = shard.push(np.array([2, 9, 2]), np.ones((3, 4), np.float32), 1, return_deltas=True)
    assert slots.dtype == np.uint32 and xor.shape == (2, t.record_bytes)
    rb = t.record_bytes
    image = np.concatenate([image, np.zeros(shard.block_bytes * shard.num_blocks - image.size, np.uint8)])
    for s, d in zip(slots, xor):
        image[s * rb : (s + 1) * rb] ^= d
    after = np.concatenate([shard.read_block(b) for b in range(shard.num_blocks)])
    np.testing.assert_array_equal(image, after)
    layout = shard.layout
    recs = [shard.read_slots(int(s), 1)[0] for s in slots]
    keys = [r[layout.key_offset : layout.key_offset + 8].view(np.int64)[0] for r in recs]
    assert sorted(keys) == [2, 9]
    rec = recs[keys.index(9)]
    # The insert of 9 is a delta from the all-zero free record: the delta is the record itself.
    np.testing.assert_array_equal(xor[keys.index(9)], rec)
    flags = rec[layout.flags_offset : layout.flags_offset + 4].view(np.uint32)[0]
    assert flags == layout.live_flag | 2 << layout.clock_shift  # live, at clock 2: inserted (1), then stepped
    np.testing.assert_array_equal(rec[layout.value_offset : layout.state_offset].view(np.float32), t.pull([9])[0])
    rows, (ins_slots, ins_xor) = shard.pull(np.array([9, 50]), return_deltas=True)
    assert ins_slots.tolist() == [7]  # only the insert of 50


def test_restore_through_the_binding() -> None:
    src = table(4, block_slots=4)
    src.push(np.arange(20), np.ones((20, 4), np.float32))
    src.erase([3, 7])
    keys, slots = [], []
    for b in range(src.shard.num_blocks):
        recs = src.shard.read_block(b).reshape(-1, src.record_bytes)
        for i, r in enumerate(recs):
            if r[8:12].view(np.uint32)[0]:
                keys.append(r[:8].view(np.int64)[0])
                slots.append(b * 4 + i)
    dst = table(4, block_slots=4)
    faults = []

    def handler(b: int) -> np.ndarray:
        faults.append(b)
        return src.shard.read_block(b)

    dst.shard.begin_restore(np.array(keys), np.array(slots, np.uint32), src.memory_stats()["slots"], handler)
    assert dst.shard.missing_blocks == src.shard.num_blocks
    np.testing.assert_array_equal(dst.pull([13]), src.pull([13]))
    assert faults == [3]  # key 13 lives in slot 13: block 3, faulted alone
    # the missing blocks a batch touches, ascending, each once (block 3 restored, 999 unknown): restored together
    assert dst.shard.missing_blocks_of(np.array([18, 1, 13, 2, 999, 17])).tolist() == [0, 4]
    with pytest.raises(ValueError, match="missing_blocks_of: keys must be 1-D"):
        dst.shard.missing_blocks_of(np.zeros((2, 2), np.int64))
    for b in range(src.shard.num_blocks):
        dst.shard.restore_block(b, src.shard.read_block(b))
    assert dst.shard.missing_blocks == 0
    for name in ("keys", "values", "state"):
        np.testing.assert_array_equal(dst.export()[name], src.export()[name])
    with pytest.raises(ValueError, match="block_bytes"):
        dst.shard.restore_block(0, np.zeros(3, np.uint8))
    with pytest.raises(IndexError, match="out of range"):
        dst.shard.restore_block(999, src.shard.read_block(0))


def test_registry_handle_lifetime() -> None:
    t = table()
    h = t.handle
    assert _core.registered_shard(h) is t.shard
    t.close()
    with pytest.raises(ValueError, match="unknown shard handle"):
        _core.registered_shard(h)
    with pytest.raises(ValueError, match="closed"):
        _ = t.handle
    t.close()  # idempotent
    u = table()
    h = u.handle
    del u
    gc.collect()
    with pytest.raises(ValueError, match="unknown shard handle"):
        _core.registered_shard(h)


def test_trains_on_real_criteo_ids() -> None:
    path = DATA / "criteo_kaggle_train_head10k.tsv.gz"
    if not path.exists():
        pytest.skip(f"real Criteo rows not found at {path} (see /work/shared/data/README.md)")
    with gzip.open(path, "rt") as f:
        lines = [next(f) for _ in range(2000)]
    ids = []
    for line in lines:
        cols = line.rstrip("\n").split("\t")
        for j, v in enumerate(cols[14:40]):
            ids.append((j << 56) | (int(v, 16) if v else 0))  # field in the top byte, like XDL's hashing
    keys = np.array(ids, dtype=np.int64)
    t = table(8, optimizer=optim.SGD(0.5), initializer="zeros")
    t.push(keys, np.ones((len(keys), 8), np.float32))
    unique, counts = np.unique(keys, return_counts=True)
    assert len(t) == len(unique)
    # SGD from zeros with grads of 1: each row moved by -0.5 * (occurrences in the batch).
    np.testing.assert_array_equal(t.pull(unique)[:, 0], (-0.5 * counts).astype(np.float32))


def test_restore_handler_errors_reach_the_caller_and_leave_the_block_missing() -> None:
    src = table(4, block_slots=4)
    src.pull(np.arange(8))
    dst = table(4, block_slots=4)
    calls = []

    def failing(b: int) -> np.ndarray:
        calls.append(b)
        if len(calls) == 1:
            raise RuntimeError("parity peer unreachable")
        if len(calls) == 2:
            return np.zeros(3, np.uint8)  # wrong size
        return src.shard.read_block(b)

    dst.shard.begin_restore(np.arange(8), np.arange(8, dtype=np.uint32), 8, failing)
    with pytest.raises(RuntimeError, match="parity peer unreachable"):
        dst.pull([1])
    with pytest.raises(ValueError, match="block_bytes"):
        dst.pull([1])
    assert dst.shard.missing_blocks == 2
    np.testing.assert_array_equal(dst.pull([1]), src.pull([1]))
    assert dst.shard.missing_blocks == 1 and calls == [0, 0, 0]
    assert not dst.shard.block_missing(0) and dst.shard.block_missing(1)
