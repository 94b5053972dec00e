"""Elastic servers (issue #38): a run whose servers are resized while it trains (``--resize-at STEP:N``,
``job.resize`` from another thread) ends at the never-resized run's model_digest (one worker, deterministic), moves
only the rows whose route changed, worker caches follow it, and a resize that cannot be done is a clear error that
changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402
from xdl_ec import _core  # noqa: E402
from xdl_ec.ps import LocalBackend, ParameterServer, PSClient, move_budget, pause_prediction  # noqa: E402
from xdl_ec.ps import resize as resize_module  # noqa: E402
from xdl_ec.ps.cached_client import CachedClient  # noqa: E402
from xdl_ec.ps.client import owner_positions  # noqa: E402
from xdl_ec.ps.copy_rounds import CopyRounds  # noqa: E402
from xdl_ec.ps.fresh_start import FreshStart  # noqa: E402
from xdl_ec.ps.move_hooks import NO_HOOKS, MoveHooks  # noqa: E402
from xdl_ec.ps.old_servers import OldServers  # noqa: E402
from xdl_ec.ps.resize import ResizeError, Resizer, parse_resize  # noqa: E402

example = load_example("user_item_tags")
LOG = example.ClickLog(batch_size=64, batches=30, eval_batches=1)
STEPS, SEED = 30, 5
_RUNS: dict = {}


def job(hooks: MoveHooks = NO_HOOKS) -> xdl_ec.Job:
    """The example's job; ``hooks``: an observer of its resizes' moves and their fixed pace."""
    made = example.make_job(LOG)
    made.move_hooks = hooks
    return made


def never_resized() -> dict:
    if "full" not in _RUNS:
        _RUNS["full"] = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=xdl_ec.Cluster(servers=2))
    return _RUNS["full"]


def test_a_run_resized_up_and_down_ends_at_the_never_resized_model() -> None:
    cluster = xdl_ec.Cluster(servers=2, resize_at=["10:3", "20:5", "25:2"])
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    resizes = report["resizes"]
    assert [(r["step"], r["servers_before"], r["servers_after"]) for r in resizes] == [
        (10, 2, 3),
        (20, 3, 5),
        (25, 5, 2),
    ]
    assert len(report["servers"]) == 2 and report["cluster"]["servers"] == 2
    for r in resizes:  # only the rows whose route changed move: ~|m - n| / max(m, n) of them (a few hundred rows)
        before, after = r["servers_before"], r["servers_after"]
        assert r["ideal_fraction"] == abs(after - before) / max(after, before)
        assert abs(r["moved_fraction"] - r["ideal_fraction"]) < 0.1, r
        assert r["rows_moved"] == round(r["moved_fraction"] * r["rows"]) and r["bytes_copied"] > 0
        assert r["rows_copied"] == r["rows_moved"]  # without stripes only the moving rows cross


def test_a_kill_of_a_server_the_schedule_brings_is_made_once_it_is_there() -> None:
    """--resize-at 6:4 on 3 servers, --fail-at 12:3: server 3 exists from the resize on, so the kill is accepted and
    made (under ec, rebuilt); the model is the never-resized run's."""
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["6:4"], fail_at=["12:3"], resize_share=0)
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert [(k["step"], k["index"]) for k in report["injected"]] == [(12, 3)]
    assert [f["index"] for f in report["failures"]] == [3]


def test_a_run_resized_up_and_down_under_ec_ends_at_the_never_resized_model_and_scrubs_clean() -> None:
    # a larger share than the default: fewer boundaries
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["8:5", "16:4", "24:3"], resize_share=0.2)
    report = job().verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert [(r["servers_before"], r["servers_after"]) for r in report["resizes"]] == [(3, 5), (5, 4), (4, 3)]
    assert report["scrub"]["inconsistent"] == []  # the stripes re-formed over the last count hold every row
    for r in report["resizes"]:  # the stripes are re-formed on fresh servers: every row is copied, some again
        assert r["rows_copied"] == r["rows_precopied"] + r["rows_final"] >= r["rows"], r
        assert abs(r["moved_fraction"] - r["ideal_fraction"]) < 0.1, r


def _rows_by_id(trainer: object) -> dict:
    """{stable server id: the (table, key) rows it holds} of a running cluster."""
    scheduler = trainer.scheduler  # type: ignore[attr-defined]
    held: dict = {i: set() for i in resize_module.server_ids_of(scheduler)}
    for table in trainer.job.tables:  # type: ignore[attr-defined]
        for i, rows in zip(held, scheduler.exports(table.name)):
            held[i] |= {(table.name, k) for k in np.asarray(rows["keys"]).tolist()}
    return held


def test_a_drained_server_moves_only_its_rows_and_growing_back_ends_at_the_never_resized_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """4 servers, server 1 drained at step 10 (-> 3: ids 0, 2, 3), one server added at step 20 (it takes id 1 back):
    only server 1's rows move at the drain, exactly those its id owns come back, and the model is the one of the
    run never resized."""
    seen: list = []
    resize_servers = resize_module.resize_servers

    def watched(trainer: object, *args: object, **kwargs: object) -> dict:
        before = _rows_by_id(trainer)
        record = resize_servers(trainer, *args, **kwargs)  # type: ignore[arg-type]
        seen.append((before, _rows_by_id(trainer), record))
        return record

    monkeypatch.setattr(resize_module, "resize_servers", watched)
    cluster = xdl_ec.Cluster(servers=4, resize_at=["10:3:drain=1", "20:4"])
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert [(r["servers_before"], r["servers_after"], r["drained"], r["server_ids"]) for r in report["resizes"]] == [
        (4, 3, [1], [0, 2, 3]),
        (3, 4, [], [0, 2, 3, 1]),
    ]
    (before, after, drain), (_, back, grow) = seen
    assert set(after) == {0, 2, 3}
    for i in (0, 2, 3):  # the servers that stay keep every row they held and gain only server 1's
        assert before[i] <= after[i] and after[i] - before[i] <= before[1]
    assert set().union(*after.values()) == set().union(*before.values())
    assert drain["rows_moved"] == drain["rows_copied"] == len(before[1]) > 0  # server 1's rows, no other
    assert abs(drain["moved_fraction"] - drain["ideal_fraction"]) < 0.1 and abs(drain["ideal_fraction"] - 0.25) < 0.02
    for i, rows in back.items():  # id 1 back: every row lives where a 4-server run routes it
        assert np.all(_core.server_of(np.array([k for _, k in rows], dtype=np.int64), 4) == i)
    assert grow["rows_moved"] == len(back[1])


