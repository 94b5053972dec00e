"""RunKeeper (docs/design/reattach.md): the run record, and the journal of replacements a recovery started, which
a boundary clears once their rebuild is over and an abandoned run clears with its record."""

from __future__ import annotations

import pytest

from xdl_ec.ps.run_keeper import RunKeeper, RunRecord


def _record() -> RunRecord:
    return RunRecord(["s0", "s1"], ["spare"], ["w0"], None, "link", "parity", {"servers": 2}, {"step": 3})


def test_the_journal_names_each_replacement_in_the_order_started_until_the_rebuild_is_over() -> None:
    keeper = RunKeeper()
    keeper.put(_record())
    keeper.add_replacement(1, "r1")
    keeper.add_replacement(1, "r1-again")  # a second loss mid-rebuild started another one
    assert keeper.replacements() == [(1, "r1"), (1, "r1-again")]
    keeper.put(_record())  # a boundary's record leaves the journal: the rebuild may still run
    assert keeper.replacements() == [(1, "r1"), (1, "r1-again")]
    keeper.rebuilt()
    assert keeper.replacements() == []
    assert keeper.get() == _record()


def test_an_abandoned_run_leaves_no_journal() -> None:
    keeper = RunKeeper()
    keeper.put(_record())
    keeper.add_replacement(0, "r0")
    keeper.put(None)
    assert keeper.get() is None and keeper.replacements() == []


def test_a_kept_record_opens_roles_lost_before_it_was_written_as_lost_and_drops_lost_spares() -> None:
    from xdl_ec.ps.backend import ServerLost, WorkerLost
    from xdl_ec.ps.kept_handle import LostHandle

    lost = [LostHandle("server", 0, None, "killed"), LostHandle("server", 1, "n1", "killed")]
    spares, workers = [LostHandle("server", 2, None, "x")], [LostHandle("worker", 0, None, "x")]
    record = RunRecord(lost, spares, workers, None, "l", "p", {"servers": 2}, {"step": 3})
    opened = record.kept().opened()
    assert [(h.role, h.index, h.node) for h in opened.servers] == [("server", 0, None), ("server", 1, "n1")]
    assert all(isinstance(h, LostHandle) and h.actor is None for h in opened.servers + opened.workers)
    assert opened.spares == []  # a dead spare is no spare
    assert (opened.shape, opened.base, opened.link_secret) == (record.shape, record.base, "l")
    with pytest.raises(ServerLost, match="server 1 was lost"):
        opened.servers[1].call("ping").result(1.0)
    with pytest.raises(WorkerLost, match="worker 0 was lost"):
        opened.workers[0].call("progress").result()
