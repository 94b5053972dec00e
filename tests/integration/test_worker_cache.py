"""The worker embedding cache (HET, issue #16): exact at staleness 0 (the model of the run without a cache, one
and two workers, under ec with a server killed, on Ray), staleness never beyond S, every held gradient written
back by a flush or a save, row clocks rebuilt with their rows, and a lost worker's held updates counted."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402
from xdl_ec.ft.configs import EcConfig  # noqa: E402
from xdl_ec.ft.factory import make_strategy  # noqa: E402
from xdl_ec.ft.failure_injector import FailureInjector  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402
from xdl_ec.ps.api import ServerAPI  # noqa: E402
from xdl_ec.ps.remote import Remote  # noqa: E402

example = load_example("user_item_tags")
LOG = example.ClickLog(batch_size=64, batches=16, eval_batches=2)
STEPS, SEED = 16, 3
_RUNS: dict = {}


def job() -> xdl_ec.Job:
    return example.make_job(LOG)


def fit(**cluster) -> dict:  # noqa: ANN003
    key = tuple(sorted(cluster.items()))
    if key not in _RUNS:
        _RUNS[key] = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=xdl_ec.Cluster(**cluster))
    return _RUNS[key]


@pytest.mark.parametrize(
    "cluster",
    [
        dict(servers=3),
        dict(servers=2, workers=2),
        dict(servers=3, ft="ec", code=(2, 1), fail_at=("9:1",)),
    ],
    ids=["one-worker", "two-workers", "ec-kill"],
)
def test_staleness_zero_trains_the_model_of_the_run_without_a_cache(cluster: dict) -> None:
    plain = fit(**cluster)
    cached = fit(**cluster, cache=xdl_ec.Cache(rows=40, staleness=0))
    assert cached["model_digest"] == plain["model_digest"]
    stats = cached["cache"]
    assert set(stats) == {"users", "items", "tags"}
    assert all(s["staleness_max"] == 0 for s in stats.values())
    # lines are found, but at S = 0 a row any push changed since comes again (a worker pushes every row it read)
    assert stats["tags"]["hits"] > 0 and stats["tags"]["row_keys"] > 0
    # clocks cross the wire: a cached run's pull requests carry 4 more bytes per key than the plain run's
    assert cached["bytes_pulled_per_sample"] != plain["bytes_pulled_per_sample"]


def test_bounded_staleness_is_never_exceeded_and_saves_traffic() -> None:
    plain = fit(servers=3)
    cached = fit(servers=3, cache=xdl_ec.Cache(rows=2000, staleness=3))
    for table, s in cached["cache"].items():
        assert 0 <= s["staleness_max"] <= 3, table
    assert max(s["staleness_max"] for s in cached["cache"].values()) > 0  # the bound was used
    assert sum(s["write_backs"] for s in cached["cache"].values()) > 0
    assert cached["bytes_pulled_per_sample"] < plain["bytes_pulled_per_sample"]
    assert cached["bytes_pushed_per_sample"] < plain["bytes_pushed_per_sample"]
    assert cached["model_digest"] != plain["model_digest"]  # stale reads and summed pushes: another model
    again = job().fit(
        steps=STEPS,
        deterministic=True,
        seed=SEED,
        cluster=xdl_ec.Cluster(servers=3, cache=xdl_ec.Cache(rows=2000, staleness=3)),
    )
    assert again["model_digest"] == cached["model_digest"]  # sync mode stays deterministic for a seed


def test_held_gradients_are_written_back_at_the_end_and_in_a_save(tmp_path) -> None:  # noqa: ANN001
    never = xdl_ec.Cache(rows=5000, staleness=10**6)  # nothing comes due, nothing is evicted during the run
    report = job().fit(
        steps=4, deterministic=True, seed=SEED, cluster=xdl_ec.Cluster(servers=2, cache=never), save_dir=tmp_path
    )
    assert report["saves"]["saves"] == 1 and all(s["evictions"] == 0 for s in report["cache"].values())
    saved = xdl_ec.load(tmp_path, job=job())
    for spec in job().spec.tables:
        rows = saved.tables.tables[spec.name].export()
        initial = xdl_ec.EmbeddingTable.from_config(spec).pull(rows["keys"])
        # held all run long, written back by the save's flush: every trained row moved from its initial value
        assert not np.isclose(rows["values"], initial).all(axis=1).any(), spec.name


def test_row_clocks_are_rebuilt_with_their_rows() -> None:
    def clocks(fail_at: tuple) -> dict:
        schedule = FailureSchedule.from_flags(fail_at, (), None, SEED)
        trainer = PSTrainer(
            job().spec,
            ClusterConfig(servers=3),
            RunSettings(seed=SEED, deterministic=True),
            make_strategy(EcConfig(code=(2, 1))),
            FailureInjector(schedule) if fail_at else None,
        )
        try:
            report = trainer.fit(STEPS)
            out = {}
            for t in job().spec.tables:
                for server in trainer.scheduler.servers:
                    keys = Remote(server, ServerAPI).export(t.name).result(60)["keys"]
                    out.update(
                        zip(
                            ((t.name, int(k)) for k in keys),
                            Remote(server, ServerAPI).clocks(t.name, keys).result(60).tolist(),
                        )
                    )
            return {"clocks": out, "failures": report["failures"]}
        finally:
            trainer.close()

    plain, killed = clocks(()), clocks(("9:1",))
    assert [f["index"] for f in killed["failures"]] == [1]
    assert killed["clocks"] == plain["clocks"] and max(plain["clocks"].values()) > 1


def test_a_lost_worker_loses_at_most_its_held_updates() -> None:
    cache = xdl_ec.Cache(rows=2000, staleness=5)
    report = job().fit(
        steps=STEPS,
        deterministic=True,
        seed=SEED,
        cluster=xdl_ec.Cluster(servers=3, ft="ckpt", ckpt_interval="100", fail_worker_at=("9",), cache=cache),
    )
    (failure,) = [f for f in report["failures"] if f["role"] == "worker"]
    assert 0 < failure["lost_updates"] == report["lost_updates"] <= 5 * 2000 * 3  # at most S per cached row


@pytest.mark.ray
def test_staleness_zero_on_ray_with_a_killed_server() -> None:
    pytest.importorskip("ray")
    import ray

    from xdl_ec.ps.backend import connect_ray

    started = not ray.is_initialized()
    try:
        connect_ray()
        report = fit(
            servers=3, backend="ray", ft="ec", code=(2, 1), fail_at=("9:1",), cache=xdl_ec.Cache(rows=40, staleness=0)
        )
    finally:
        if started:
            ray.shutdown()
    assert report["model_digest"] == fit(servers=3)["model_digest"]
    # the caching worker's steps (push_pull_stale) were served by the servers' core, but for the replacement's
    # while its shards were under restore
    assert sum(s["native_requests"] for s in report["servers"]) > 0, report["servers"]


# ---- what a write-back applies ---------------------------------------------------------------------------
SPEC = xdl_ec.Table("t", 4, xdl_ec.optim.Adagrad(learning_rate=0.1), xdl_ec.init.RandomUniform(-0.05, 0.05), seed=7)


def _steps_of_the_mean(keys: list, total: np.ndarray, count: int, step: int) -> np.ndarray:
    """The rows of a fresh table after ``count`` pushes of total * (1 / count) at ``step``: the reference."""
    reference = xdl_ec.EmbeddingTable.from_config(SPEC)
    reference.pull(keys)
    for _ in range(count):
        reference.push(keys, total * np.float32(1.0 / count), step=step)
    return reference.pull(keys)


def test_a_write_back_takes_one_optimizer_step_per_held_gradient() -> None:
    """S = 3: three steps' gradients of a cached row are held, then written back with their count; the server
    takes three Adagrad steps of their mean, bit for bit, not one step on their sum."""
    from xdl_ec.ps import LocalBackend, ParameterServer, PSClient
    from xdl_ec.ps.cached_client import CachedClient

    backend = LocalBackend()
    servers = [backend.start("server", i, ParameterServer, i, (SPEC,)) for i in range(2)]
    try:
        client = CachedClient(PSClient(servers), {"t": xdl_ec.Cache(rows=100, staleness=3)}, {"t": 4})
        keys = [11, 12, 13]
        client.pull({"t": (keys, 4)})  # cached now
        grads = [np.full((3, 4), 0.1 * (i + 1), np.float32) + np.arange(3, dtype=np.float32)[:, None] for i in range(3)]
        for step, g in enumerate(grads, start=1):
            client.push({"t": (keys, g)}, step)
        rows = PSClient(servers).find({"t": (keys, 4)})["t"][0]
        np.testing.assert_array_equal(rows, _steps_of_the_mean(keys, (grads[0] + grads[1]) + grads[2], 3, 3))
    finally:
        for handle in servers:
            handle.drop()


def test_a_sync_step_counts_each_held_row_once_per_step_not_per_worker() -> None:
    """Two workers that each held a row for 3 steps stand for 3 steps of the mean over workers, not 6."""
    from xdl_ec.ps import ParameterServer

    server = ParameterServer(0, (SPEC,))
    keys = np.array([5, 6], np.int64)
    server.pull([("t", keys)])
    g0, g1 = np.full((2, 4), 0.3, np.float32), np.full((2, 4), -0.1, np.float32)
    server.push([("t", keys, g0, 1, np.array([3, 3], np.uint32))], 2, 0, 2)
    server.push([("t", keys, g1, 1, np.array([3, 1], np.uint32))], 2, 1, 2)
    half = np.float32(2)
    rows = server.pull([("t", keys)])[0]
    total = g0 / half + g1 / half
    np.testing.assert_array_equal(rows, _steps_of_the_mean(keys, total, 3, 2))  # key 6: max(3, 1) = 3 steps


def test_a_share_cache_follows_its_table_and_keeps_its_lines() -> None:
    """rows="P%": every cached pull's answers say how many rows each server holds, and the cache grows with the
    table keeping its lines (a re-made cache would start cold); a shrink evicts by the policy and hands held
    gradients back for the next push."""
    from xdl_ec.ps import LocalBackend, ParameterServer, PSClient
    from xdl_ec.ps.cached_client import CachedClient

    backend = LocalBackend()
    servers = [backend.start("server", i, ParameterServer, i, (SPEC,)) for i in range(2)]
    try:
        client = CachedClient(
            PSClient(servers), {"t": xdl_ec.Cache(rows="100%", staleness=5)}, {"t": 4}, table_rows={"t": 0}
        )
        cache = client.caches["t"]
        assert cache.capacity == 1
        client.pull({"t": ([1, 2, 3, 4], 4)})  # inserted on the servers: the table holds 4 rows, so does the cache
        assert (cache.capacity, len(cache)) == (4, 4)
        client.pull({"t": (list(range(1, 9)), 4)})  # 8 rows: the 4 lines kept (hits), 4 more
        assert (cache.capacity, len(cache)) == (8, 8)
        assert client.cache_stats()["t"]["hits"] == 4
        client.push({"t": ([5, 6], np.ones((2, 4), np.float32))}, 1)  # held: 5 and 6 are cached, S = 5
        assert client.pending_updates() == 2
        client._held["t"] = {0: 2, 1: 2}  # as if the servers now held 4 rows (a rollback): 4 lines
        client.follow_tables()
        assert (cache.capacity, len(cache)) == (4, 4) and client.cache_stats()["t"]["evictions"] == 4
        for key in (1, 2, 3, 4):  # used twice: 5-8 (once) went
            cache.get(np.array([key]))
        assert client.pending_updates() == 2  # 5's and 6's gradients handed back, not lost
        before = PSClient(servers).find({"t": ([5, 6], 4)})["t"][0]
        client.push({}, 2)
        after = PSClient(servers).find({"t": ([5, 6], 4)})["t"][0]
        assert client.pending_updates() == 0 and not np.array_equal(before, after)
    finally:
        for handle in servers:
            handle.drop()


def test_pulls_in_flight_together_read_the_rows_they_found_whatever_order_they_resolve_in() -> None:
    """A pull reads the rows it found cached when its answers arrive; one started while another is in flight
    copies them at once, and a line evicted meanwhile anyway (resolved out of order) is pulled again: every pull
    returns the servers' rows."""
    from xdl_ec.ps import LocalBackend, ParameterServer, PSClient
    from xdl_ec.ps.cached_client import CachedClient

    backend = LocalBackend()
    servers = [backend.start("server", i, ParameterServer, i, (SPEC,)) for i in range(2)]
    try:
        truth = PSClient(servers)
        for first, second in ((0, 1), (1, 0)):
            client = CachedClient(PSClient(servers), {"t": xdl_ec.Cache(rows=4, staleness=5)}, {"t": 4})
            a_keys, b_keys = [1, 2, 3, 4], [5, 6, 7, 8]
            client.pull({"t": (a_keys, 4)})  # 1-4 cached, the cache full
            pulls = [client.pull_async({"t": (a_keys, 4)}), client.pull_async({"t": (b_keys, 4)})]
            results = {}
            for i in (first, second):  # b's fill evicts 1-4: read before (a first) or pulled again (b first)
                results[i] = pulls[i].result()["t"]
            np.testing.assert_array_equal(results[0], truth.find({"t": (a_keys, 4)})["t"][0])
            np.testing.assert_array_equal(results[1], truth.find({"t": (b_keys, 4)})["t"][0])
            stats = client.cache_stats()["t"]
            assert stats["hits"] == 4 and not client.in_flight
            assert stats["pulled_again"] == (4 if first == 1 else 0)
            # a pull started alone (nothing in flight) copies nothing; one beside it copies what it found
            lone = client.pull_async({"t": (b_keys, 4)})
            beside = client.pull_async({"t": (b_keys, 4)})
            assert all(part[4] is None for parts in lone._calls for part in parts[2])
            assert all(part[4] is not None for parts in beside._calls for part in parts[2])
            lone.result(), beside.result()
    finally:
        for handle in servers:
            handle.drop()
