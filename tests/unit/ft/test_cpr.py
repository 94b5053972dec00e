"""CPR building blocks: interval formulas, access counters, MFU/SSU row selection (deterministic given a seed),
and the partial restore of one server from its full + partial saves with an exact count of the lost updates."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import xdl_ec
from xdl_ec.ft import (
    AccessCounter,
    CheckpointChain,
    CprCheckpointer,
    IntervalPolicy,
    MfuSelector,
    ShardCheckpoint,
    SsuSelector,
    cpr_interval,
    expected_pls,
    parse_interval,
    restore_server,
    row_selection,
    young_interval,
)

# ---- intervals ----------------------------------------------------------------------------------


def test_young_and_cpr_formulas() -> None:
    assert young_interval(8.0, 3600.0) == pytest.approx(240.0)
    assert young_interval(0.0, 10.0) == 0.0
    assert cpr_interval(0.02, 3600.0, 4) == pytest.approx(576.0)  # 2 * 4 * 3600 * 0.02
    assert expected_pls(cpr_interval(0.01, 500.0, 8), 500.0, 8) == pytest.approx(0.01)
    assert expected_pls(100.0, 1000.0) == pytest.approx(0.05)  # full recovery: N = 1
    for bad in (
        lambda: young_interval(-1, 5),
        lambda: young_interval(1, 0),
        lambda: cpr_interval(1.5, 10, 2),
        lambda: cpr_interval(0.1, 10, 0),
        lambda: cpr_interval(0.1, float("nan"), 2),
    ):
        with pytest.raises(ValueError):
            bad()


def test_pls_formula_matches_a_simulation_of_failures() -> None:
    """Poisson failures over a long run, each losing the failed shard's (1/N) updates since the last save."""
    rng = np.random.default_rng(0)
    mtbf, n, duration = 50.0, 4, 2_000_000.0
    interval = cpr_interval(0.03, mtbf, n)
    failures = np.cumsum(rng.exponential(mtbf, size=int(duration / mtbf * 1.2)))
    failures = failures[failures < duration]
    lost_seconds = np.mod(failures, interval) / n  # since the last save (saves every `interval` seconds)
    assert lost_seconds.sum() / duration == pytest.approx(0.03, rel=0.03)


def test_interval_policy_steps_seconds_and_auto() -> None:
    p = IntervalPolicy(steps=5)
    assert [p.due(s, 0.0) for s in (4, 5)] == [False, True]
    p.saved(5, 0.0, 0.1)
    assert not p.due(9, 0.0) and p.due(10, 0.0)
    p.saved(10, 0.0, 0.1)
    p.restart(5, 0.0)  # rolled back to the checkpoint of step 5: the next one is due at step 10 again
    assert not p.due(9, 0.0) and p.due(10, 0.0)
    p = IntervalPolicy(seconds=30.0)
    assert not p.due(1, 100.0) and not p.due(2, 129.0) and p.due(3, 130.0)
    p = IntervalPolicy(auto=True, mtbf_seconds=3600.0)
    assert p.interval_seconds is None and p.due(0, 0.0)  # the first save measures the cost
    p.saved(0, 2.0, 2.0)
    assert p.interval_seconds == pytest.approx(120.0) and not p.due(10, 121.0) and p.due(11, 122.0)
    p.saved(11, 130.0, 8.0)  # mean cost 5 s -> sqrt(2 * 5 * 3600)
    assert p.interval_seconds == pytest.approx(math.sqrt(36000.0))
    with pytest.raises(ValueError, match="exactly one"):
        IntervalPolicy(steps=3, seconds=2.0)
    with pytest.raises(ValueError, match="needs mtbf_seconds"):
        IntervalPolicy(auto=True)


def test_parse_interval() -> None:
    assert parse_interval("500").steps == 500
    assert parse_interval("2.5s").seconds == 2.5
    assert parse_interval(" AUTO ", mtbf_seconds=60).auto
    for bad in ("0", "-3", "5m", "", "1e3s"):
        with pytest.raises(ValueError, match="ckpt interval"):
            parse_interval(bad)
    with pytest.raises(ValueError, match="needs mtbf_seconds"):
        parse_interval("auto")
    with pytest.raises(TypeError):
        parse_interval(30)


# ---- counters and selection ---------------------------------------------------------------------


