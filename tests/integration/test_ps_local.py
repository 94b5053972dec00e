"""Parameter servers and workers in one process: the fed-rows gather op, server, client routing, sync merging,
bit-identity with the single-process trainer, async mode, and a dropped server or worker stopping the run."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.ft_runs import make_trainer, run  # noqa: E402
from xdl_ec import _core
from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ps import (
    ClusterConfig,
    LocalBackend,
    ParameterServer,
    PSClient,
    PSTrainer,
    Remote,
    ServerLost,
    WorkerLost,
    route,
)
from xdl_ec.ps.api import ServerAPI  # noqa: E402
from xdl_ec.ps.dense_sync import average_gradients  # noqa: E402
from xdl_ec.sparse import init, optim  # noqa: E402

DIM = 4
SPEC = xdl_ec.Table("t", DIM, optim.Adagrad(learning_rate=0.1), init.RandomUniform(-0.05, 0.05), seed=7)


def small_config(**kwargs) -> TrainConfig:
    base = dict(
        synthetic=True,
        synthetic_rows=3000,
        batch_size=128,
        steps=5,
        deterministic=True,
        progress=False,
        seed=3,
        emb_dim=8,
    )
    base.update(kwargs)
    return TrainConfig(**base)


def fit(config: TrainConfig, cluster: "xdl_ec.Cluster | None" = None) -> dict:
    """The built-in job of ``config`` trained here (cluster None) or on ``cluster``."""
    return criteo_job(config).fit(cluster=cluster, deterministic=config.deterministic, seed=config.seed)


def push(
    server: ParameterServer,
    keys: np.ndarray,
    grads: np.ndarray,
    step: int,
    worker: int = 0,
    seq: int = 0,
    participants: int = 1,
):
    return server.push([("t", keys, grads, seq)], step, worker, participants)


# ---- the gather op --------------------------------------------------------------------------------------
@pytest.mark.parametrize("combiner", ["none", "sum", "mean", "sqrtn"])
def test_gather_gradient_pushes_exactly_what_the_lookup_gradient_pushes(combiner: str) -> None:
    import tensorflow as tf

    from xdl_ec import EmbeddingTable
    from xdl_ec.tf import tf_ops

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 40, size=(16, 5)).astype(np.int64)
    upstream = rng.standard_normal((16, 5, DIM) if combiner == "none" else (16, DIM)).astype(np.float32)
    make = lambda: EmbeddingTable("g", DIM, optimizer="adagrad", initializer="random_uniform", seed=1)  # noqa: E731
    via_lookup, via_gather = make(), make()

    trigger = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        out_lookup = tf_ops.lookup(via_lookup, ids, combiner=combiner, trigger=trigger, step=1)
        loss = tf.reduce_sum(out_lookup * upstream)
    tape.gradient(loss, trigger)

    keys, inverse = np.unique(ids.reshape(-1), return_inverse=True)
    rows = tf.constant(via_gather.pull(keys))
    with tf.GradientTape() as tape:
        tape.watch(rows)
        out_gather = tf_ops.gather(rows, inverse.astype(np.int32).reshape(ids.shape), combiner=combiner)
        loss = tf.reduce_sum(out_gather * upstream)
    row_grads = tape.gradient(loss, rows).numpy()
    via_gather.push(keys, row_grads, step=1)

    np.testing.assert_array_equal(out_gather.numpy(), out_lookup.numpy())
    a, b = via_lookup.export(), via_gather.export()
    order_a, order_b = np.argsort(a["keys"]), np.argsort(b["keys"])
    for field in ("keys", "values", "state"):
        np.testing.assert_array_equal(a[field][order_a], b[field][order_b])
    # and the summed gradient is the per-key sum (numpy reference, tolerance: numpy's order may differ)
    expected = np.zeros_like(row_grads)
    per_position = (
        upstream
        if combiner == "none"
        else np.repeat(upstream[:, None, :], 5, axis=1) / ({"sum": 1.0, "mean": 5.0, "sqrtn": np.sqrt(5.0)}[combiner])
    )
    np.add.at(expected, inverse, per_position.reshape(-1, DIM))
    np.testing.assert_allclose(row_grads, expected, rtol=1e-5, atol=1e-6)


def test_gather_rejects_bad_inverse() -> None:
    import tensorflow as tf

    from xdl_ec.tf import tf_ops

    rows = np.zeros((3, DIM), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"inverse\[1\] = 3 is outside \[0, 3\)"):
        tf_ops.gather(rows, np.array([[0, 3]], np.int32))
    with pytest.raises(TypeError, match="inverse must be int32"):
        tf_ops.gather(rows, np.array([[0, 1]], np.int64))


# ---- server and client ----------------------------------------------------------------------------------
def test_server_pull_push_and_byte_counters() -> None:
    server = ParameterServer(0, (SPEC,))
    keys = np.array([5, 9, 11], np.int64)
    [rows] = server.pull([("t", keys)])
    assert rows.shape == (3, DIM)
    ack = push(server, keys, np.ones((3, DIM), np.float32), step=1, worker=0, seq=1)
    assert ack.applied and ack.seq == 1 and server.last_seq == {0: 1}
    assert not np.array_equal(server.pull([("t", keys)])[0], rows)
    stats = server.stats()
    assert stats["pulls"] == 2 and stats["pushes"] == 1 and stats["rows"] == {"t": 3}
    assert stats["bytes_in"] == 3 * 8 * 2 + 3 * 8 + 3 * DIM * 4
    assert stats["bytes_out"] == 2 * 3 * DIM * 4


def test_server_bad_input_changes_nothing() -> None:
    server = ParameterServer(0, (SPEC,))
    keys = np.array([1, 2], np.int64)
    server.pull([("t", keys)])
    before = server.export("t")
    with pytest.raises(ValueError, match="no table 'x'"):
        server.pull([("t", keys), ("x", keys)])
    with pytest.raises(ValueError, match="grads"):
        push(server, keys, np.ones((3, DIM), np.float32), step=1)
    with pytest.raises(ValueError, match="step"):
        push(server, keys, np.ones((2, DIM), np.float32), step=0)
    with pytest.raises(ValueError, match="NaN or Inf"):
        push(server, keys, np.full((2, DIM), np.nan, np.float32), step=1, worker=0, participants=2)
    with pytest.raises(ValueError, match="participants"):
        push(server, keys, np.ones((2, DIM), np.float32), step=1, worker=1, participants=0)
    # a push whose second part is bad applies neither part
    with pytest.raises(ValueError, match="grads"):
        server.push(
            [("t", keys, np.ones((2, DIM), np.float32), 1), ("t", keys, np.ones((1, DIM), np.float32), 2)], 1, 0, 1
        )
    assert server.last_seq == {}
    after = server.export("t")
    for field in ("keys", "values", "state"):
        np.testing.assert_array_equal(before[field], after[field])
    assert server.stats()["pending_steps"] == 0


def test_sync_push_waits_for_all_workers_and_merges_in_worker_order() -> None:
    rng = np.random.default_rng(1)
    k0, k1 = np.array([1, 2, 3], np.int64), np.array([3, 4], np.int64)
    g0, g1 = rng.standard_normal((3, DIM)).astype(np.float32), rng.standard_normal((2, DIM)).astype(np.float32)
    results = []
    for order in ((0, 1), (1, 0)):
        server = ParameterServer(0, (SPEC,))
        pushes = {0: (k0, g0), 1: (k1, g1)}
        first, second = order
        ack = push(server, *pushes[first], step=1, worker=first, participants=2)
        assert not ack.applied and server.size("t") == 0  # buffered: nothing applied yet
        with pytest.raises(ValueError, match=f"worker {first} already pushed step 1"):
            push(server, *pushes[first], step=1, worker=first, participants=2)
        assert push(server, *pushes[second], step=1, worker=second, participants=2).applied
        results.append(server.export("t"))
    for field in ("keys", "values", "state"):
        np.testing.assert_array_equal(results[0][field], results[1][field])
    # the merge is the mean over workers: equal to one push of the averaged gradients
    reference = ParameterServer(0, (SPEC,))
    merged = np.concatenate([g0 / np.float32(2), g1 / np.float32(2)])
    push(reference, np.concatenate([k0, k1]), merged, step=1)
    np.testing.assert_array_equal(reference.export("t")["values"], results[0]["values"])


def test_client_routes_by_key_router_and_reassembles() -> None:
    backend = LocalBackend()
    try:
        servers = [backend.start("server", i, ParameterServer, i, (SPEC,)) for i in range(3)]
        client = PSClient(servers)
        keys = np.arange(-500, 500, 7, dtype=np.int64)
        owners = _core.server_of(keys, 3)
        assert sorted(np.concatenate(route(keys, 3)).tolist()) == list(range(keys.size))
        for s, positions in enumerate(route(keys, 3)):
            assert np.all(owners[positions] == s)
        assert not np.array_equal(owners, keys % 3)  # a hash, not key % N
        rows = client.pull({"t": (keys, DIM)})["t"]
        for s, positions in enumerate(route(keys, 3)):
            assert Remote(servers[s], ServerAPI).stats().result()["rows"]["t"] == positions.size
            [part] = Remote(servers[s], ServerAPI).pull([("t", keys[positions])]).result()
            np.testing.assert_array_equal(part, rows[positions])
        found_rows, found = client.find({"t": (np.array([keys[0], 123456789], np.int64), DIM)})["t"]
        assert found.tolist() == [True, False] and np.all(found_rows[1] == 0)
        np.testing.assert_array_equal(found_rows[0], rows[0])
    finally:
        backend.shutdown()


def test_average_gradients_is_the_mean_in_worker_order() -> None:
    a, b = [np.array([1.0, 2.0], np.float32)], [np.array([3.0, 5.0], np.float32)]
    np.testing.assert_array_equal(average_gradients([a, b])[0], [2.0, 3.5])
    assert average_gradients([a])[0] is a[0] or np.array_equal(average_gradients([a])[0], a[0])
    with pytest.raises(ValueError, match="at least one worker"):
        average_gradients([])


# ---- training ---------------------------------------------------------------------------------------------
def test_one_worker_matches_the_single_process_run_bit_for_bit() -> None:
    single = fit(small_config())
    ps = fit(small_config(), xdl_ec.Cluster(servers=3, workers=1))
    assert ps["model_digest"] == single["model_digest"]
    assert ps["final_loss"] == single["final_loss"]
    assert ps["auc"] == single["auc"] and ps["embedding_rows"] == single["embedding_rows"]
    assert ps["samples"] == single["samples"] and ps["steps"] == single["steps"]
    assert len(ps["servers"]) == 3 and all(s["bytes_in"] > 0 and s["bytes_out"] > 0 for s in ps["servers"])
    assert ps["bytes_pulled_per_sample"] > 0 and ps["bytes_pushed_per_sample"] > 0


def test_sync_two_workers_is_deterministic_and_uses_every_batch() -> None:
    runs = [fit(small_config(steps=6), xdl_ec.Cluster(servers=2, workers=2)) for _ in range(2)]
    assert runs[0]["model_digest"] == runs[1]["model_digest"]
    assert runs[0]["steps"] == 3 and runs[0]["samples"] == 6 * 128
    assert [w["steps"] for w in runs[0]["workers"]] == [3, 3]
    single = fit(small_config(steps=6))
    assert runs[0]["model_digest"] != single["model_digest"]  # averaged steps: a different (valid) trajectory


def test_fit_in_chunks_continues_where_it_stopped_and_ends_at_the_same_model() -> None:
    whole = make_trainer(small_config(steps=7), ClusterConfig(servers=2, workers=1))
    chunked = make_trainer(small_config(steps=7), ClusterConfig(servers=2, workers=1))
    try:
        whole.fit()
        reports = [chunked.fit(steps=3), chunked.fit(steps=3), chunked.fit(steps=3), chunked.fit()]
        assert [r["steps"] for r in reports] == [3, 6, 7, 7]  # the last step reached; nothing left at the end
        assert [r["samples"] for r in reports] == [3 * 128, 3 * 128, 128, 0]
        assert [len(r["timeline"]) for r in reports] == [3, 3, 1, 0]
        assert chunked.digest() == whole.digest()
        assert chunked.fit(steps=0)["steps_this_fit"] == 0  # a resumed run with nothing left trains nothing
        with pytest.raises(ValueError, match="steps: must be an int >= 0"):
            chunked.fit(steps=-1)
    finally:
        whole.close()
        chunked.close()


def test_async_fit_in_chunks_trains_every_batch_once() -> None:
    trainer = make_trainer(
        small_config(steps=7, deterministic=False), ClusterConfig(servers=2, workers=2, mode="async")
    )
    try:
        first, rest = trainer.fit(steps=4), trainer.fit()
    finally:
        trainer.close()
    assert first["steps"] == 4 and first["samples"] == 4 * 128  # the steps in flight are completed, none more
    assert rest["steps"] == 7 and rest["samples"] == 3 * 128


def test_async_mode_trains_every_batch() -> None:
    report = fit(small_config(steps=7, deterministic=False), xdl_ec.Cluster(servers=2, workers=2, mode="async"))
    assert report["samples"] == 7 * 128 and report["steps"] == 7
    assert np.isfinite(report["final_loss"])
    assert sorted(w["steps"] for w in report["workers"]) == [3, 4]


def _kill_after(trainer: PSTrainer, role: str, index: int, step: int) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + 60
        while trainer.step < step and time.monotonic() < deadline:
            time.sleep(0.005)
        trainer.scheduler.kill(role, index)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("role,index,error", [("server", 1, ServerLost), ("worker", 1, WorkerLost)])
def test_a_dropped_role_stops_training_naming_it(role: str, index: int, error: type) -> None:
    trainer = make_trainer(small_config(steps=400, synthetic_rows=60_000), ClusterConfig(servers=3, workers=2))
    killer = _kill_after(trainer, role, index, 3)
    start = time.monotonic()
    with pytest.raises(error, match=f"{role} {index} was lost") as info:
        run(trainer)
    assert info.value.index == index
    assert trainer.step < 400 and time.monotonic() - start < 30
    killer.join()
    assert trainer.scheduler.cluster_map()[f"{role}s"][index]["alive"] is False


def test_bad_cluster_config_is_rejected_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="servers: must be an int >= 1"):
        xdl_ec.Cluster(servers=0)
    with pytest.raises(ValueError, match="mode: must be one of"):
        ClusterConfig(mode="bulk")
    with pytest.raises(ValueError, match="address: a Ray address needs backend='ray'"):
        xdl_ec.Cluster(address="127.0.0.1:6379")
    with pytest.raises(ValueError, match="servers: the code k=4, r=1 needs at least k \\+ r = 5 servers"):
        xdl_ec.Cluster(servers=3, ft="ec")


# ---- command line ---------------------------------------------------------------------------------------
def test_cli_trains_on_servers_and_reports_bytes_per_server(tmp_path, capsys) -> None:
    import json

    from xdl_ec.cli import main

    report_path = tmp_path / "report.json"
    argv = [
        "train",
        "--synthetic",
        "--synthetic-rows",
        "3000",
        "--batch-size",
        "128",
        "--steps",
        "4",
        "--emb-dim",
        "8",
        "--deterministic",
        "--no-progress",
        "--report",
        str(report_path),
    ]
    assert main(argv) == 0
    single = json.loads(report_path.read_text())
    assert main(argv + ["--servers", "2", "--backend", "local", "--mode", "sync"]) == 0
    report = json.loads(report_path.read_text())
    assert report["model_digest"] == single["model_digest"]
    assert set(single) <= set(report)  # the single-process report's fields, plus the cluster's
    assert [s["index"] for s in report["servers"]] == [0, 1]
    assert report["cluster"]["servers"] == 2 and report["cluster"]["backend"] == "local"
    out = capsys.readouterr().out
    assert "server 1:" in out and "bytes in" in out


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--workers", "2"], "--workers: needs --servers N"),
        (["--servers", "2", "--address", "127.0.0.1:6379"], "--address: a Ray address needs --backend ray"),
    ],
)
def test_cli_rejects_cluster_flags_that_do_not_fit(extra: list, message: str, capsys) -> None:
    from xdl_ec.cli import main

    assert main(["train", "--synthetic", "--steps", "1", "--no-progress", *extra]) == 2
    assert message in capsys.readouterr().err


# ---- backend and scheduler --------------------------------------------------------------------------------
class _Sleeper:
    def __init__(self, index: int) -> None:
        self.index = index

    def nap(self, seconds: float) -> str:
        time.sleep(seconds)
        return "awake"

    def ping(self) -> int:
        return self.index


def test_local_calls_time_out_by_name_and_dropped_roles_raise_their_lost_error() -> None:
    from xdl_ec.ps import CallTimeout

    backend = LocalBackend()
    try:
        handle = backend.start("worker", 3, _Sleeper, 3)
        with pytest.raises(CallTimeout, match=r"worker 3 did not answer nap\(\) within 0.05 s"):
            handle.call("nap", 0.5).result(0.05)
        backend.kill(handle)
        assert not backend.alive(handle)
        with pytest.raises(WorkerLost, match="worker 3 was lost: its object was dropped"):
            handle.call("ping").result(5)
        with pytest.raises(ValueError, match="role: must be one of"):
            backend.start("janitor", 0, _Sleeper, 0)
    finally:
        backend.shutdown()


def test_scheduler_decides_deaths_and_bumps_the_map_version() -> None:
    from xdl_ec.ps import CallTimeout, Scheduler

    backend = LocalBackend()
    try:
        scheduler = Scheduler(backend, 2, (SPEC,))
        version = scheduler.version
        # a timeout from a role that still answers pings is not a death
        assert scheduler.confirm_failure(CallTimeout("server", 1, "pull", 1.0)) is None
        assert scheduler.cluster_map()["servers"][1]["alive"] and scheduler.version == version
        scheduler.kill("server", 1)
        lost = scheduler.confirm_failure(CallTimeout("server", 1, "pull", 1.0))
        assert isinstance(lost, ServerLost) and lost.index == 1
        assert not scheduler.cluster_map()["servers"][1]["alive"] and scheduler.version == version + 1
        replacement = scheduler.replace_server(1)
        assert Remote(replacement, ServerAPI).stats().result(5)["rows"] == {"t": 0}  # a fresh, empty server
        assert scheduler.cluster_map()["servers"][1]["alive"] and scheduler.version == version + 2
        with pytest.raises(IndexError, match="no server 5"):
            scheduler.kill("server", 5)
    finally:
        backend.shutdown()


def test_a_hot_spare_takes_the_dead_servers_place_and_is_replenished_on_demand() -> None:
    from xdl_ec.ps import Scheduler

    backend = LocalBackend()
    try:
        scheduler = Scheduler(backend, 2, (SPEC,), spares=1)
        spare = scheduler._spares[0]
        assert Remote(spare, ServerAPI).ping().result(5) == 2  # idle, under an index past the servers'
        scheduler.kill("server", 0)
        scheduler.confirm_failure(ServerLost(0, "killed"))
        replacement = scheduler.replace_server(0)
        assert replacement is spare and replacement.index == 0
        assert Remote(replacement, ServerAPI).ping().result(5) == 0
        assert scheduler._spares == []  # not restarted while a recovery may still run
        scheduler.replenish_spares()
        assert [Remote(s, ServerAPI).ping().result(5) for s in scheduler._spares] == [3]
        # a server that served anything cannot be renamed
        Remote(scheduler.servers[1], ServerAPI).pull([("t", np.array([5], np.int64))]).result(5)
        with pytest.raises(ValueError, match="only an idle spare"):
            Remote(scheduler.servers[1], ServerAPI).take_index(0).result(5)
        with pytest.raises(ValueError, match="spares"):
            Scheduler(backend, 2, (SPEC,), spares=-1)
    finally:
        backend.shutdown()


def test_client_push_log_keeps_pushes_until_forgotten() -> None:
    backend = LocalBackend()
    try:
        servers = [backend.start("server", i, ParameterServer, i, (SPEC,)) for i in range(2)]
        client = PSClient(servers, worker=0, push_log=True)
        keys = np.arange(40, dtype=np.int64)
        acks = client.push({"t": (keys, np.ones((40, DIM), np.float32))}, step=1)
        assert sorted(a.server for a in acks) == [0, 1] and all(a.seq == 1 and a.applied for a in acks)
        client.push({"t": (keys, np.ones((40, DIM), np.float32))}, step=2)
        assert [sorted(client.push_log[s]) for s in (0, 1)] == [[1, 2], [1, 2]]
        logged = client.push_log[0][2]
        np.testing.assert_array_equal(np.sort(logged.keys), np.sort(keys[_core.server_of(keys, 2) == 0]))
        client.forget(0, 1)
        assert sorted(client.push_log[0]) == [2] and sorted(client.push_log[1]) == [1, 2]
        with pytest.raises(ValueError, match=r"grads of table 't': must be \[len\(keys\), dim\]"):
            client.push({"t": (keys, np.ones((3, DIM), np.float32))}, step=3)
        for step in (3, 4, 5):
            client.push({"t": (keys, np.ones((40, DIM), np.float32))}, step=step)
        assert sorted(client.push_log[0]) == [2, 3, 4, 5]
        client.forget(0, 0)  # nothing durable yet
        assert sorted(client.push_log[0]) == [2, 3, 4, 5]
        client.forget(0, 3)  # drops the durable prefix only
        assert sorted(client.push_log[0]) == [4, 5] and sorted(client.push_log[1]) == [1, 2, 3, 4, 5]
        client.forget(0, 99)
        assert client.push_log[0] == {}
    finally:
        backend.shutdown()


def test_a_remote_call_must_be_declared_by_the_interface() -> None:
    backend = LocalBackend()
    try:
        server = backend.start("server", 0, ParameterServer, 0, (SPEC,))
        with pytest.raises(AttributeError, match="ServerAPI declares no remote method 'close'"):
            Remote(server, ServerAPI).close()
    finally:
        backend.shutdown()


def test_a_role_that_answers_pings_but_not_its_call_stops_the_run_naming_it() -> None:
    """A stuck role is not waited for forever: past the call timeout its CallTimeout stops the run."""
    from xdl_ec.ps import CallTimeout

    trainer = make_trainer(small_config(steps=3), ClusterConfig(servers=2, call_timeout=0.5))
    try:
        release = threading.Event()
        worker = trainer.workers[0].local_object()
        real = worker.train_step
        worker.train_step = lambda *args: release.wait(30) or real(*args)  # stuck, yet its handle answers pings
        with pytest.raises(CallTimeout, match=r"worker 0 did not answer train_step\(\) within 0.5 s"):
            trainer.fit()
        release.set()
    finally:
        trainer.close()
