"""Elastic servers with worker caches (issue #38: "a worker's cache and in-flight pushes stay coherent"): the
driver's quiesce at the resize's boundary writes every cached gradient back to the old layout before the rows
move, and each worker's caches start empty on the new one (a line's clock and epoch were its old server's). At
staleness 0 a resized run ends at the never-resized run's model_digest, under none and under ec's background move."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402
from xdl_ec.ps import LocalBackend, ParameterServer, PSClient  # noqa: E402
from xdl_ec.ps.cached_client import CachedClient  # noqa: E402
from xdl_ec.ps.resize import Resizer  # noqa: E402

example = load_example("user_item_tags")
LOG = example.ClickLog(batch_size=64, batches=30, eval_batches=1)
STEPS, SEED = 30, 5
_RUNS: dict = {}


def job() -> xdl_ec.Job:
    return example.make_job(LOG)


def never_resized() -> dict:
    if "full" not in _RUNS:
        _RUNS["full"] = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=xdl_ec.Cluster(servers=2))
    return _RUNS["full"]


def test_a_cached_run_resized_up_and_down_ends_at_the_never_resized_model() -> None:
    cache = xdl_ec.Cache(rows=40, staleness=0)
    cluster = xdl_ec.Cluster(servers=2, cache=cache, resize_at=["10:3", "20:5", "25:2"])
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert [(r["servers_before"], r["servers_after"]) for r in report["resizes"]] == [(2, 3), (3, 5), (5, 2)]
    assert sum(s["hits"] for s in report["cache"].values()) > 0  # the caches were used, and refilled after


def test_a_cached_run_moved_in_the_background_under_ec_ends_at_the_never_resized_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Resizer, "precopy_share", 0.2)
    cache = xdl_ec.Cache(rows=40, staleness=0)
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), cache=cache, resize_at=["8:5", "20:4"])
    report = job().verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert [(r["servers_before"], r["servers_after"]) for r in report["resizes"]] == [(3, 5), (5, 4)]
    assert report["scrub"]["inconsistent"] == []


def test_a_resize_writes_held_gradients_back_before_the_rows_move() -> None:
    """Staleness 10^6: nothing comes due during the run, so every cached row's gradients are held until a
    quiesce; the resize's writes them back (none lost, the run trains on) and the caches fill again after it."""
    hold = xdl_ec.Cache(rows=5000, staleness=10**6)
    cluster = xdl_ec.Cluster(servers=2, cache=hold, resize_at=["12:3"])
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["steps"] == STEPS and np.isfinite(report["final_loss"])
    assert [(r["servers_before"], r["servers_after"]) for r in report["resizes"]] == [(2, 3)]
    stats = report["cache"]
    assert sum(s["write_backs"] for s in stats.values()) > 0
    assert report.get("lost_updates", 0) == 0


SPEC = xdl_ec.Table("t", 4, xdl_ec.optim.Adagrad(learning_rate=0.1), xdl_ec.init.RandomUniform(-0.05, 0.05), seed=7)


def test_a_cached_client_follows_a_resize_only_with_nothing_pending_and_starts_empty() -> None:
    backend = LocalBackend()
    servers = [backend.start("server", i, ParameterServer, i, (SPEC,)) for i in range(3)]
    try:
        client = CachedClient(PSClient(servers[:2]), {"t": xdl_ec.Cache(rows=100, staleness=3)}, {"t": 4})
        keys = [11, 12, 13, 14]
        client.pull({"t": (keys, 4)})
        client.push({"t": (keys, np.ones((4, 4), np.float32))}, 1)  # held: S = 3
        assert client.pending_updates() == 4
        with pytest.raises(ValueError, match="not written back"):
            client.set_servers(servers)
        assert client.num_servers == 2 and len(client.caches["t"]) == 4  # nothing changed
        for future in client.write_back(1):
            future.result()
        assert client.pending_updates() == 0
        client.set_servers(servers)
        assert client.num_servers == 3 and len(client.caches["t"]) == 0
        rows = client.pull({"t": (keys, 4)})["t"]  # filled again from the three servers
        np.testing.assert_array_equal(rows, PSClient(servers).find({"t": (keys, 4)})["t"][0])
        assert len(client.caches["t"]) == 4
    finally:
        for handle in servers:
            handle.drop()