def test_a_drain_under_ec_ends_at_the_never_resized_model_and_scrubs_clean() -> None:
    """Server 1 of 4 drained at step 10, the server of id 2 (at position 1 of the ids 0, 2, 3) lost at step 15 and
    rebuilt by the re-formed stripes, one server added back at step 20."""
    cluster = xdl_ec.Cluster(servers=4, ft="ec", code=(2, 1), resize_at=["10:3:drain=1", "20:4"], fail_at=["15:1"])
    report = job().verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert [(f["step"], f["index"]) for f in report["failures"]] == [(15, 1)]
    assert [(r["drained"], r["server_ids"]) for r in report["resizes"]] == [([1], [0, 2, 3]), ([], [0, 1, 2, 3])]
    assert report["scrub"]["inconsistent"] == []
    for r in report["resizes"]:  # re-formed on fresh servers: every row copied, the routes of id 1's rows changed
        assert r["rows_copied"] >= r["rows"] and abs(r["moved_fraction"] - r["ideal_fraction"]) < 0.1, r


def kill_once_at(phase: str, which: str, fresh: int) -> tuple:
    """A move's observer that kills one server at its ``phase`` ("precopy": the pre-copy's second boundary): old
    server 1 (``which`` "old") or fresh server ``fresh``; returns (the list the phase is appended to when it does,
    the observer)."""
    killed: list = []
    boundaries: list = []

    def kill_once(name: str, trainer: object, move: object) -> None:
        if name == "precopy" and move.fresh:  # type: ignore[attr-defined]  # (formed beside the steps first)
            boundaries.append(name)
        if name == phase and not killed and (phase != "precopy" or len(boundaries) == 2):
            killed.append(name)
            if which == "old":
                trainer.scheduler.kill("server", 1)  # type: ignore[attr-defined]
            else:
                trainer.backend.kill(move.fresh[fresh])  # type: ignore[attr-defined]

    return killed, kill_once


@pytest.mark.parametrize(
    "phase, which",
    [("precopy", "old"), ("precopy", "fresh"), ("export", "old"), ("load", "fresh")],
    ids=["old-mid-precopy", "fresh-mid-precopy", "old-at-the-switch", "fresh-at-the-switch"],
)
def test_a_server_killed_mid_move_under_ec_is_rebuilt_exactly_and_the_resize_completes(phase: str, which: str) -> None:
    """The background move (a few slots per boundary, so the pre-copy spans boundaries). precopy: at its second
    boundary, old server 1 dies (the old stripes rebuild it; the rows copied before keep their slots and clocks and
    the move goes on) or fresh server 2 dies (no loss: the move starts over on new fresh servers). export: an old
    server dies at the final boundary right before its rows are read (rebuilt, the final boundary comes again);
    load: a fresh server dies after the last rows reached the new layout, before its parity is durable (started
    over)."""
    killed, observer = kill_once_at(phase, which, fresh=2)
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["8:4", "20:3"])
    report = job(MoveHooks(observer, rows=96)).verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert killed == [phase]
    assert report["model_digest"] == never_resized()["model_digest"]
    assert [(r["servers_before"], r["servers_after"]) for r in report["resizes"]] == [(3, 4), (4, 3)]
    assert report["scrub"]["inconsistent"] == []
    first = report["resizes"][0]
    assert first["precopy_boundaries"] >= 2, first
    if which == "old":
        assert [f["index"] for f in report["failures"]] == [1] and first["restarts"] == 0
    else:
        assert first["restarts"] == 1 and report["failures"] == []


def never_resized_ec() -> dict:
    """The ``--ft ec`` twin with the original code, 2,1 on 4 servers (never resized)."""
    if "ec" not in _RUNS:
        cluster = xdl_ec.Cluster(servers=4, ft="ec", code=(2, 1))
        _RUNS["ec"] = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    return _RUNS["ec"]


def test_a_resize_with_a_new_code_re_forms_the_stripes_and_later_kills_are_rebuilt_by_it() -> None:
    """4 servers of code 2,1 resized to 5 with code 3,2 at step 8 (rows over several boundaries): the run ends at
    the never-resized twin's model, the stripes scrub clean under the new code, two servers killed at once after
    the switch (the old r was 1) are rebuilt by it, and a later resize (to 6) keeps it."""
    cluster = xdl_ec.Cluster(
        servers=4, ft="ec", code=(2, 1), resize_at=["8:5:code=3,2", "24:6"], fail_at=["22:1", "22:3"]
    )
    report = job(MoveHooks(rows=256)).verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized_ec()["model_digest"] == never_resized()["model_digest"]
    r, later = report["resizes"]
    assert (later["servers_before"], later["servers_after"], later["code_before"], later["code"]) == (
        5,
        6,
        [3, 2],
        [3, 2],
    )
    assert (r["servers_before"], r["servers_after"], r["code_before"], r["code"]) == (4, 5, [2, 1], [3, 2]), r
    assert r["started_step"] == 8 and r["precopy_boundaries"] >= 2 and r["step"] < 22, r
    assert r["rows_copied"] >= r["rows"] > 0 and r["restarts"] == 0, r
    assert report["code"] == {"k": 3, "r": 2} and report["scrub"]["inconsistent"] == []
    assert sorted((f["step"], f["index"]) for f in report["failures"]) == [(22, 1), (22, 3)]


