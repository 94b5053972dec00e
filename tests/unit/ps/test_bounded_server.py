"""A parameter server's bounded tables: each server keeps its share of max_rows, passes run in pushes, the
server's stats carry the report's "tables" entry, and a pass that frees rows moves the epoch caching workers'
copies are checked against (an evicted row inserted again restarts at the initial clock)."""

from __future__ import annotations

import numpy as np

from xdl_ec.ps.server import ParameterServer
from xdl_ec.sparse.row_rules import Admit, Evict, merged_reports
from xdl_ec.sparse.table_config import Table

DIM = 4


def push(server: ParameterServer, keys, step: int, seq: int) -> None:
    keys = np.asarray(keys, np.int64)
    server.push([("t", keys, np.full((keys.size, DIM), 0.5, np.float32), seq)], step)


def test_each_server_keeps_its_share_and_reports_its_tables():
    table = Table(
        "t", DIM, block_slots=8, admit=Admit(min_count=2), evict=Evict(max_rows=64, every_steps=2, policy="lru")
    )
    server = ParameterServer(0, [table], servers=4)  # 16 rows here
    try:
        for step in range(1, 21):
            push(server, np.arange(step * 10, step * 10 + 12) % 97, step, step)
            assert server.size("t") <= 16
        stats = server.stats()
        report = stats["tables"]["t"]
        assert set(report) == {"rows", "admitted", "not_admitted_lookups", "evicted", "bytes"}
        assert report["evicted"]["cap"] > 0 and report["not_admitted_lookups"] > 0
        merged = merged_reports([stats["tables"], stats["tables"]])
        assert merged["t"]["rows"] == 2 * report["rows"]
        assert merged["t"]["evicted"]["cap"] == 2 * report["evicted"]["cap"]
    finally:
        server.close()
    plain = ParameterServer(0, [Table("t", DIM, block_slots=8)], servers=4)
    try:
        assert "tables" not in plain.stats()
    finally:
        plain.close()


def test_a_pass_that_frees_rows_moves_the_cache_epoch():
    server = ParameterServer(0, [Table("t", DIM, block_slots=8, evict=Evict(ttl_steps=1, every_steps=3))])
    try:
        keys = np.array([1, 2, 3], np.int64)
        push(server, keys, 1, 1)
        unknown = np.full(3, -1, np.int32)
        epoch, [(rows, clocks, sent, _)] = server.pull_stale([("t", keys, unknown, 0)], 0)
        assert epoch == server.epoch and sent.all()
        # cached and unchanged: only clocks travel
        again, [(rows, clocks2, sent, _)] = server.pull_stale([("t", keys, clocks, 0)], epoch)
        assert again == epoch and not sent.any()
        push(server, keys[:1], 3, 2)  # the pass at step 3 frees keys 2 and 3 (last update 1 < 3 - 1)
        moved, [(rows, clocks3, sent, _)] = server.pull_stale([("t", keys, clocks, 0)], epoch)
        assert moved != epoch and sent.all()  # copies from before the pass are not trusted
        push(server, keys[:1], 4, 3)  # no pass: the epoch stays
        same, _ = server.pull_stale([("t", keys, clocks3, 0)], moved)
        assert same == moved
        # ABA: key 2, evicted, comes back by one push at the clock the first copy had, with other bytes; a worker
        # still holding that copy (the first epoch) is sent the row
        push(server, keys[1:2], 5, 4)
        _, [(_, clocks5, _, _)] = server.pull_stale([("t", keys, unknown, 0)], 0)
        assert clocks5[1] == clocks[1]
        _, [(rows, _, sent, _)] = server.pull_stale([("t", keys, clocks, 0)], epoch)
        assert sent[1]
    finally:
        server.close()


def test_not_admitted_ids_are_sent_as_zeros_without_a_clock():
    server = ParameterServer(0, [Table("t", DIM, block_slots=8, admit=Admit(min_count=3))])
    try:
        keys = np.array([5, 6], np.int64)
        epoch, [(rows, clocks, sent, _)] = server.pull_stale([("t", keys, np.full(2, -1, np.int32), 0)], 0)
        assert sent.all() and not rows.any() and (clocks == -1).all()
        assert server.size("t") == 0
    finally:
        server.close()
