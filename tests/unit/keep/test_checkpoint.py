"""Checkpoints: exact round trips for every optimizer, exact job rollback and replay, atomic saves that survive an
interrupted save, and clear errors naming the file for every kind of damage."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import xdl_ec
from xdl_ec import _core
from xdl_ec.ft import CheckpointStore, JobCheckpoint, ShardCheckpoint
from xdl_ec.keep import checkpoint as ckpt_mod
from xdl_ec.model.digest import model_digest
from xdl_ec.sparse import optim

OPTIMIZERS = {
    "sgd": optim.SGD(0.1),
    "momentum": optim.Momentum(0.05, 0.9, use_nesterov=True),
    "adagrad": optim.Adagrad(0.1),
    "adam": optim.Adam(0.01),
    "ftrl": optim.Ftrl(0.1, l1=0.01, l2=0.001),
}


def trained_table(
    name: str = "t", dim: int = 8, optimizer="adagrad", steps: int = 6, seed: int = 1, block_slots: int = 16
) -> xdl_ec.EmbeddingTable:
    t = xdl_ec.EmbeddingTable(name, dim, OPTIMIZERS.get(optimizer, optimizer), seed=seed, block_slots=block_slots)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        keys = rng.integers(-500, 500, size=64)
        t.push(keys, rng.normal(size=(64, dim)).astype(np.float32))
    return t


def by_key(export) -> tuple:
    e = export if isinstance(export, dict) else dict(zip(("keys", "values", "state"), export))
    order = np.argsort(e["keys"])
    return e["keys"][order].tobytes(), e["values"][order].tobytes(), e["state"][order].tobytes()


def blocks(shard) -> bytes:
    return b"".join(shard.read_block(b).tobytes() for b in range(shard.num_blocks))


def blocks_but_clocks(shard) -> bytes:
    """The block bytes with each record's row clock (flags bits 1..31) zeroed: a checkpoint keeps keys, values and
    optimizer state, and a restored row starts a new clock (workers' caches trust no copy across it: the server's
    epoch changes)."""
    records = np.frombuffer(blocks(shard), np.uint8).reshape(-1, shard.record_bytes).copy()
    flags = records[:, 8:12].copy().view("<u4")
    records[:, 8:12] = (flags & np.uint32(1)).view(np.uint8).reshape(-1, 4)
    return records.tobytes()


# ---- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_shard_round_trip_is_exact_and_training_continues_identically(tmp_path: Path, optimizer: str) -> None:
    t = trained_table(optimizer=optimizer)
    t.erase(np.arange(-500, 500, 7))  # freed slots: the restore compacts them, records stay identical by key
    saved = ShardCheckpoint.write(tmp_path / "s", {"t": t}, step=6)
    assert not saved.partial and saved.rows("t") == len(t) and saved.step == 6
    restored = saved.restore({"t": t})["t"]
    assert restored is not t and isinstance(restored, xdl_ec.EmbeddingTable)
    assert by_key(restored.export()) == by_key(t.export())
    assert restored.step == t.step == 6 and restored.optimizer == t.optimizer
    rng = np.random.default_rng(9)
    for _ in range(3):  # the restored table keeps training bit for bit like the original
        keys, grads = rng.integers(-600, 600, size=40), rng.normal(size=(40, 8)).astype(np.float32)
        t.push(keys, grads)
        restored.push(keys, grads)
    assert by_key(restored.export()) == by_key(t.export())


def test_bare_shard_round_trip_gives_identical_block_bytes(tmp_path: Path) -> None:
    t = trained_table(optimizer="adam", block_slots=8)  # no erase: slot layout comes back too
    shard = t.shard
    saved = ShardCheckpoint.write(tmp_path / "s", {"emb": shard}, step=3)
    fresh = saved.restore({"emb": shard})["emb"]
    assert isinstance(fresh, _core.EmbeddingShard) and fresh is not shard
    assert fresh.num_blocks == shard.num_blocks and blocks_but_clocks(fresh) == blocks_but_clocks(shard)
    assert blocks(fresh) != blocks(shard)  # the clocks differ: trained rows are past clock 1, restored ones at it
    assert saved.table_step("emb") is None


def test_empty_table_and_several_tables(tmp_path: Path) -> None:
    a, b = trained_table("a", dim=4), xdl_ec.EmbeddingTable("b", 3, "sgd")
    saved = ShardCheckpoint.write(tmp_path / "s", {"a": a, "b": b})
    out = saved.restore({"a": a, "b": b})
    assert len(out["b"]) == 0 and by_key(out["a"].export()) == by_key(a.export())
    arrays = saved.read("b")
    assert arrays["keys"].shape == (0,) and arrays["values"].shape == (0, 3) and arrays["state"].shape == (0, 0)


def test_partial_save_keeps_only_the_asked_keys(tmp_path: Path) -> None:
    t = trained_table()
    keys = t.export()["keys"]
    chosen = np.concatenate([keys[::5], [10**12]])  # a key that is not in the table is skipped
    saved = ShardCheckpoint.write(
        tmp_path / "p", {"t": t}, keys={"t": chosen}, update_counts={"t": lambda k: np.full(k.size, 7)}
    )
    arrays = saved.read("t")
    assert saved.partial and sorted(arrays["keys"]) == sorted(keys[::5])
    assert np.all(arrays["updates"] == 7)
    rows, found = t.find(arrays["keys"])
    assert found.all() and rows.tobytes() == arrays["values"].tobytes()


# ---- the job-level checkpoint and an exact rollback -------------------------------------------


class ToyJob:
    """Two servers (two tables each), dense weights with a dense optimizer state, a reader position: every step
    is a pure function of (step, state), so a rollback + replay must reproduce the failure-free run exactly."""

    def __init__(self) -> None:
        self.servers = {
            s: {
                "user": xdl_ec.EmbeddingTable("user", 8, "adagrad", seed=s, block_slots=32),
                "item": xdl_ec.EmbeddingTable("item", 4, optim.Adam(0.01), seed=10 + s),
            }
            for s in range(2)
        }
        self.dense = [np.zeros((5, 3), np.float32), np.zeros(3, np.float64)]
        self.dense_opt = [np.zeros((), np.int64), np.zeros((5, 3), np.float32), np.zeros(3, np.float64)]
        self.batch = 0

    def step(self) -> None:
        rng = np.random.default_rng(1000 + self.batch)  # the "reader": batch b is always the same data
        for s, tables in self.servers.items():
            for t in tables.values():
                keys = rng.integers(0, 300, size=50) * 2 + s
                t.push(keys, rng.normal(size=(50, t.dim)).astype(np.float32))
        g = [rng.normal(size=w.shape).astype(w.dtype) for w in self.dense]
        self.dense_opt[0] += 1
        for i, w in enumerate(self.dense):
            self.dense_opt[1 + i] += g[i] * g[i]
            w -= (0.1 * g[i] / (np.sqrt(self.dense_opt[1 + i]) + 1e-7)).astype(w.dtype)
        self.batch += 1

    def digest(self) -> str:
        tables = [model_digest([[t.export()]], [], []) for ts in self.servers.values() for t in ts.values()]
        return " ".join(tables + [model_digest([], self.dense, self.dense_opt)])


def test_job_rollback_and_replay_equals_the_failure_free_run(tmp_path: Path) -> None:
    reference = ToyJob()
    for _ in range(12):
        reference.step()

    job = ToyJob()
    store = CheckpointStore(tmp_path / "ckpt", keep=2)
    for _ in range(12):
        job.step()
        if job.batch in (4, 8):
            store.save(
                job.batch,
                job.servers,
                dense_weights=job.dense,
                dense_optimizer=job.dense_opt,
                reader_position={"batch": job.batch, "epoch": 0},
            )
    assert store.steps() == [4, 8]
    # Failure after step 10 of the second run: everything in memory is gone (training went on past the save).
    job2 = ToyJob()
    for _ in range(10):
        job2.step()
    latest = store.latest()
    assert latest.step == 8 and latest.reader_position == {"batch": 8, "epoch": 0}
    job2.servers = latest.restore(job2.servers)
    job2.dense, job2.dense_opt = latest.dense_weights(), latest.dense_optimizer()
    job2.batch = latest.reader_position["batch"]
    assert [w.dtype for w in job2.dense_opt] == [np.int64, np.float32, np.float64]
    for _ in range(12 - job2.batch):
        job2.step()
    assert job2.digest() == reference.digest() == job.digest()


def test_store_sequence_keep_and_lookup(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    assert store.latest() is None and store.steps() == []
    with pytest.raises(ValueError, match="no committed checkpoint"):
        store.load()
    t = trained_table()
    for step in (5, 9, 9, 12):  # a rolled-back job may save the same step again: sequence numbers differ
        store.save(step, {0: {"t": t}}, reader_position={"batch": step})
    assert store.steps() == [9, 12]
    assert store.load(9).seq == 3 and store.load().step == 12
    with pytest.raises(ValueError, match="step 5"):
        store.load(5)


def test_servers_write_their_parts_then_the_coordinator_commits(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    a, b = trained_table("a", seed=1), trained_table("a", seed=2)
    pending = store.begin(7)
    # As a server in another process would: only the path crosses the process boundary.
    ShardCheckpoint.write(pending.server_dir(0), {"a": a}, step=7, atomic=False)
    ShardCheckpoint.write(pending.server_dir(3), {"a": b}, step=7, atomic=False)
    job = pending.commit(reader_position={"batch": 7})
    assert job.servers == [0, 3] and store.steps() == [7]
    assert by_key(job.server(3).restore({"a": b})["a"].export()) == by_key(b.export())
    with pytest.raises(ValueError, match="already committed"):
        pending.commit()
    # A part saved for another step is refused at commit, and the store keeps its previous checkpoint.
    pending = store.begin(8)
    ShardCheckpoint.write(pending.server_dir(0), {"a": a}, step=6, atomic=False)
    with pytest.raises(ValueError, match="step 6"):
        pending.commit()
    assert store.steps() == [7] and not list(tmp_path.glob(".tmp-*"))


def test_a_server_that_wrote_nothing_where_it_was_told_stops_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a relative root is made absolute: a server in another working directory (a Ray actor) writes where meant
    monkeypatch.chdir(tmp_path)
    store = CheckpointStore("saves")
    assert store.root == tmp_path / "saves"
    pending = store.begin(4)
    assert pending.server_dir(1).is_absolute()
    ShardCheckpoint.write(pending.server_dir(0), {"a": trained_table("a")}, step=4, atomic=False)
    # server 1 was handed its directory and wrote elsewhere: publishing would lose its rows
    with pytest.raises(ValueError, match=r"servers \[1\] were given a directory here and wrote nothing"):
        pending.commit(reader_position={"batch": 4})
    assert store.steps() == [] and not list((tmp_path / "saves").glob(".tmp-*"))


# ---- atomicity --------------------------------------------------------------------------------


def test_exception_mid_save_leaves_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CheckpointStore(tmp_path)
    t = trained_table()
    store.save(1, {0: {"t": t}}, dense_weights=[np.ones(3)], reader_position={"batch": 1})
    before = by_key(t.export())
    t.push([1, 2, 3], np.ones((3, 8), np.float32))
    real = ckpt_mod._write_array
    calls = []

    def failing(path, array):
        calls.append(path)
        if len(calls) == 3:  # dies after the keys and values of the table, before the state
            raise OSError("disk full (injected)")
        return real(path, array)

    monkeypatch.setattr(ckpt_mod, "_write_array", failing)
    with pytest.raises(OSError, match="injected"):
        store.save(2, {0: {"t": t}}, dense_weights=[np.ones(3)], reader_position={"batch": 2})
    monkeypatch.setattr(ckpt_mod, "_write_array", real)
    assert store.steps() == [1] and not list(tmp_path.glob(".tmp-*"))
    latest = store.latest()
    assert latest.step == 1 and by_key(latest.server(0).restore({"t": t})["t"].export()) == before


def test_crash_before_commit_is_invisible_and_cleaned_by_the_next_save(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    t = trained_table()
    store.save(1, {0: {"t": t}})
    pending = store.begin(2)
    pending.save_server(0, {"t": t})  # ...and the coordinator dies here: no commit, no abort
    leftover = list(tmp_path.glob(".tmp-*"))
    assert len(leftover) == 1 and store.steps() == [1] and store.latest().step == 1
    store.save(3, {0: {"t": t}})
    assert not any(p.exists() for p in leftover) and store.steps() == [1, 3]


def test_standalone_shard_save_that_fails_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = trained_table()

    def broken(k):
        raise RuntimeError("counter died (injected)")

    with pytest.raises(RuntimeError, match="injected"):
        ShardCheckpoint.write(tmp_path / "s", {"t": t}, update_counts={"t": broken})
    assert list(tmp_path.iterdir()) == []


# ---- damage and bad input -----------------------------------------------------------------------


@pytest.fixture
def saved_job(tmp_path: Path):
    t = trained_table()
    store = CheckpointStore(tmp_path / "ckpt")
    job = store.save(4, {0: {"t": t}}, dense_weights=[np.arange(6, dtype=np.float32)], reader_position={"batch": 4})
    return store, job, t


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def test_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nowhere.*does not exist"):
        ShardCheckpoint.open(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"nowhere.*does not exist"):
        JobCheckpoint.open(tmp_path / "nowhere")


def test_corrupt_manifest_is_named(saved_job) -> None:
    store, job, t = saved_job
    manifest = job.directory / "MANIFEST.json"
    manifest.write_bytes(manifest.read_bytes()[:40])
    with pytest.raises(ValueError, match=r"MANIFEST\.json: corrupt manifest"):
        store.latest()


def test_edited_manifest_fails_its_checksum(saved_job) -> None:
    store, job, t = saved_job
    path = job.server(0).directory / "MANIFEST.json"
    m = json.loads(path.read_text())
    m["tables"]["t"]["rows"] += 1  # still valid JSON
    path.write_text(json.dumps(m))
    with pytest.raises(ValueError, match=r"server-0000/MANIFEST\.json: manifest checksum mismatch"):
        job.server(0)


def test_swapped_part_fails_the_job_manifest(tmp_path: Path, saved_job) -> None:
    store, job, t = saved_job
    other = ShardCheckpoint.write(tmp_path / "other", {"t": trained_table(seed=5)}, step=4)
    part = job.directory / "server-0000"
    for f in part.iterdir():
        f.unlink()
    for f in other.directory.iterdir():
        (part / f.name).write_bytes(f.read_bytes())
    with pytest.raises(ValueError, match="differs from the one the job manifest"):
        job.server(0)


@pytest.mark.parametrize("field", ["keys", "values", "state"])
def test_flipped_byte_is_a_checksum_error_naming_the_file(saved_job, field: str) -> None:
    store, job, t = saved_job
    path = job.directory / "server-0000" / f"table-0000.{field}.npy"
    _flip_byte(path, path.stat().st_size - 3)
    before = by_key(t.export())
    with pytest.raises(ValueError, match=rf"table-0000\.{field}\.npy: sha256 mismatch"):
        store.latest().restore({0: {"t": t}})
    assert by_key(t.export()) == before  # the live table was never touched


def test_truncated_and_missing_files_are_named(saved_job) -> None:
    store, job, t = saved_job
    values = job.directory / "server-0000" / "table-0000.values.npy"
    values.write_bytes(values.read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"table-0000\.values\.npy: truncated"):
        job.server(0).read("t")
    weight = job.directory / "dense" / "weight-0000.npy"
    weight.unlink()
    with pytest.raises(ValueError, match=r"weight-0000\.npy: file missing"):
        job.dense_weights()


def test_shape_or_optimizer_mismatch_with_the_target_is_named(saved_job) -> None:
    store, job, t = saved_job
    with pytest.raises(
        ValueError,
        match=r"MANIFEST\.json: table 't' was saved with dim=8 but the target table has "
        r"dim=4",
    ):
        job.restore({0: {"t": xdl_ec.EmbeddingTable("t", 4, "adagrad")}})
    with pytest.raises(ValueError, match="optimizer='ADAGRAD'.*optimizer='MOMENTUM'"):
        job.restore({0: {"t": xdl_ec.EmbeddingTable("t", 8, optim.Momentum(0.1, 0.9))}})
    with pytest.raises(ValueError, match=r"holds tables \['t'\] with no template"):
        job.restore({0: {"u": t}})
    with pytest.raises(ValueError, match=r"a full save without tables \['u'\]"):
        job.restore({0: {"t": t, "u": t}})
    with pytest.raises(ValueError, match=r"holds servers \[0\] with no templates"):
        job.restore({1: {"t": t}})


def test_manifest_that_lies_about_a_shape_is_caught_by_the_header(tmp_path: Path) -> None:
    t = trained_table()
    saved = ShardCheckpoint.write(tmp_path / "s", {"t": t})
    state = saved.directory / "table-0000.state.npy"
    a = np.load(state)
    np.save(state, a[:, :0].copy())  # a different, well-formed array in its place
    with pytest.raises(ValueError, match=r"table-0000\.state\.npy: (truncated|longer)"):
        saved.read("t")


def test_bad_arguments(tmp_path: Path) -> None:
    t = trained_table()
    with pytest.raises(ValueError, match="non-empty mapping"):
        ShardCheckpoint.write(tmp_path / "a", {})
    with pytest.raises(TypeError, match=r"tables\['t'\] must be an EmbeddingTable"):
        ShardCheckpoint.write(tmp_path / "a", {"t": np.zeros(3)})
    with pytest.raises(ValueError, match=r"keys names tables \['u'\]"):
        ShardCheckpoint.write(tmp_path / "a", {"t": t}, keys={"u": [1]})
    with pytest.raises(TypeError, match=r"keys\['t'\] must be integers"):
        ShardCheckpoint.write(tmp_path / "a", {"t": t}, keys={"t": [1.5]})
    ShardCheckpoint.write(tmp_path / "a", {"t": t})
    with pytest.raises(ValueError, match="already exists"):
        ShardCheckpoint.write(tmp_path / "a", {"t": t})
    store = CheckpointStore(tmp_path / "store")
    with pytest.raises(TypeError, match="reader_position must be JSON-serialisable"):
        store.save(1, {0: {"t": t}}, reader_position={"file": object()})
    assert store.steps() == [] and not list((tmp_path / "store").glob(".tmp-*"))
    with pytest.raises(TypeError, match=r"dense_optimizer\[1\] must be a numeric array"):
        store.save(1, {0: {"t": t}}, dense_optimizer=[np.zeros(2), np.array(["adam"])])
    assert store.steps() == [] and not list((tmp_path / "store").glob(".tmp-*"))
    with pytest.raises(ValueError, match="keep: must be an int >= 1"):
        CheckpointStore(tmp_path, keep=0)
    with pytest.raises(ValueError, match="step: must be an int >= 0"):
        store.begin(-1)


def test_a_restore_into_a_budgeted_table_keeps_its_budget_and_spill_dir(tmp_path: Path) -> None:
    """A restore builds fresh tables like its templates: a budgeted template's (memory budget, spill dir) too, so
    a restored server keeps its rows beyond the budget on disk (issue #48)."""
    spill = tmp_path / "spill"
    spill.mkdir()
    source = trained_table()
    ShardCheckpoint.write(tmp_path / "ck", {"t": source})
    config = source.config
    template = xdl_ec.EmbeddingTable.from_config(config, memory_budget=64 << 10, spill_dir=str(spill))
    restored = ShardCheckpoint.open(tmp_path / "ck").restore({"t": template})["t"]
    assert restored.tiered and restored.shard.config.memory_budget == 64 << 10
    assert restored.shard.config.spill_dir == str(spill)
    assert by_key(restored.export()) == by_key(source.export())
    bare = ShardCheckpoint.open(tmp_path / "ck").restore({"t": template.shard})["t"]
    assert bare.config.memory_budget == 64 << 10 and bare.config.spill_dir == str(spill)
    plain = ShardCheckpoint.open(tmp_path / "ck").restore({"t": source})["t"]
    assert not plain.tiered