def test_a_new_code_at_the_same_count_re_forms_the_stripes_in_place() -> None:
    """job.resize(servers=4, code=(3, 1)) on 4 servers of code 2,1 (from another thread): the stripes are re-formed
    with the new code on 4 fresh servers; the same count with the same code is refused, changing nothing."""
    j = job()
    done: dict = {}

    def ask() -> None:
        try:
            while not j.resizable:
                threading.Event().wait(0.05)
            for code, message in [
                (None, "has 4 servers already with the code k=2, r=1"),  # the current count and code
                ((2, 1), "has 4 servers already with the code k=2, r=1"),
                ("2,1", "has 4 servers already with the code k=2, r=1"),
                ((3, 2), "the code k=3, r=2 needs at least k \\+ r = 5 servers, got 4"),
                ("3", "code: must be 'k,r'"),
                ((1, 5), "code: need k >= 1, 1 <= r <= 4"),
            ]:
                with pytest.raises(ResizeError, match=message):
                    j.resize(servers=4, code=code)  # type: ignore[arg-type]
            done["record"] = j.resize(servers=4, code=(3, 1), timeout=120)
            done["code"] = j._resizer._trainer.strategy.stripe_code  # type: ignore[union-attr]
        except BaseException as err:  # noqa: BLE001 - asserted by the test's thread
            done["error"] = err

    asker = threading.Thread(target=ask)
    asker.start()
    cluster = xdl_ec.Cluster(servers=4, ft="ec", code=(2, 1))
    report = j.verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    asker.join(60)
    assert done.get("error") is None, done["error"]
    record = done["record"]
    assert (record["servers_before"], record["servers_after"], record["code_before"], record["code"]) == (
        4,
        4,
        [2, 1],
        [3, 1],
    )
    assert done["code"] == (3, 1) and report["code"] == {"k": 3, "r": 1} and report["resizes"] == [record]
    assert record["rows_copied"] >= record["rows"] and record["moved_fraction"] == 0.0  # the same routes
    assert report["model_digest"] == never_resized_ec()["model_digest"]
    assert report["scrub"]["inconsistent"] == []


def test_a_new_code_in_one_pause_re_forms_the_stripes_at_the_boundary() -> None:
    """With the pre-copy off (``Cluster(resize_share=0)``, ``--resize-share 0``) a code-changing resize is one pause
    at its boundary: every row read, loaded onto the fresh servers under the new code and made durable there."""
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["6:4:code=2,2"], resize_share=0)
    report = job().verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    (r,) = report["resizes"]
    assert (r["step"], r["servers_after"], r["code_before"], r["code"]) == (6, 4, [2, 1], [2, 2]), r
    assert r["rows_copied"] == r["rows"] and "precopy_boundaries" not in r, r
    assert report["code"] == {"k": 2, "r": 2} and report["scrub"]["inconsistent"] == []


@pytest.mark.parametrize(
    "phase, which", [("precopy", "old"), ("load", "fresh")], ids=["old-mid-precopy", "fresh-at-the-switch"]
)
def test_a_server_killed_during_a_code_changing_move_is_rebuilt_and_the_resize_completes(
    phase: str, which: str
) -> None:
    """3 servers of code 2,1 resized to 5 with code 2,2: old server 1 dies at the pre-copy's second boundary (the
    old code rebuilds it and the move goes on), or fresh server 4 dies once the last rows reached the new layout,
    before its parity is durable (the move starts over on new fresh servers, with the new code again)."""
    killed, observer = kill_once_at(phase, which, fresh=4)
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["8:5:code=2,2"])
    report = job(MoveHooks(observer, rows=96)).verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert killed == [phase]
    assert report["model_digest"] == never_resized()["model_digest"]
    (r,) = report["resizes"]
    assert (r["servers_after"], r["code_before"], r["code"]) == (5, [2, 1], [2, 2]), r
    assert report["code"] == {"k": 2, "r": 2} and report["scrub"]["inconsistent"] == []
    if which == "old":
        assert [f["index"] for f in report["failures"]] == [1] and r["restarts"] == 0
    else:
        assert r["restarts"] == 1 and report["failures"] == []


def test_under_ec_the_rows_move_over_several_boundaries_and_the_final_pause_copies_only_what_changed() -> None:
    """--ft ec: the pre-copy reads a bounded number of slots per step boundary while training goes on; the final
    boundary copies the rows changed or inserted since their copy, not the table (with the pre-copy off,
    resize_share 0, the whole table is copied in the one pause); the model is the never-resized run's."""
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["6:4"])
    report = job(MoveHooks(rows=128)).verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert report["scrub"]["inconsistent"] == []
    (r,) = report["resizes"]
    assert r["started_step"] == 6 and r["step"] == r["started_step"] + r["precopy_boundaries"], r
    assert r["precopy_boundaries"] >= 3 and 0 < r["rows_precopied"] <= 128 * r["precopy_boundaries"], r
    assert r["rows_final"] < r["rows"] and r["rows_recopied"] <= r["rows_final"], r  # not the whole table again
    assert r["rows_copied"] == r["rows_precopied"] + r["rows_final"] and r["shards_copied_whole"] == 0, r
    assert r["final_pause_s"] <= r["seconds"] and r["restarts"] == 0

    one_pause = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["6:4"], resize_share=0.0)
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=one_pause)  # every row at the boundary
    assert report["model_digest"] == never_resized()["model_digest"]
    (one,) = report["resizes"]
    assert one["step"] == 6 and one["rows_copied"] == one["rows"] and "precopy_boundaries" not in one


