"""The run dir's side of a reattachable run without Ray (docs/design/reattach.md): the driver's heartbeat record,
and ending a run's head, which must leave no process of its session running."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from xdl_ec.ps.reattachable_run import namespace_of
from xdl_ec.ps.run_head import HEAD_FILE, forget_current_cluster, read_head, session_members, stop_head
from xdl_ec.ps.run_heartbeat import RunHeartbeat, last_heartbeat


def test_heartbeat_records_the_completed_step_and_the_grace(tmp_path: Path) -> None:
    assert last_heartbeat(tmp_path) is None
    beat = RunHeartbeat(tmp_path, 7.5)
    beat.start(step=3, samples=30)
    try:
        first = last_heartbeat(tmp_path)
        assert first is not None
        assert (first["pid"], first["step"], first["samples"], first["grace"]) == (os.getpid(), 3, 30, 7.5)

        class Strategy:
            rebuilding = False

        class Run:
            step, samples, strategy = 12, 1536, Strategy()

        beat.after_step(Run())
        after = last_heartbeat(tmp_path)
        assert after is not None and (after["step"], after["samples"]) == (12, 1536)
        assert after["time"] >= first["time"]
        assert (after["recovering"], after["rebuilding"]) == (False, False)
        # a recovery is on disk before it changes any role, and its rebuild until a boundary finds it over
        beat.recovery(True)
        during = last_heartbeat(tmp_path)
        assert during is not None and (during["recovering"], during["rebuilding"]) == (True, True)
        beat.recovery(False)
        Strategy.rebuilding = True
        beat.after_step(Run())
        rebuilding = last_heartbeat(tmp_path)
        assert rebuilding is not None and (rebuilding["recovering"], rebuilding["rebuilding"]) == (False, True)
        Strategy.rebuilding = False
        beat.after_step(Run())
        done = last_heartbeat(tmp_path)
        assert done is not None and (done["recovering"], done["rebuilding"]) == (False, False)
    finally:
        beat.stop()
    assert last_heartbeat(tmp_path) is not None  # what a dead driver leaves: how far it got


def test_stop_head_ends_every_process_of_the_heads_session(tmp_path: Path) -> None:
    # a stand-in for the supervisor: a session leader with children of its own, as ray's processes are
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True, stdin=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            if len(session_members(leader.pid)) >= 3:
                break
            time.sleep(0.02)
        assert len(session_members(leader.pid)) >= 3
        record = {"address": "127.0.0.1:1", "supervisor": leader.pid, "session": leader.pid}
        (tmp_path / HEAD_FILE).write_text(json.dumps(record))
        assert read_head(tmp_path) == record
        stop_head(tmp_path, record, timeout=0.5)
        leader.wait(timeout=10)
        assert session_members(leader.pid) == []
        assert not (tmp_path / HEAD_FILE).exists()
        assert read_head(tmp_path) is None
    finally:
        if leader.poll() is None:
            leader.kill()


def test_a_head_whose_supervisor_is_gone_is_not_found(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / HEAD_FILE).write_text(json.dumps({"address": "x", "supervisor": gone.pid, "session": gone.pid}))
    assert read_head(tmp_path) is None


def test_each_run_dir_has_its_own_namespace(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert namespace_of(a) != namespace_of(b)
    assert namespace_of(a) == namespace_of(tmp_path / "x" / ".." / "a")


def test_an_ended_head_is_no_longer_rays_current_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `ray start` wrote it; a later ray.init() of this machine would try to join the dead head
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    current = tmp_path / "ray" / "ray_current_cluster"
    current.parent.mkdir()
    current.write_text("192.0.2.2:41234")
    forget_current_cluster("127.0.0.1:41235")  # another cluster's: left alone
    assert current.read_text() == "192.0.2.2:41234"
    forget_current_cluster("127.0.0.1:41234")
    assert not current.exists()
    forget_current_cluster("127.0.0.1:41234")  # none left: nothing to do