def test_access_counter_matches_a_reference() -> None:
    rng = np.random.default_rng(1)
    c, ref, ref_all = AccessCounter(), Counter(), Counter()
    c_all = AccessCounter()
    for _ in range(200):
        keys = rng.integers(-(2**62), 2**62, size=3)
        keys = np.concatenate([keys, rng.integers(-50, 50, size=30)])
        c.add(keys)
        c_all.add(keys, once=False)
        ref.update(set(keys.tolist()))
        ref_all.update(keys.tolist())
    keys, counts = c.items()
    assert np.all(np.diff(keys) > 0) and dict(zip(keys.tolist(), counts.tolist())) == dict(ref)
    assert c_all.total() == sum(ref_all.values()) == 200 * 33 and len(c_all) == len(ref_all)
    probe = np.array([0, 7, 10**15, -50], dtype=np.int64)
    assert c.get(probe).tolist() == [ref[k] for k in probe.tolist()]
    c.add(np.array([2**63 + 5], dtype=np.uint64))  # hashed ids wrap bit for bit
    assert c.get([-(2**63) + 5]).tolist() == [1]
    assert c.discard(np.arange(-50, 0)) == len([k for k in ref if -50 <= k < 0])
    assert c.get([-1, 1]).tolist() == [0, ref[1]]
    c.clear()
    assert len(c) == 0 and c.total() == 0 and c.get([1]).tolist() == [0]
    with pytest.raises(TypeError, match="keys must be integers"):
        c.add([1.5])
    c.add([1, 2, 3])
    c.set([1, 3, 7], [5, 0, 2])
    assert c.items()[0].tolist() == [1, 2, 7] and c.items()[1].tolist() == [5, 1, 2] and c.total() == 8
    with pytest.raises(ValueError, match="negative"):
        c.set([1, 2], [1, -1])
    with pytest.raises(ValueError, match="appears twice"):
        c.set([4, 4], [1, 1])
    with pytest.raises(TypeError, match="counts must be integers"):
        c.set([4], [1.0])
    with pytest.raises(ValueError, match="counts must have shape"):
        c.set([4], [1, 2])
    assert c.items()[1].tolist() == [5, 1, 2]  # rejected calls changed nothing


def test_mfu_saves_the_most_updated_rows_and_is_deterministic() -> None:
    rng = np.random.default_rng(2)
    a, b, other = MfuSelector(0.1, seed=7), MfuSelector(0.1, seed=7), MfuSelector(0.1, seed=8)
    ref = Counter()
    for batch in range(300):
        keys = np.minimum(rng.zipf(1.3, size=40), 2000).astype(np.int64)
        for s in (a, b, other):
            s.record("t", keys, batch)
        ref.update(set(keys.tolist()))
    chosen = a.select("t", 1000)
    assert chosen.size == 100 and np.array_equal(chosen, b.select("t", 1000))
    threshold = min(ref[k] for k in chosen.tolist())
    assert all(n <= threshold for k, n in ref.items() if k not in set(chosen.tolist()))
    assert all(ref[k] > threshold for k in sorted(ref, key=ref.get)[-50:] if ref[k] > threshold)
    # Ties at the threshold are broken by the seed: same set above the threshold, maybe other tied keys.
    above = {k for k, n in ref.items() if n > threshold}
    assert above <= set(other.select("t", 1000).tolist())
    a.mark_saved("t", chosen)
    assert a.counter("t").get(chosen).sum() == 0 and a.select("t", 1000).size == 100
    assert not set(a.select("t", 1000).tolist()) & set(chosen.tolist())
    a.mark_saved("t")
    assert a.select("t", 1000).size == 0
    assert MfuSelector(0.5).select("never", 10).size == 0
    with pytest.raises(ValueError, match="fraction"):
        MfuSelector(0.0)
    with pytest.raises(ValueError, match="num_rows"):
        a.select("t", -1)


def test_mfu_ties_are_broken_by_the_seed() -> None:
    picks = []
    for seed in (0, 0, 1):
        s = MfuSelector(0.1, seed=seed)
        s.record("t", np.arange(1000))  # every key counted once: all tied
        picks.append(s.select("t", 1000))
    assert np.array_equal(picks[0], picks[1]) and not np.array_equal(picks[0], picks[2])