@pytest.mark.parametrize("budget", [1e-3, 5e-5], ids=["rounds-fit", "below-a-round"])
def test_under_ec_the_pre_copy_keeps_to_its_budget_in_seconds_on_average(
    monkeypatch: pytest.MonkeyPatch, budget: float
) -> None:
    """A budget in seconds per boundary is kept on average (here on a clock only the reads advance, by a fixed part
    per round of reads and a part per slot): a round reads every unfinished shard at once; a boundary with credit
    makes one round (and more while the next is predicted to fit), a boundary in debt reads nothing, so the move
    is never more than one round past its budget, and the final boundary comes only once the debt is paid off.
    After two rounds of two sizes the rounds are sized by the fitted cost: large enough that the fixed part is at
    most ROUND_FIXED_SHARE of a round (fewer, larger rounds than CHUNK_SLOTS), at most MAX_ROUND_BUDGETS budgets.
    Either way the move ends, exact."""
    fixed, per_slot, chunk = 4e-4, 1e-5, 16
    monkeypatch.setattr(move_budget, "CHUNK_SLOTS", chunk)  # the example's shards hold a few hundred rows
    monkeypatch.setattr(move_budget, "MAX_ROUND_BUDGETS", 40)
    monkeypatch.setattr(pause_prediction, "SAMPLE_MOST", 3)
    amortized = fixed * (1 - move_budget.ROUND_FIXED_SHARE) / (move_budget.ROUND_FIXED_SHARE * per_slot)
    now = [0.0]
    forward_old = OldServers.forward
    spent: list = []
    rounds: list = []  # per boundary: per round, (the shards read, the slots asked, the shards unfinished before)
    in_precopy = False
    moves: list = []
    open_at: list = []  # per boundary: the shards not read to their end when it began

    def read_on_the_clock(self: OldServers, reads: list, targets: object) -> list:
        out = forward_old(self, reads, targets)  # type: ignore[arg-type]
        if in_precopy:  # (the final boundary's sends are not on the budget)
            # the slots a round reads as the move counts them (within each shard's end, at least 1 a read)
            now[0] += fixed + per_slot * sum(
                max(1, min(s[1], int(o["end"]) - s[0])) for (_, _, s), o in zip(reads, out)
            )
            move = moves[-1]
            unfinished = sum(not c.done for c in move.shards.values())
            rounds[-1].append((len(reads), sum(s[1] for _, _, s in reads), unfinished))
        return out

    def on_phase(name: str, trainer: object, move: object) -> None:
        nonlocal in_precopy
        in_precopy = name == "precopy"
        if name == "precopy":
            moves.append(move)
            open_at.append(sum(not c.done for c in move.shards.values()))
            spent.append(-now[0])
            rounds.append([])
        elif name == "precopied":
            spent[-1] += now[0]

    ask_clocks = OldServers.clocks
    asked_on_the_clock: list = []

    def ask_on_the_clock(self: OldServers, asks: list) -> list:
        if in_precopy:  # (a pre-copy boundary asking the final pause's prediction)
            now[0] += 2 * budget
            asked_on_the_clock.append(len(spent))
            assert all(len(keys) <= 3 for _, _, keys in asks), asks  # a sample: SAMPLE_MOST keys a shard at most
        return ask_clocks(self, asks)

    monkeypatch.setattr(OldServers, "forward", read_on_the_clock)
    monkeypatch.setattr(OldServers, "clocks", ask_on_the_clock)
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["6:4"])
    report = job(MoveHooks(on_phase, seconds=budget, clock=lambda: now[0])).verify(
        steps=STEPS, deterministic=True, seed=SEED, cluster=cluster
    )
    assert report["model_digest"] == never_resized()["model_digest"]
    assert report["scrub"]["inconsistent"] == []
    (r,) = report["resizes"]
    assert r["precopy_boundaries"] == len(spent) >= 4 and r["step"] == r["started_step"] + len(spent), r
    assert r["rows_final"] < r["rows"] and r["restarts"] == 0, r
    flat = [x for boundary in rounds for x in boundary]
    assert all(shards == unfinished for shards, _, unfinished in flat), rounds  # every unfinished shard at once
    # two sizes (split evenly over the shards, rounded up), then by the fit
    assert all(0 <= asked - size < shards for (shards, asked, _), size in zip(flat, (chunk, 4 * chunk))), rounds
    if budget > fixed:
        assert any(asked >= amortized for _, asked, _ in flat[2:]), (rounds, amortized)  # large rounds once fitted
    most = 40 * budget + fixed  # MAX_ROUND_BUDGETS budgets at the mean cost per slot, plus one fixed part
    # the boundaries before the old servers answered forward_to (their links opening beside the steps) read
    # nothing and keep no credit
    told = next(i for i, reads in enumerate(rounds) if reads)
    assert spent[:told] == [0.0] * told, (rounds, spent)
    credit = 0.0
    for reads, seconds, unread in zip(rounds[told:], spent[told:], open_at[told:]):
        credit += budget
        # a boundary reads exactly when it has credit and a shard is left to read (in debt, or paying the debt off
        # once every shard was read, it reads nothing)
        assert bool(reads) == (credit > 0 and unread > 0), (rounds, spent, open_at)
        credit -= seconds
        assert credit > -most - 1e-12, (rounds, spent)  # never more than one round past the budget
    if r["step"] <= STEPS:  # not ended by the run's last boundary: the final came once the debt was paid off
        # and the final pause's predicted seconds were saved up (the steps change rows: some are copied again)
        assert r["rows_recopied"] > 0 and r["final_pause_predicted_s"] > 0, r
        assert credit >= r["final_pause_predicted_s"] - 1e-12, (rounds, spent, r)
    # asking the prediction costs two boundaries' budgets here: it is asked again only once the credit pays for
    # that too, never at every boundary (where the asking alone would keep the credit from ever reaching it)
    assert asked_on_the_clock or budget < fixed, r  # (below a round the run ends before every slot was read)
    assert all(b - a >= 2 for a, b in zip(asked_on_the_clock, asked_on_the_clock[1:])), asked_on_the_clock
    if budget < fixed:
        assert sum(map(bool, rounds)) < len(rounds) / 4, rounds  # a round every few boundaries


def test_a_cached_run_resized_up_and_down_ends_at_the_never_resized_model() -> None:
    """Worker caches follow a resize ("a worker's cache and in-flight pushes stay coherent"): the driver's quiesce at
    the boundary writes every cached gradient back to the old layout before the rows move, and each worker's caches
    start empty on the new one (a line's clock and epoch were its old server's). Staleness 0 stays exact."""
    cache = xdl_ec.Cache(rows=40, staleness=0)
    cluster = xdl_ec.Cluster(servers=2, cache=cache, resize_at=["10:3", "20:5", "25:2"])
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert [(r["servers_before"], r["servers_after"]) for r in report["resizes"]] == [(2, 3), (3, 5), (5, 2)]
    assert sum(s["hits"] for s in report["cache"].values()) > 0  # the caches were used, and refilled after


def test_a_cached_run_moved_in_the_background_under_ec_ends_at_the_never_resized_model() -> None:
    cache = xdl_ec.Cache(rows=40, staleness=0)
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), cache=cache, resize_at=["8:5", "20:4"], resize_share=0.2)
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


CACHE_SPEC = xdl_ec.Table(
    "t", 4, xdl_ec.optim.Adagrad(learning_rate=0.1), xdl_ec.init.RandomUniform(-0.05, 0.05), seed=7
)


def test_a_cached_client_follows_a_resize_only_with_nothing_pending_and_starts_empty() -> None:
    backend = LocalBackend()
    servers = [backend.start("server", i, ParameterServer, i, (CACHE_SPEC,)) for i in range(3)]
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


