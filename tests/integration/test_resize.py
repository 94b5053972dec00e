"""Elastic servers (issue #38): a run whose servers are resized while it trains (``--resize-at STEP:N``,
``job.resize`` from another thread) ends at the never-resized run's model_digest (one worker, deterministic), moves
only the rows whose route changed, and a resize that cannot be done is a clear error that changes nothing."""

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
from xdl_ec.ps.resize import ResizeError, Resizer, parse_resize  # noqa: E402

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


def test_a_run_resized_up_and_down_under_ec_ends_at_the_never_resized_model_and_scrubs_clean() -> None:
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["8:5", "16:4", "24:3"])
    report = job().verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert report["model_digest"] == never_resized()["model_digest"]
    assert [(r["servers_before"], r["servers_after"]) for r in report["resizes"]] == [(3, 5), (5, 4), (4, 3)]
    assert report["scrub"]["inconsistent"] == []  # the stripes re-formed over the last count hold every row
    for r in report["resizes"]:  # the stripes are re-formed on fresh servers: every row is copied once
        assert r["rows_copied"] == r["rows"] and abs(r["moved_fraction"] - r["ideal_fraction"]) < 0.1, r


@pytest.mark.parametrize("phase, victim", [("export", 1), ("load", 2)], ids=["old-server", "fresh-server"])
def test_a_server_killed_mid_move_under_ec_is_rebuilt_exactly_and_the_resize_completes(
    monkeypatch: pytest.MonkeyPatch, phase: str, victim: int
) -> None:
    """export: an old server dies right before its rows are read (the old stripes rebuild it, the resize is tried
    again); load: a fresh server dies after a table's rows were loaded onto the new layout (the move starts over on
    fresh servers, every row still in hand and on the old servers)."""
    killed: list = []

    def kill_once(name: str, trainer: object) -> None:
        if name == phase and not killed:
            killed.append(name)
            trainer.scheduler.kill("server", victim)  # type: ignore[attr-defined]

    monkeypatch.setattr(Resizer, "on_phase", staticmethod(kill_once))
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["10:4", "20:3"])
    report = job().verify(steps=STEPS, deterministic=True, seed=SEED, cluster=cluster)
    assert killed == [phase]
    assert report["model_digest"] == never_resized()["model_digest"]
    assert [(r["servers_before"], r["servers_after"]) for r in report["resizes"]] == [(3, 4), (4, 3)]
    assert report["scrub"]["inconsistent"] == []
    if phase == "export":
        assert [(f["step"], f["index"]) for f in report["failures"]] == [(10, victim)]  # lost before step 10
    else:
        assert report["resizes"][0]["restarts"] == 1 and report["failures"] == []


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


def test_a_resize_that_cannot_be_done_is_an_error_that_changes_nothing() -> None:
    with pytest.raises(ResizeError, match="no cluster run"):
        job().resize(servers=3)
    for text, message in [("1:3", "STEP must be >= 2"), ("5:0", "SERVERS must be >= 1"), ("5", "STEP:SERVERS")]:
        with pytest.raises(ValueError, match=message):
            parse_resize(text)
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
        for servers, message in [(0, "at least 1 server"), (2, "has 2 servers already"), (3, "not supported yet")]:
            with pytest.raises(ResizeError, match=message):
                j.resize(servers=servers, drain=0 if servers == 3 else None)
        seen["servers"] = len(trainer.scheduler.servers)
        first = threading.Thread(target=lambda: seen.setdefault("first", j.resize(servers=3, timeout=120)))
        first.start()
        while j._resizer._request is None:
            threading.Event().wait(0.001)
        with pytest.raises(ResizeError, match="a resize to 3 servers is under way"):
            j.resize(servers=4)
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


def test_routing_after_a_resize_is_the_new_counts() -> None:
    keys = np.arange(-5000, 5000, dtype=np.int64) * 7919
    assert np.all(_core.server_of(keys, 3)[_core.server_of(keys, 2) != _core.server_of(keys, 3)] == 2)


@pytest.mark.ray
def test_on_ray_a_run_resized_up_and_down_ends_at_the_never_resized_model() -> None:
    """New servers are Ray actors (placed by Ray: a failure-domain placement is refused), the old ones' processes
    are killed once empty (none) or once the re-formed stripes are durable (ec)."""
    pytest.importorskip("ray")
    import ray

    from xdl_ec.ps.backend import connect_ray

    started = not ray.is_initialized()
    try:
        connect_ray()
        plain = xdl_ec.Cluster(servers=2, backend="ray", resize_at=["10:3", "20:2"])
        report = job().fit(steps=STEPS, deterministic=True, seed=SEED, cluster=plain)
        assert report["model_digest"] == never_resized()["model_digest"]
        assert [r["servers_after"] for r in report["resizes"]] == [3, 2]
        coded = xdl_ec.Cluster(servers=3, backend="ray", ft="ec", code=(2, 1), resize_at=["10:4", "20:3"])
        report = job().verify(steps=STEPS, deterministic=True, seed=SEED, cluster=coded)
        assert report["model_digest"] == never_resized()["model_digest"]
        assert report["scrub"]["inconsistent"] == [] and [r["servers_after"] for r in report["resizes"]] == [4, 3]
    finally:
        if started:
            ray.shutdown()


def test_xdl_ec_resize_reaches_a_running_train_through_its_run_dir(tmp_path: Path) -> None:
    """``xdl-ec train --run-dir DIR`` takes SIGUSR1 with DIR's request; ``xdl-ec resize --run DIR N`` asks and prints
    the resize, and an ask after the run ended names the missing run (refusals and the model a resize keeps are the
    other tests' subject)."""
    flags = ["train", "--synthetic", "--synthetic-rows", "4000", "--batch-size", "64", "--steps", "300"]
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
        asked = subprocess.run(
            [sys.executable, "-P", "-m", "xdl_ec", "resize", "--run", str(run_dir), "3"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert asked.returncode == 0, asked.stderr
        assert "2 -> 3 servers" in asked.stdout
        assert training.wait(300) == 0
    finally:
        if training.poll() is None:
            training.kill()
    report = json.loads((tmp_path / "r.json").read_text())
    assert [(r["servers_before"], r["servers_after"]) for r in report["resizes"]] == [(2, 3)]
    assert not (run_dir / "train.pid").exists()
    gone = subprocess.run(
        [sys.executable, "-P", "-m", "xdl_ec", "resize", "--run", str(run_dir), "3"], env=env, capture_output=True
    )
    assert gone.returncode == 2 and b"no training run there" in gone.stderr