def test_ssu_samples_batches_by_seed_and_saves_their_rows() -> None:
    s, same = SsuSelector(0.25, seed=3), SsuSelector(0.25, seed=3)
    sampled = [b for b in range(4000) if s.sampled(b)]
    assert sampled == [b for b in range(4000) if same.sampled(b)]
    assert abs(len(sampled) / 4000 - 0.25) < 0.03
    assert sampled != [b for b in range(4000) if SsuSelector(0.25, seed=4).sampled(b)]
    expected = set()
    for b in range(40):
        keys = np.arange(b * 10, b * 10 + 10)
        s.record("t", keys, b)
        if s.sampled(b):
            expected.update(keys.tolist())
    assert s.select("t").tolist() == sorted(expected) and expected
    s.mark_saved("t", s.select("t")[:3])
    assert len(s.select("t")) == len(expected) - 3
    s.mark_saved("t")
    assert s.select("t").size == 0 and s.select("absent").size == 0
    assert all(SsuSelector(1.0).sampled(b) for b in range(10))
    batches = np.array([0, 1, 2**40, 2**63 - 1], dtype=np.int64)  # the scalar hash is the vectorised one
    assert [row_selection._key_hash_int(int(b), 3) for b in batches] == row_selection.key_hash(batches, 3).tolist()
    with pytest.raises(ValueError, match="batch is required"):
        s.record("t", [1])
    with pytest.raises(ValueError, match="batch: must be an int"):
        s.sampled(-1)


# ---- partial restore ----------------------------------------------------------------------------


def _rows_by_key(table) -> dict:
    e = table.export()
    return {int(k): (v.tobytes(), s.tobytes()) for k, v, s in zip(e["keys"], e["values"], e["state"])}


@pytest.mark.parametrize("mode", ["mfu", "ssu"])
def test_partial_restore_reloads_each_row_as_of_its_last_save_and_counts_lost_updates(
    tmp_path: Path, mode: str
) -> None:
    t = xdl_ec.EmbeddingTable("t", 4, "adagrad", seed=1, block_slots=32)
    ledger = {"t": AccessCounter()}
    selector = MfuSelector(0.2, seed=3) if mode == "mfu" else SsuSelector(0.3, seed=3)
    chain = CheckpointChain(tmp_path / "server-1")
    pushes, saved_at = Counter(), {}
    expected_rows = {}
    rng = np.random.default_rng(5)
    for step in range(1, 26):
        keys = np.minimum(rng.zipf(1.4, size=60), 800).astype(np.int64)
        t.push(keys, rng.normal(size=(60, 4)).astype(np.float32), step=step)
        ledger["t"].add(keys)
        selector.record("t", keys, step)
        pushes.update(set(keys.tolist()))
        if step == 10:
            chain.save_full(step, {"t": t}, update_counts={"t": ledger["t"].get})
            selector.mark_saved("t")
            expected_rows = _rows_by_key(t)
            saved_at = {k: pushes[k] for k in expected_rows}
        if step in (15, 20):
            chosen = selector.select("t", len(t))
            assert chosen.size > 0
            chain.save_partial(step, {"t": t}, {"t": chosen}, update_counts={"t": ledger["t"].get})
            selector.mark_saved("t", chosen)
            now = _rows_by_key(t)
            for k in chosen.tolist():
                expected_rows[k] = now[k]
                saved_at[k] = pushes[k]
    # Server 1 fails after step 25: its shard is dropped, a fresh one is rebuilt from its own saves.
    result = restore_server(chain, {"t": t}, ledger)
    restored = result.tables["t"]
    assert restored is not t and result.step == 20 and len(result.checkpoints) == 3
    assert _rows_by_key(restored) == expected_rows and result.restored_rows == len(expected_rows)
    lost = {k: n - saved_at.get(k, 0) for k, n in pushes.items() if n > saved_at.get(k, 0)}
    assert result.lost_updates == sum(lost.values()) > 0
    assert result.lost_rows == len(lost)
    assert result.unsaved_rows == len(set(pushes) - set(saved_at)) > 0
    # Saving everything right before the failure loses nothing.
    chain.save_partial(25, {"t": t}, {"t": t.export()["keys"]}, update_counts={"t": ledger["t"].get})
    result = restore_server(chain, {"t": t}, ledger)
    assert result.lost_updates == 0 and _rows_by_key(result.tables["t"]) == _rows_by_key(t)


def test_restore_before_any_save_starts_fresh_and_loses_everything(tmp_path: Path) -> None:
    t = xdl_ec.EmbeddingTable("t", 4, "sgd")
    ledger = {"t": AccessCounter()}
    for _ in range(3):
        t.push([1, 2, 2], np.ones((3, 4), np.float32))
        ledger["t"].add([1, 2, 2])
    result = restore_server(CheckpointChain(tmp_path / "none"), {"t": t}, ledger)
    assert len(result.tables["t"]) == 0 and result.step is None
    assert result.lost_updates == 6 and result.lost_rows == 2 and result.unsaved_rows == 2