def test_an_old_server_forwards_its_slots_to_their_owners_among_the_fresh_servers() -> None:
    """forward_slots (the background move's copy, sent by the old server itself): each live row of the slots read
    lands on its owner among the fresh servers (the client's routing over their ids), bytes for bytes; the answer
    carries keys, slots, clocks, owners and the shard's end but no rows; a fresh server lost is answered as
    ``lost``, not raised as the old server's own loss."""
    backend = LocalBackend()
    old = [backend.start("server", i, ParameterServer, i, (CACHE_SPEC,)) for i in range(2)]
    fresh = [backend.start("server", i, ParameterServer, i, (CACHE_SPEC,)) for i in range(3)]
    ids = [0, 2, 5]  # stable ids with holes: routed by the ids, not the positions
    try:
        keys = np.arange(1, 400, dtype=np.int64) * 7919
        PSClient(old).pull({"t": (keys, 4)})  # inserted on the old servers
        server = old[1].local_object()
        whole = server.export("t")
        with pytest.raises(RuntimeError, match="was given no fresh servers; call forward_to"):
            old[1].call("forward_slots", [("t", (0, 1 << 62))], 30.0).result()
        old[1].call("forward_to", fresh, ids).result()
        (answer,) = old[1].call("forward_slots", [("t", (0, 1 << 62))], 30.0).result()
        assert "values" not in answer and "state" not in answer
        np.testing.assert_array_equal(np.sort(answer["keys"]), np.sort(whole["keys"]))
        np.testing.assert_array_equal(answer["owner"], owner_positions(answer["keys"], ids))
        np.testing.assert_array_equal(answer["clocks"], server.clocks("t", answer["keys"]))
        assert int(answer["end"]) >= int(answer["slots"][-1]) + 1 and answer["bytes"] > 0
        by_key = {int(k): i for i, k in enumerate(whole["keys"])}
        for position, handle in enumerate(fresh):
            got = handle.local_object().export("t")
            mine = np.sort(answer["keys"][answer["owner"] == position])
            np.testing.assert_array_equal(np.sort(got["keys"]), mine)
            at = [by_key[int(k)] for k in got["keys"]]
            np.testing.assert_array_equal(got["values"], whole["values"][at])
            np.testing.assert_array_equal(got["state"], whole["state"][at])
        # slots given as a list: only those
        some = np.asarray(answer["slots"][::5])
        (part,) = old[1].call("forward_slots", [("t", some)], 30.0).result()
        np.testing.assert_array_equal(part["slots"], some)
        fresh[1].drop()
        (lost,) = old[1].call("forward_slots", [("t", (0, 1 << 62))], 30.0).result()
        assert set(lost) == {"lost"} and "server 1 was lost" in lost["lost"], lost
        assert old[1].alive and server.size("t") == whole["keys"].size  # the old server serves on, unchanged
    finally:
        for handle in old + fresh:
            handle.drop()


def test_an_old_server_that_serves_links_forwards_over_links_of_its_own() -> None:
    """On Ray a server serves direct links (the run's secret): its forward_slots then loads the fresh servers over
    links it opens to them with that secret (one ``sendmsg`` a load, not a Ray call), and the rows land as over
    the backend; forward_to closes the links to the fresh servers it replaces."""
    from xdl_ec.net.job_secret import JobSecret

    secret = JobSecret.generate()
    backend = LocalBackend()
    old = backend.start("server", 0, ParameterServer, 0, (CACHE_SPEC,))
    fresh = [backend.start("server", i, ParameterServer, i, (CACHE_SPEC,)) for i in range(2)]
    try:
        keys = np.arange(1, 300, dtype=np.int64) * 104729
        PSClient([old]).pull({"t": (keys, 4)})
        server = old.local_object()
        server.open_links(secret)  # as the workers' and the driver's links have it open on Ray
        old.call("forward_to", fresh, [0, 1]).result()
        (answer,) = old.call("forward_slots", [("t", (0, 1 << 62))], 30.0).result()
        served = [h.local_object()._link_server for h in fresh]
        assert all(link is not None and link.calls >= 1 for link in served), served  # loads came over links
        got = np.concatenate([h.local_object().export("t")["keys"] for h in fresh])
        np.testing.assert_array_equal(np.sort(got), np.sort(keys))
        np.testing.assert_array_equal(np.sort(answer["keys"]), np.sort(keys))
        links = [h.link for h in server.forwarder.targets._handles]
        old.call("forward_to", fresh[:1], [0]).result()  # another move's fresh servers: the earlier links close
        assert all(link._conn is None for link in links)
    finally:
        for handle in [old, *fresh]:
            handle.drop()


def test_a_pre_copy_round_is_one_call_per_old_server_and_no_row_passes_the_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In the background move the driver asks each old server one forward_slots per round (every table it holds
    in that one call) and loads nothing itself: the rows go from old server to fresh owner. Exact all the same."""
    from xdl_ec.ps.backend import LocalHandle

    calls: list = []  # per pre-copy round: the driver's calls to servers, (server handle, method)
    driver: list = []
    call, round_ = LocalHandle.call, CopyRounds.round

    told: list = []  # the old servers told the fresh ones (forward_to, when the fresh stripes formed)

    def counted(self: LocalHandle, method: str, *args: object) -> object:
        if driver and threading.current_thread() is driver[0] and self.role == "server":
            calls[-1].append((id(self), method))
        if method == "forward_to":
            told.append(id(self))
        return call(self, method, *args)

    def counted_round(self: CopyRounds, targets: object, plan: list) -> tuple:
        driver[:] = [threading.current_thread()]
        calls.append([])
        try:
            return round_(self, targets, plan)  # type: ignore[arg-type]
        finally:
            driver.clear()

    monkeypatch.setattr(LocalHandle, "call", counted)
    monkeypatch.setattr(CopyRounds, "round", counted_round)
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["6:4"])
    report = job().verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert report["scrub"]["inconsistent"] == []
    (r,) = report["resizes"]
    assert r["restarts"] == 0 and r["rows_precopied"] > 0 and r["bytes_copied"] > 0, r
    assert calls, calls
    for round_calls in calls:
        assert {method for _, method in round_calls} == {"forward_slots"}, round_calls
        servers = [handle for handle, _ in round_calls]
        assert len(set(servers)) == len(servers) <= 3, round_calls  # one call per old server
    assert max(map(len, calls)) == 3, calls  # a round over every old server's shard at once
    assert sorted(told) == sorted(set(told)) and len(told) == 3, told  # each old server told the fresh ones once


def test_a_resize_due_during_another_move_starts_its_servers_beside_the_steps_then_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scheduled resize that came due while another move was under way had no servers started ahead: they start
    at the boundary that ends that move, in the background (the boundary does not wait for them), and its move
    begins at a later boundary, once they answer; a resize due at the run's last boundary still waits for its
    servers there. Exact either way."""
    starts: list = []
    start = resize_module.StartedServers.__init__

    def noted(self: object, trainer: object, servers: int, background: bool, *args: object) -> None:
        starts.append((int(trainer.step), servers, background))  # type: ignore[attr-defined]
        start(self, trainer, servers, background, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(resize_module.StartedServers, "__init__", noted)
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["6:4", "7:3", f"{STEPS}:4"])
    report = job(MoveHooks(rows=64)).verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert report["scrub"]["inconsistent"] == []
    first, second, third = report["resizes"]
    assert (first["servers_after"], second["servers_after"], third["servers_after"]) == (4, 3, 4)
    # the second's servers started at the boundary that ended the first move (step first["step"] - 1), beside
    # the steps; its move began at a later boundary
    assert (first["step"] - 1, 3, True) in starts, starts
    assert second["started_step"] > first["step"], (first, second)
    assert third["step"] == STEPS + 1 and third["restarts"] == 0, third  # the last boundary: ended there


