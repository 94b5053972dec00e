"""Table groups (issue #49) on parameter servers and on Ray: a worker's group entry goes to each server in the step's
one request as ONE group part and ONE group pull (each table keeping its own push seq inside the part; a server's
core serves it in one native call), so a grouped run on servers ends at the model of
the same job stepping table by table in one process, bit for bit: under --ft none, ec and ckpt with a kill,
two sync workers, and on Ray without and with a kill under ec (its servers serve those requests natively)."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import xdl_ec  # noqa: E402
from xdl_ec import _core  # noqa: E402
from xdl_ec.model.table_groups import GroupKeys, TableGroup  # noqa: E402
from xdl_ec.ps import LocalBackend, ParameterServer, PSClient, Remote  # noqa: E402
from xdl_ec.ps.api import ServerAPI  # noqa: E402

SIZE = 48
DIMS = {"users": 8, "items": 8, "shops": 8, "tags": 8, "brands": 4, "cats": 4, "city": 2}


def _batch(seed: int) -> Dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "label": (rng.random(SIZE) < 0.4).astype(np.float32),
        "dense": rng.normal(size=(SIZE, 2)).astype(np.float32),
        "user": rng.zipf(1.2, SIZE) % 400,
        "item": rng.zipf(1.2, SIZE) % 900,
        "shop": rng.integers(0, 60, SIZE),
        "tags": rng.zipf(1.3, (SIZE, 3)) % 80,  # fixed multi-hot, pooled by sum
        "brand": rng.integers(0, 70, SIZE),
        "cat": rng.integers(0, 25, (SIZE, 2)),  # fixed multi-hot, not pooled
        "city": rng.integers(0, 30, SIZE),  # dim 2: a table alone in its dim
    }


def _input(worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
    return (_batch(b) for b in range(worker, 20, num_workers))


class GroupedModel(tf.keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(1)

    def call(self, embedded: Dict[str, Any], dense: Any, training: bool = False) -> Any:
        parts = [v if v.shape.rank == 2 else tf.reduce_sum(v, axis=1) for v in embedded.values()]
        return self.out(self.hidden(tf.concat([*parts, dense], axis=1)))


def _job(table_groups: bool) -> xdl_ec.Job:
    """Two groups (dims 8 and 4) of tables with their own optimizers, seeds and rules, and a table alone."""
    optimizers = [
        xdl_ec.optim.Adagrad(0.05),
        xdl_ec.optim.Adam(0.01),
        xdl_ec.optim.SGD(0.1),
        xdl_ec.optim.Ftrl(0.1),
        xdl_ec.optim.Momentum(0.05),
        xdl_ec.optim.Adagrad(0.1),
        xdl_ec.optim.SGD(0.05),
    ]
    tables = {
        name: xdl_ec.Table(name, dim=dim, optimizer=opt, seed=i + 1)
        for i, ((name, dim), opt) in enumerate(zip(DIMS.items(), optimizers))
    }
    tables["shops"] = xdl_ec.Table(
        "shops",
        dim=8,
        optimizer=optimizers[2],
        seed=3,
        admit=xdl_ec.Admit(min_count=2),
        evict=xdl_ec.Evict(ttl_steps=3),
    )
    features = [
        xdl_ec.Feature("user", tables["users"]),
        xdl_ec.Feature("item", tables["items"]),
        xdl_ec.Feature("shop", tables["shops"]),
        xdl_ec.Feature("tags", tables["tags"], combiner="sum"),
        xdl_ec.Feature("brand", tables["brands"]),
        xdl_ec.Feature("cat", tables["cats"]),
        xdl_ec.Feature("city", tables["city"]),
    ]
    return xdl_ec.Job(
        tables=list(tables.values()),
        features=features,
        model_fn=GroupedModel,
        input_fn=_input,
        dense_learning_rate=0.01,
        eval_fn=lambda: (_batch(s) for s in range(100, 102)),
        table_groups=table_groups,
    )


@pytest.fixture(scope="module")
def one_process_ungrouped() -> Dict[str, Any]:
    return _job(False).fit(deterministic=True, seed=3)


def test_the_job_forms_two_groups_and_a_lone_table() -> None:
    batch = xdl_ec.model.feature_batch.FeatureBatch.prepare(_batch(0), _job(True).features, "test", grouped=True)
    assert sorted(g.tables for g in batch.groups) == [("brands", "cats"), ("users", "items", "shops", "tags")]
    assert "city" in batch.keys


# ---- the client's wire ---------------------------------------------------------------------------------------
TABLES = [
    xdl_ec.Table("a", 4, xdl_ec.optim.Adagrad(0.1), seed=1),
    xdl_ec.Table("b", 4, xdl_ec.optim.Adam(0.01), seed=2),
    xdl_ec.Table("c", 4, xdl_ec.optim.SGD(0.1), seed=3),
]


def _group_keys() -> GroupKeys:
    rng = np.random.default_rng(0)
    parts = [np.unique(rng.integers(-(10**6), 10**6, n)) for n in (300, 1, 150)]
    offsets = np.concatenate([[0], np.cumsum([p.size for p in parts])]).astype(np.int64)
    group = TableGroup("\x00group:d4", 4, ("a", "b", "c"), ("fa", "fb", "fc"), (1, 1, 1), ("single",) * 3)
    return GroupKeys(np.concatenate(parts).astype(np.int64), offsets, group)


def _cluster(backend: LocalBackend) -> list:
    return [backend.start("server", i, ParameterServer, i, tuple(TABLES)) for i in range(3)]


def test_a_group_goes_as_one_group_part_and_one_group_pull_per_server() -> None:
    keys = _group_keys()
    grads = np.random.default_rng(1).normal(size=(keys.size, 4)).astype(np.float32)
    backend = LocalBackend()
    try:
        client = PSClient(_cluster(backend))
        wire = client._push_wire({"g": (keys, grads)}, 1, 1)
        _, pulls = client._route_pull({"g": (keys, 4)})
        seqs = client.sent_seqs()
        first = 1
        for server in range(3):
            [(tables, offsets, server_keys, server_grads, seq)] = wire[server]
            [(_, positions, [(pull_tables, pull_offsets, pull_keys, dim)])] = pulls[server]
            assert pull_tables == tables and dim == 4
            np.testing.assert_array_equal(pull_offsets, offsets)
            np.testing.assert_array_equal(pull_keys, server_keys)
            np.testing.assert_array_equal(server_keys, keys.keys[positions])
            np.testing.assert_array_equal(server_grads, grads[positions])
            # every table with keys on this server (b has one key: on one server only), in group order, a seq each
            ends = offsets.tolist()
            assert [t for t in ("a", "b", "c") if t in tables] == list(tables)
            assert all(e > s for s, e in zip(ends, ends[1:]))
            assert seq == first and seqs[server] == len(tables)
            assert _core.push_pull_request(wire[server], 1, 0, 1, [p for _, _, ps in pulls[server] for p in ps])
        assert sum(len(w[0][0]) for w in wire) == 7  # a and c on every server, b on one
    finally:
        backend.shutdown()


def test_a_group_travels_as_its_tables_parts_one_request_per_server() -> None:
    keys = _group_keys()
    per_table = {t: keys.keys[keys.offsets[i] : keys.offsets[i + 1]] for i, t in enumerate(keys.group.tables)}
    grads = np.random.default_rng(1).normal(size=(keys.size, 4)).astype(np.float32)
    backend = LocalBackend()
    try:
        grouped, alone = _cluster(backend), _cluster(backend)
        client, reference = PSClient(grouped, push_log=True), PSClient(alone, push_log=True)
        rows = client.pull({"g": (keys, 4)})["g"]
        expected = reference.pull({t: (k, 4) for t, k in per_table.items()})
        np.testing.assert_array_equal(rows, np.concatenate([expected[t] for t in keys.group.tables]))
        assert [Remote(s, ServerAPI).stats().result()["requests"] for s in grouped] == [1, 1, 1]

        client.push({"g": (keys, grads)}, step=1)
        reference.push(
            {t: (k, grads[keys.offsets[i] : keys.offsets[i + 1]]) for i, (t, k) in enumerate(per_table.items())}, step=1
        )
        # one seq per table's part, as the tables' own pushes get them (the push log replays parts, not groups)
        assert client.sent_seqs() == reference.sent_seqs()
        assert client.push_log is not None and reference.push_log is not None
        for server in range(3):
            logged = [(p.table, p.keys.tolist()) for p in client.push_log[server].values()]
            assert logged == [(p.table, p.keys.tolist()) for p in reference.push_log[server].values()]
        for a, b in zip(grouped, alone):
            for table in per_table:
                mine, theirs = Remote(a, ServerAPI).export(table).result(), Remote(b, ServerAPI).export(table).result()
                for field in ("keys", "values", "state"):
                    np.testing.assert_array_equal(mine[field], theirs[field])

        with pytest.raises(ValueError, match=r"table group \('a', 'b', 'c'\).*must be \[len\(keys\), dim\]"):
            client.push({"g": (keys, grads[:-1])}, step=2)
        assert client.sent_seqs() == reference.sent_seqs()  # nothing was sent
    finally:
        backend.shutdown()


# ---- whole runs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cluster",
    [
        {"servers": 3},
        {"servers": 3, "ft": "ec", "code": (2, 1), "fail_at": ["8:1"]},
        {"servers": 3, "ft": "ckpt", "ckpt_interval": "4", "fail_at": ["7:1"]},
        {"servers": 2, "workers": 2},
    ],
    ids=["none", "ec-kill", "ckpt-kill", "two-sync-workers"],
)
def test_on_servers_grouped_ends_at_the_ungrouped_model(cluster: Dict[str, Any], one_process_ungrouped: Any) -> None:
    report = _job(True).fit(cluster=xdl_ec.Cluster(**cluster), deterministic=True, seed=3)
    if cluster.get("workers", 1) == 1:
        assert report["model_digest"] == one_process_ungrouped["model_digest"]
    else:  # two workers average their dense gradients: the reference is the same cluster stepping table by table
        ungrouped = _job(False).fit(cluster=xdl_ec.Cluster(**cluster), deterministic=True, seed=3)
        assert report["model_digest"] == ungrouped["model_digest"]
    assert bool(report.get("failures")) == ("fail_at" in cluster)
    if "ft" not in cluster and cluster.get("workers", 1) == 1:  # the servers' core served the steps (serve_call)
        assert sum(s["native_requests"] for s in report["servers"]) > 0, report["servers"]


@pytest.mark.ray
@pytest.mark.parametrize(
    "cluster",
    [{"servers": 2}, {"servers": 3, "ft": "ec", "code": (2, 1), "fail_at": ["8:1"]}],
    ids=["none", "ec-kill"],
)
def test_on_ray_grouped_ends_at_the_ungrouped_model_served_natively(
    cluster: Dict[str, Any], one_process_ungrouped: Any
) -> None:
    report = _job(True).fit(cluster=xdl_ec.Cluster(backend="ray", **cluster), deterministic=True, seed=3)
    assert report["model_digest"] == one_process_ungrouped["model_digest"]
    assert bool(report.get("failures")) == ("fail_at" in cluster)
    # the one worker's combined steps carried the groups' parts in the native wire form
    assert sum(s["native_requests"] for s in report["servers"]) > 0, report["servers"]
