"""RunKeeper (docs/design/reattach.md): the run record, and the journal of replacements a recovery started, which
a boundary clears once their rebuild is over and an abandoned run clears with its record."""

from __future__ import annotations

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