def test_a_move_started_over_starts_its_new_fresh_servers_beside_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh server lost mid-move: the new fresh servers start in a thread, not at the boundary, and the
    boundaries until they answer read nothing (here the start is held for three boundaries); then the pre-copy
    starts over on them and the move completes at the never-resized model."""
    go = threading.Event()
    run = FreshStart.run

    def held(self: FreshStart) -> None:
        if self._thread is not None:  # a start beside the steps (the first fresh servers, given, form at once)
            assert go.wait(60)
        run(self)

    monkeypatch.setattr(FreshStart, "run", held)
    seen: list = []  # per pre-copy boundary: [servers starting, rows pre-copied before(, after)]

    killed: list = []

    def on_phase(name: str, trainer: object, move: object) -> None:
        if name == "precopy":
            seen.append([move.side.starting, move.rows_precopied])  # type: ignore[attr-defined]
            if not killed and move.rows_precopied:  # type: ignore[attr-defined]  # found when it sends rows again
                killed.append(len(seen) - 1)
                trainer.backend.kill(move.fresh[2])  # type: ignore[attr-defined]
            if killed and sum(starting for starting, *_ in seen[killed[0] + 1 :]) == 3:
                go.set()
        elif name == "precopied":
            seen[-1].append(move.rows_precopied)  # type: ignore[attr-defined]

    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["8:4"])
    report = job(MoveHooks(on_phase, rows=96)).verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert report["scrub"]["inconsistent"] == []
    (r,) = report["resizes"]
    assert r["restarts"] == 1 and report["failures"] == [], r
    (lost,) = [i for i, b in enumerate(seen) if len(b) == 2]  # the boundary that found the loss (started over)
    assert killed[0] <= lost, (killed, seen)  # (at the first round that sends it a row)
    # the next three waited for the new servers, reading nothing; once they answered the pre-copy went on
    assert all(b[0] and b[1] == b[2] for b in seen[lost + 1 : lost + 4]), seen
    assert any(b[2] > b[1] for b in seen[lost + 4 :]), seen


def test_resize_from_another_thread_while_training() -> None:
    j = job()
    done: dict = {}

    def ask() -> None:
        while j._resizer is None or j._resizer._trainer is None:  # the fit's cluster is up
            threading.Event().wait(0.05)
        done["record"] = j.resize(servers=4, timeout=120)
        # the two new servers were started by the ask, ahead of the boundary, and used there: none started twice
        backend = j._resizer._trainer.backend
        done["servers_started"] = sum(1 for h in backend._handles if h.role == "server")
        # every server holds exactly the rows the new count routes to it (read while training goes on)
        scheduler = j._resizer._trainer.scheduler
        done["owners"] = [
            np.unique(_core.server_of(rows["keys"], 4)).tolist() for rows in scheduler.exports(j.spec.tables[0].name)
        ]

    asker = threading.Thread(target=ask)
    asker.start()
    report = j.fit(steps=STEPS, deterministic=True, seed=SEED, cluster=xdl_ec.Cluster(servers=2))
    asker.join(60)
    assert done["record"]["servers_after"] == 4
    assert report["resizes"][0]["servers_after"] == 4 and len(report["servers"]) == 4
    assert done["owners"] == [[0], [1], [2], [3]]
    assert done["servers_started"] == 4
    assert report["model_digest"] == never_resized()["model_digest"]


def test_resize_from_another_thread_under_ec_moves_in_the_background() -> None:
    """job.resize under --ft ec answers once the background move switched: its pre-copy spans boundaries while
    training goes on, and the model is the never-resized run's."""
    j = job(MoveHooks(rows=64))
    done: dict = {}

    def ask() -> None:
        while j._resizer is None or j._resizer._trainer is None:
            threading.Event().wait(0.05)
        done["record"] = j.resize(servers=4, timeout=120)
        done["servers"] = len(j._resizer._trainer.scheduler.servers)

    asker = threading.Thread(target=ask)
    asker.start()
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1))
    report = j.verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    asker.join(60)
    record = done["record"]
    assert done["servers"] == 4 and report["resizes"] == [record]
    assert record["precopy_boundaries"] >= 2 and record["step"] > record["started_step"], record
    assert report["model_digest"] == never_resized()["model_digest"]
    assert report["scrub"]["inconsistent"] == []