def test_chain_keeps_the_newest_full_save_and_refuses_bad_input(tmp_path: Path) -> None:
    t = xdl_ec.EmbeddingTable("t", 4, "adagrad")
    t.push(np.arange(20), np.ones((20, 4), np.float32))
    chain = CheckpointChain(tmp_path / "s")
    with pytest.raises(ValueError, match="no full checkpoint yet"):
        chain.save_partial(1, {"t": t}, {"t": [1]})
    chain.save_full(1, {"t": t})
    chain.save_partial(2, {"t": t}, {"t": [1, 2]})
    (tmp_path / "s" / ".tmp-full-000009-step-000000000009-dead").mkdir()  # a save that crashed
    chain.save_full(3, {"t": t})
    chain.save_partial(4, {"t": t}, {"t": [3]})
    names = sorted(p.name for p in (tmp_path / "s").iterdir())
    assert names == ["full-000003-step-000000000003", "partial-000004-step-000000000004"]
    assert [c.step for c in chain.chain()] == [3, 4] and chain.nbytes() > 0
    partial = chain.chain()[1].directory / "table-0000.values.npy"
    partial.write_bytes(partial.read_bytes()[:-5])
    with pytest.raises(ValueError, match=r"partial-000004-step-000000000004/table-0000\.values\.npy: truncated"):
        restore_server(chain, {"t": t})
    with pytest.raises(ValueError, match="a partial save cannot start a restore"):
        restore_server([ShardCheckpoint.open(chain.chain()[1].directory)], {"t": t})
    with pytest.raises(ValueError, match="keep_full"):
        CheckpointChain(tmp_path, keep_full=0)


@pytest.mark.parametrize("mode", ["mfu", "ssu"])
def test_cpr_checkpointer_two_failures_of_one_server_while_the_other_keeps_its_state(tmp_path: Path, mode: str) -> None:
    """Two servers (key % 2); server 1 fails twice. Each restore brings every row back as of its newest save and
    counts exactly the pushes since; the second count does not include the first failure's losses again."""
    servers = {s: {"t": xdl_ec.EmbeddingTable("t", 4, "adagrad", seed=s)} for s in range(2)}
    ledgers = {s: {"t": AccessCounter()} for s in range(2)}
    cprs = {
        s: CprCheckpointer(tmp_path / f"server-{s}", mode, fraction=0.25, full_every=3, seed=s, ledger=ledgers[s])
        for s in range(2)
    }
    pushes = Counter()  # reference bookkeeping of server 1 only
    saved_rows, saved_count, kinds = {}, {}, []
    rng = np.random.default_rng(11)
    for step in range(1, 41):
        keys = np.minimum(rng.zipf(1.3, size=80), 3000).astype(np.int64)
        for s, tables in servers.items():
            mine = keys[keys % 2 == s]
            tables["t"].push(mine, rng.normal(size=(mine.size, 4)).astype(np.float32), step=step)
            ledgers[s]["t"].add(mine)
            cprs[s].record("t", mine, step)
        pushes.update(set(keys[keys % 2 == 1].tolist()))
        if step % 4 == 0:
            kinds.append(cprs[1].next_is_full())
            for s in range(2):
                saved = cprs[s].save(step, servers[s])
                if s == 1:
                    rows = _rows_by_key(servers[1]["t"])
                    for k in saved.read("t")["keys"].tolist():
                        saved_rows[k], saved_count[k] = rows[k], pushes[k]
        if step in (18, 35):  # server 1 dies: its table is dropped and rebuilt from its own saves
            other = _rows_by_key(servers[0]["t"])
            result = cprs[1].restore(servers[1])
            servers[1] = result.tables
            assert _rows_by_key(servers[1]["t"]) == saved_rows
            lost = sum(n - saved_count.get(k, 0) for k, n in pushes.items())
            assert result.lost_updates == lost > 0
            assert _rows_by_key(servers[0]["t"]) == other  # the survivor keeps its state
            pushes = Counter({k: saved_count[k] for k in pushes if k in saved_count})  # what the rows now hold
    assert kinds[:6] == [True, False, False, True, False, False]
    stats = cprs[1].stats()
    assert stats["saves"] == 10 and stats["bytes_written"] > 0 and stats["mode"] == mode
    with pytest.raises(ValueError, match="mode must be one of"):
        CprCheckpointer(tmp_path / "x", "lru")
    with pytest.raises(ValueError, match="full_every"):
        CprCheckpointer(tmp_path / "x", full_every=0)
