"""FailureSchedule and the fault-tolerance flags: parsing, seeded MTBF determinism, bad values -> clear errors,
and the kills being real (the role's object is gone and calls to it fail)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.paths import REPO_ROOT  # noqa: E402
from xdl_ec.ft.failure_injector import FailureInjector
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill, parse_kill
from xdl_ec.job.cluster import Cluster


def test_parse_kill_step_and_index() -> None:
    assert parse_kill("50", "server", "--fail-at") == Kill(50, "server", 0)
    assert parse_kill(" 7:3 ", "worker", "--fail-worker-at") == Kill(7, "worker", 3)


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "expected STEP"),
        ("a:1", "expected STEP"),
        ("3:", "expected STEP"),
        ("-1", "expected STEP"),
        ("0", "STEP must be >= 1"),
        ("1:2:3", "expected"),
    ],
)
def test_parse_kill_rejects_bad_values_naming_the_flag(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"--fail-at.*{message}"):
        parse_kill(text, "server", "--fail-at")


def test_explicit_kills_fire_once_in_step_order() -> None:
    schedule = FailureSchedule.from_flags(["5:1", "2"], ["3:1"])
    schedule.validate(num_servers=2, num_workers=2, total_steps=10)
    assert schedule.due(1, 0.0) == []
    assert schedule.due(2, 0.0) == [Kill(2, "server", 0)]
    assert schedule.due(4, 0.0) == [Kill(3, "worker", 1)]  # a missed boundary still fires
    assert schedule.due(5, 0.0) == [Kill(5, "server", 1)]
    assert schedule.due(6, 0.0) == [] and schedule.kills == []


def test_kills_a_dead_driver_made_are_not_made_again_after_a_reattach() -> None:
    schedule = FailureSchedule.from_flags(["5:1", "2"], ["3:1"], mtbf=30.0, seed=1)
    schedule.made_through(3)  # the reattached driver continues after step 3
    assert schedule.kills == [Kill(5, "server", 1)]
    assert schedule.due(5, 0.0) == [Kill(5, "server", 1)]
    assert schedule.fired == [(Kill(5, "server", 1), None)]  # the dead driver's kills are not this run's


def test_a_step_asked_for_again_after_its_mtbf_failure_gets_no_second_one() -> None:
    """The driver asks again for the step it recovered before; a recovery slower than the MTBF leaves due times
    behind, and killing at every ask would never let the step run."""
    schedule = FailureSchedule(mtbf=0.001, seed=2)
    schedule.validate(num_servers=2, num_workers=1)
    first = schedule.due(4, 100.0)
    assert len(first) == 1 and first[0].step == 4
    assert schedule.due(4, 100.0) == [] and schedule.due(4, 200.0) == []
    assert len(schedule.due(5, 100.0)) == 1  # the backlog goes on at the next step
    assert [k.index for k, _ in schedule.fired] == [i for _, i in schedule.mtbf_times(2)]


class _View:
    """What FailureInjector.before_step calls of a cluster view: a quiesce that meets a lost role ``fails`` times."""

    num_servers = 2

    def __init__(self, fails: int) -> None:
        self.fails, self.killed = fails, []

    def quiesce(self) -> None:
        if self.fails:
            self.fails -= 1
            raise RuntimeError("server 0 was lost")

    def kill(self, role: str, index: int) -> None:
        self.killed.append((role, index))


def test_a_kill_whose_quiesce_met_a_lost_role_is_made_when_called_again() -> None:
    injector = FailureInjector(FailureSchedule.from_flags(["4:1"], []))
    view = _View(fails=1)
    with pytest.raises(RuntimeError, match="lost"):
        injector.before_step(view, 4, 0.0)  # type: ignore[arg-type]
    assert view.killed == []
    injector.before_step(view, 4, 0.0)  # type: ignore[arg-type]  # after the driver recovered the lost role
    assert view.killed == [("server", 1)]
    assert [(k["step"], k["index"]) for k in injector.injected()] == [(4, 1)]
    injector.before_step(view, 5, 0.0)  # type: ignore[arg-type]
    assert view.killed == [("server", 1)]


def test_validate_names_missing_roles_and_unreached_steps() -> None:
    with pytest.raises(ValueError, match=r"--fail-at 2:4: there is no server 4 \(the run has 3 servers"):
        FailureSchedule.from_flags(["2:4"]).validate(3, 1, 10)
    with pytest.raises(ValueError, match="--fail-worker-at 1:1: there is no worker 1"):
        FailureSchedule.from_flags([], ["1:1"]).validate(3, 1, 10)
    with pytest.raises(ValueError, match="--fail-at 11:0: the run has only 10 steps"):
        FailureSchedule.from_flags(["11"]).validate(3, 1, 10)


def test_a_kill_names_a_server_of_the_count_planned_at_its_step() -> None:
    """With --resize-at 80:5 on 3 servers, server 4 exists from step 80 on: a kill of it at 120 is accepted, at 50
    refused naming the step; at run time it waits until the server is there (an ec move may still be copying)."""
    schedule = FailureSchedule.from_flags(["120:4", "130:1"], resizes=[(80, 5)])
    schedule.validate(num_servers=3, num_workers=1, total_steps=200)
    assert schedule.servers_at(79, 3) == 3 and schedule.servers_at(80, 3) == 5
    assert schedule.due(125, 0.0, num_servers=3) == []  # the move has not switched yet
    assert schedule.due(131, 0.0, num_servers=3) == [Kill(130, "server", 1)]
    assert schedule.due(140, 0.0, num_servers=5) == [Kill(120, "server", 4)]
    with pytest.raises(ValueError, match=r"--fail-at 50:4: there is no server 4 at step 50 \(the run has 3 servers"):
        FailureSchedule.from_flags(["50:4"], resizes=[(80, 5)]).validate(3, 1, 200)
    with pytest.raises(ValueError, match=r"--fail-at 90:3: there is no server 3 at step 90 \(the run has 2 servers"):
        FailureSchedule.from_flags(["90:3"], resizes=[(20, 5), (60, 2)]).validate(3, 1, 200)


def test_the_cluster_checks_kills_against_its_resize_schedule() -> None:
    accepted = Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["80:5"], fail_at=["120:4"])
    accepted.failure_schedule(0).validate(3, 1, 160)
    refused = Cluster(servers=3, ft="ec", code=(2, 1), resize_at=["80:5"], fail_at=["50:4"])
    with pytest.raises(ValueError, match="there is no server 4 at step 50"):
        refused.failure_schedule(0).validate(3, 1, 160)


@pytest.mark.parametrize("mtbf", [0, -1.0, float("inf"), float("nan"), True])
def test_bad_mtbf_is_rejected(mtbf: float) -> None:
    with pytest.raises(ValueError, match="--mtbf: expected a positive finite number"):
        FailureSchedule(mtbf=mtbf)


def _mtbf_fired(seed: int, steps: int = 400, seconds_per_step: float = 0.5) -> list:
    schedule = FailureSchedule(mtbf=10.0, seed=seed)
    schedule.validate(num_servers=4, num_workers=1)
    fired = []
    for step in range(1, steps + 1):
        for k in schedule.due(step, step * seconds_per_step):
            fired.append((k.step, k.index))
    return fired


def test_seeded_mtbf_is_deterministic_and_exponential() -> None:
    a, b, c = _mtbf_fired(7), _mtbf_fired(7), _mtbf_fired(8)
    assert a == b and a != c
    # 200 s of training with a 10 s MTBF: about 20 failures, never more than one per boundary, every server hit
    assert 8 <= len(a) <= 40
    assert len({step for step, _ in a}) == len(a)
    assert {index for _, index in a} == {0, 1, 2, 3}
    times = FailureSchedule(mtbf=10.0, seed=7).mtbf_times(2000)
    gaps = [t1 - t0 for (t0, _), (t1, _) in zip([(0.0, 0)] + times, times)]
    assert 9.0 < sum(gaps) / len(gaps) < 11.0  # mean inter-arrival = MTBF


def test_a_scheduled_kill_is_real_and_none_stops_naming_the_role() -> None:
    from support.ft_runs import make_trainer, small_config
    from xdl_ec.ps import ClusterConfig, ServerLost

    trainer = make_trainer(
        small_config(steps=8), ClusterConfig(servers=3), failures=FailureSchedule.from_flags(["4:2"])
    )
    try:
        with pytest.raises(ServerLost, match="server 2 was lost") as info:
            trainer.fit()
        assert info.value.index == 2 and trainer.step == 3
        assert trainer.scheduler.cluster_map()["servers"][2]["alive"] is False
        injected = trainer.injector.injected()
        assert injected[0]["step"] == 4 and injected[0]["role"] == "server"
    finally:
        trainer.close()


def _cli(*flags: str) -> subprocess.CompletedProcess:
    root = REPO_ROOT
    return subprocess.run(
        [sys.executable, "-P", "-m", "xdl_ec", "train", "--synthetic", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--ft", "ckpt"], "--ft: needs --servers N"),
        (["--servers", "2", "--fail-at", "x"], "--fail-at: expected STEP"),
        (["--servers", "2", "--steps", "5", "--fail-at", "3:7"], "there is no server 7"),
        (["--servers", "2", "--ft", "cpr", "--ckpt-interval", "5"], "--ckpt-interval: only used with --ft ckpt"),
        (["--servers", "2", "--ft", "ckpt", "--ckpt-interval", "often"], "--ckpt-interval: ckpt interval 'often'"),
        (["--servers", "2", "--ft", "ckpt"], "needs mtbf_seconds"),
    ],
)
def test_bad_fault_tolerance_flags_exit_2_with_one_line(flags: list, message: str) -> None:
    proc = _cli(*flags)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--servers", "2", "--code", "4"], "expected K,R"),
        (["--servers", "2", "--mtbf", "0"], "expected a positive finite number"),
        (["--servers", "2", "--ft", "bogus"], "invalid choice"),
    ],
)
def test_argparse_rejects_malformed_values(flags: list, message: str) -> None:
    proc = _cli(*flags)
    assert proc.returncode == 2 and message in proc.stderr


def test_strategies_are_named_and_configs_typed() -> None:
    import xdl_ec
    from xdl_ec.ft.configs import EcConfig
    from xdl_ec.ft.factory import make_strategy

    with pytest.raises(ValueError, match="ft: must be one of 'none', 'ckpt', 'cpr', 'ec'"):
        xdl_ec.Cluster(servers=2, ft="raid")
    with pytest.raises(TypeError, match="EcConfig"):
        make_strategy("ec")
    assert make_strategy(None).name == "none"
    assert make_strategy(EcConfig(code=(2, 1))).k == 2


def test_cli_without_fault_tolerance_exits_1_naming_the_lost_server() -> None:
    proc = _cli(
        "--synthetic-rows",
        "2000",
        "--steps",
        "6",
        "--batch-size",
        "64",
        "--servers",
        "3",
        "--fail-at",
        "3:2",
        "--no-progress",
    )
    assert proc.returncode == 1, proc.stderr
    assert "error: server 2 was lost" in proc.stderr and "training stopped" in proc.stderr
    assert "Traceback" not in proc.stderr