def test_a_resize_that_cannot_be_done_is_an_error_that_changes_nothing() -> None:
    with pytest.raises(ResizeError, match="no cluster run"):
        job().resize(servers=3)
    for text, message in [
        ("1:3", "STEP must be >= 2"),
        ("5:0", "SERVERS must be >= 1"),
        ("5", "STEP:SERVERS"),
        ("5:3:drain=1,1", "drained twice"),
        ("5:3:drain=x", "drain=ID"),
        ("5:3:code=3", "code: must be 'k,r'"),
        ("5:3:code=0,1", "code: need k >= 1"),
        ("5:3:code=2,1:code=2,1", "code= is given twice"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_resize(text)
    assert parse_resize("5:3:drain=1,2") == resize_module.ResizeAt(5, 3, (1, 2))
    coded = parse_resize(" 5 : 5 : drain = 1 : code = 3 , 2 ")
    assert coded == resize_module.ResizeAt(5, 5, (1,), (3, 2)) and parse_resize(str(coded)) == coded
    assert str(coded) == "5:5:drain=1:code=3,2" and parse_resize("5:5:code=3,2:drain=1") == coded
    with pytest.raises(ValueError, match="5:3:code=2,1: a code needs --ft ec"):
        job().fit(steps=10, cluster=xdl_ec.Cluster(servers=2, resize_at=["5:3:code=2,1"]))
    with pytest.raises(ValueError, match="code k=3, r=2 needs at least 5 servers"):
        job().fit(steps=10, cluster=xdl_ec.Cluster(servers=4, ft="ec", code=(2, 1), resize_at=["5:4:code=3,2"]))
    with pytest.raises(ValueError, match="has 4 servers then already with the code k=2, r=1"):
        job().fit(steps=10, cluster=xdl_ec.Cluster(servers=4, ft="ec", code=(2, 1), resize_at=["5:4:code=2,1"]))
    with pytest.raises(ValueError, match="code k=3, r=2 needs at least 5 servers"):  # the code a resize left
        cluster = xdl_ec.Cluster(servers=4, ft="ec", code=(2, 1), resize_at=["5:5:code=3,2", "8:4"])
        job().fit(steps=10, cluster=cluster)
    with pytest.raises(ValueError, match=r"drain: server id \[4\] is not live"):
        job().fit(steps=10, cluster=xdl_ec.Cluster(servers=4, resize_at=["5:3:drain=4"]))
    with pytest.raises(ValueError, match=r"drain: server id \[1\] is not live"):  # drained at 5, gone at 8
        job().fit(steps=10, cluster=xdl_ec.Cluster(servers=4, resize_at=["5:3:drain=1", "8:2:drain=1"]))
    with pytest.raises(ValueError, match="needs at least 3 servers"):
        job().fit(steps=10, cluster=xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["5:2:drain=1"]))
    with pytest.raises(ValueError, match="two resizes at step 5"):
        xdl_ec.Cluster(servers=2, resize_at=["5:3", "5:4"])
    with pytest.raises(ValueError, match="needs at least 3 servers"):
        job().fit(steps=10, cluster=xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["5:2"]))
    with pytest.raises(ValueError, match="has 2 servers then already"):
        job().fit(steps=10, cluster=xdl_ec.Cluster(servers=2, resize_at=["5:2"]))

    j = job()
    seen: dict = {}
    gate = threading.Event()

    class HoldAtBoundary:  # holds the training thread at its boundaries, before the resizer, until the gate opens
        def after_step(self, trainer: object) -> None:
            gate.wait(60)

        def due(self, step: int) -> bool:
            return False

    def ask() -> None:
        while j._resizer is None or j._resizer._trainer is None:
            threading.Event().wait(0.05)
        trainer = j._resizer._trainer
        trainer.hooks.insert(0, HoldAtBoundary())
        for servers, drain, code, message in [
            (0, None, None, "at least 1 server"),
            (2, None, None, "has 2 servers already"),
            (2, 5, None, r"server id \[5\] is not live \(the live ids are \[0, 1\]\)"),
            (2, [0, 0], None, "given twice"),
            (2, "1", None, "expected a server id"),
            (3, None, (2, 1), "a code needs --ft ec"),
        ]:
            with pytest.raises(ResizeError, match=message):
                j.resize(servers=servers, drain=drain, code=code)  # type: ignore[arg-type]
        seen["servers"] = len(trainer.scheduler.servers)
        first = threading.Thread(target=lambda: seen.setdefault("first", j.resize(servers=3, timeout=120)))
        first.start()
        while j._resizer._request is None:
            threading.Event().wait(0.001)
        for servers, drain in [(4, None), (2, 1)]:  # a drain while another resize runs too
            with pytest.raises(ResizeError, match="a resize to 3 servers is under way"):
                j.resize(servers=servers, drain=drain)
        seen["busy"] = len(trainer.scheduler.servers)
        gate.set()
        first.join(120)

    def ask_and_open_the_gate() -> None:
        try:
            ask()
        except BaseException as err:  # noqa: BLE001 - asserted by the test's thread
            seen["error"] = err
        finally:
            gate.set()

    asker = threading.Thread(target=ask_and_open_the_gate)
    asker.start()
    report = j.fit(steps=STEPS, deterministic=True, seed=SEED, cluster=xdl_ec.Cluster(servers=2))
    asker.join(60)
    assert seen.get("error") is None, seen["error"]
    assert seen["servers"] == 2 and seen["busy"] == 2  # the refused asks changed nothing
    assert seen["first"]["servers_after"] == 3 and len(report["servers"]) == 3
    assert report["model_digest"] == never_resized()["model_digest"]


def test_a_resize_share_is_checked_and_taken_by_the_run(capsys: pytest.CaptureFixture) -> None:
    """``resize_share`` / ``--resize-share``: the share of the steps' time a background move may take (ft="ec"), in
    [0, 1); anything else is a clear error before a server starts, and the run's Resizer takes it."""
    for bad, message in [(1.0, r"resize_share: must be a finite number in \[0.0, 1.0\), got 1.0"), (-0.1, "got -0.1")]:
        with pytest.raises(ValueError, match=message):
            xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_share=bad)
    with pytest.raises(ValueError, match="resize_share: only used with ft='ec'"):
        xdl_ec.Cluster(servers=3, resize_share=0.2)
    assert xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_share=0.25).resize_share == 0.25
    assert (
        Resizer(resize_share=0.25).resize_share == 0.25 and Resizer().resize_share == resize_module.RESIZE_SHARE == 0.1
    )
    from xdl_ec.cli import main

    assert main(["train", "--synthetic", "--steps", "5", "--servers", "3", "--resize-share", "0.2"]) == 2
    assert "--resize-share: only used with --ft ec" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--synthetic", "--servers", "3", "--ft", "ec", "--code", "2,1", "--resize-share", "1"])
    assert exit_.value.code == 2 and "a number in [0, 1)" in capsys.readouterr().err


def test_xdl_ec_resize_takes_a_code_by_the_rule_of_code(capsys: pytest.CaptureFixture) -> None:
    from xdl_ec.cli import build_parser
    from xdl_ec.cli.train_report import code_change as _code_change

    assert _code_change({"code_before": [2, 1], "code": [3, 2]}) == " (code 2,1 -> 3,2)"  # the printed line's tail
    assert _code_change({"code_before": [2, 1], "code": [2, 1]}) == _code_change({}) == ""
    args = build_parser().parse_args(["resize", "--run", "d", "5", "--code", "3,2", "--drain", "1"])
    assert (args.servers, args.code, args.drain) == (5, (3, 2), [1])
    assert build_parser().parse_args(["resize", "--run", "d", "5"]).code is None
    for bad, message in [("3", "expected K,R"), ("0,1", "need k >= 1"), ("2,5", "1 <= r <= 4")]:
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(["resize", "--run", "d", "5", "--code", bad])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_routing_after_a_resize_is_the_new_counts() -> None:
    keys = np.arange(-5000, 5000, dtype=np.int64) * 7919
    assert np.all(_core.server_of(keys, 3)[_core.server_of(keys, 2) != _core.server_of(keys, 3)] == 2)


def test_routing_after_a_drain_is_the_route_table_of_the_ids_left() -> None:
    from xdl_ec.ps.client import owner_positions, route

    keys = np.arange(-5000, 5000, dtype=np.int64) * 7919
    ids = [3, 0, 2]  # server 1 of 4 drained, the servers in the cluster's order
    positions = owner_positions(keys, ids)
    assert np.array_equal(np.asarray(ids)[positions], _core.RouteTable([0, 2, 3]).servers_of(keys))
    four = _core.server_of(keys, 4)
    assert np.all(np.asarray(ids)[positions][four != 1] == four[four != 1])  # only id 1's keys changed owner
    parts = route(keys, 3, ids)
    assert sorted(np.concatenate(parts).tolist()) == list(range(keys.size))
    assert all(np.all(positions[p] == s) for s, p in enumerate(parts))
    assert resize_module.plan_ids([0, 1, 2, 3], 3, (1,)) == ([0, 2, 3], [0, 2, 3])
    assert resize_module.plan_ids([0, 2, 3], 4) == ([0, 1, 2], [0, 2, 3, 1])  # the smallest free id comes back
    assert resize_module.plan_ids([0, 1, 2, 3], 4, (1,)) == ([0, 2, 3], [0, 2, 3, 1])  # a drain at the same count
    assert resize_module.plan_ids([0, 1, 2, 3], 2, (0,)) == ([1, 2], [1, 2])  # then the highest ids leave


@pytest.mark.ray
def test_on_ray_a_run_resized_up_and_down_ends_at_the_never_resized_model() -> None:
    """New servers are Ray actors (placed by Ray: a failure-domain placement is refused), the old ones' processes
    are killed once empty (none, here server 0 drained at step 20) or once the re-formed stripes are durable (ec,
    the rows moved over several boundaries, then the code changed at the same count)."""
    pytest.importorskip("ray")
    import ray

    from xdl_ec.ps.backend import connect_ray

    started = not ray.is_initialized()
    try:
        connect_ray()
        plain = xdl_ec.Cluster(servers=2, backend="ray", resize_at=["10:3", "20:2:drain=0"])
        report = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=plain)
        assert report["model_digest"] == never_resized()["model_digest"]
        assert [(r["servers_after"], r["server_ids"]) for r in report["resizes"]] == [(3, [0, 1, 2]), (2, [1, 2])]
        # the second resize changes the code at the same count: the stripes re-formed with 3,1 on fresh actors
        coded = xdl_ec.Cluster(servers=3, backend="ray", ft="ec", code=(2, 1), resize_at=["10:4", "20:4:code=3,1"])
        report = job(MoveHooks(rows=128)).verify(steps=STEPS, deterministic=True, seed=SEED, cluster=coded)
        assert report["model_digest"] == never_resized()["model_digest"]
        assert report["scrub"]["inconsistent"] == [] and [r["servers_after"] for r in report["resizes"]] == [4, 4]
        assert report["resizes"][0]["precopy_boundaries"] >= 2, report["resizes"][0]
        assert (report["resizes"][1]["code_before"], report["resizes"][1]["code"]) == ([2, 1], [3, 1])
        assert report["code"] == {"k": 3, "r": 1}
    finally:
        if started:
            ray.shutdown()


def test_xdl_ec_resize_reaches_a_running_train_through_its_run_dir(tmp_path: Path) -> None:
    """``xdl-ec train --run-dir DIR`` takes SIGUSR1 with DIR's request; ``xdl-ec resize --run DIR N`` asks and prints
    the resize, and an ask after the run ended names the missing run (refusals and the model a resize keeps are the
    other tests' subject)."""
    flags = ["train", "--synthetic", "--synthetic-rows", "4000", "--batch-size", "64", "--steps", "400"]
    flags += ["--servers", "2", "--deterministic", "--no-progress", "--seed", "3"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in sys.path if p)}
    run_dir = tmp_path / "run"
    training = subprocess.Popen(
        [sys.executable, "-P", "-m", "xdl_ec", *flags, "--run-dir", str(run_dir), "--report", str(tmp_path / "r.json")],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        while not (run_dir / "train.pid").exists():
            assert training.poll() is None, "the training run ended before its pid file appeared"
            time.sleep(0.1)
        coded = subprocess.run(  # the code reaches the run through its request: refused there (--ft none)
            [sys.executable, "-P", "-m", "xdl_ec", "resize", "--run", str(run_dir), "3", "--code", "2,1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert coded.returncode == 1 and "a code needs --ft ec" in coded.stderr, coded.stderr
        asked = subprocess.run(
            [sys.executable, "-P", "-m", "xdl_ec", "resize", "--run", str(run_dir), "3", "--drain", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert asked.returncode == 0, asked.stderr
        assert "2 -> 3 servers" in asked.stdout and "(drained server 0)" in asked.stdout
        assert training.wait(300) == 0
    finally:
        if training.poll() is None:
            training.kill()
    report = json.loads((tmp_path / "r.json").read_text())
    # server 0 left; the two new servers took the smallest free ids, 0 (its own) and 2
    assert [(r["servers_before"], r["servers_after"], r["server_ids"]) for r in report["resizes"]] == [
        (2, 3, [1, 0, 2])
    ]
    assert not (run_dir / "train.pid").exists()
    gone = subprocess.run(
        [sys.executable, "-P", "-m", "xdl_ec", "resize", "--run", str(run_dir), "3"], env=env, capture_output=True
    )
    assert gone.returncode == 2 and b"no training run there" in gone.stderr
