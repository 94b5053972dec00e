"""``xdl-ec bench``'s failure schedule without Ray: a kill due while ``ec`` still rebuilds an earlier failure first
lets that rebuild complete, so every strategy gets its kills at the same steps and none lands inside a rebuild
(which r = 1 could not decode); ``--rebuild-share`` reaches the ec rows and bad values are usage errors."""

from __future__ import annotations

import os
import types
from typing import Any, List

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from support.ft_runs import small_config  # noqa: E402
from xdl_ec.benchmark import BenchConfig  # noqa: E402
from xdl_ec.benchmark.after_rebuild_schedule import AfterRebuildSchedule  # noqa: E402
from xdl_ec.benchmark.runner import Variant, Workload, run_variant  # noqa: E402
from xdl_ec.ps import ClusterConfig  # noqa: E402


class FakeRebuild:
    """A strategy whose rebuild runs until finish_rebuild() is called."""

    def __init__(self, rebuilding: bool) -> None:
        self.rebuilding = rebuilding
        self.finished: List[bool] = []

    def finish_rebuild(self) -> None:
        self.finished.append(self.rebuilding)
        self.rebuilding = False


def test_a_kill_due_during_a_rebuild_waits_for_it_and_keeps_its_step() -> None:
    strategy = FakeRebuild(rebuilding=True)
    schedule = AfterRebuildSchedule([(3, 1, 0.5), (5, 2, 0.9)], seed=0, strategy=strategy)
    assert schedule.due(2, 0.0) == [] and strategy.finished == []  # nothing due: the rebuild goes on
    [kill] = schedule.due(3, 0.0)
    assert (kill.step, kill.role, kill.index) == (3, "server", 1)
    assert strategy.finished == [True] and not strategy.rebuilding and schedule.waited == [3]
    [kill] = schedule.due(5, 0.0)  # no rebuild running: the kill lands without waiting
    assert kill.index == 2 and strategy.finished == [True] and schedule.waited == [3]


def test_strategies_without_a_background_rebuild_never_wait() -> None:
    schedule = AfterRebuildSchedule([(2, 0, 0.1)], seed=0, strategy=types.SimpleNamespace())
    assert [k.index for k in schedule.due(2, 0.0)] == [0] and schedule.waited == []


def test_second_kill_inside_an_r1_rebuild_is_deferred_past_the_rebuild_and_stays_exact() -> None:
    """ec 2+1 with a rebuild slowed to 0.1% of wall time (paced at step boundaries: the default background rebuild
    runs flat out when one more loss is fatal) is still rebuilding server 1 when server 2's kill is due two steps
    later: scheduled as is, two servers would be missing at once (unrecoverable for r = 1); the bench's schedule
    completes the rebuild first, both kills land at their steps and the model is the failure-free one."""
    train, cluster = Workload.built_in(small_config(steps=8)), ClusterConfig(servers=3, workers=1)
    reference = run_variant(Variant("none", "none"), train, cluster, [], None, 0)
    row = run_variant(
        Variant("ec-2+1", "ec", {"code": "2,1", "rebuild": "boundary"}),
        train,
        cluster,
        [(3, 1, 0.0), (5, 2, 0.0)],
        None,
        0,
        rebuild_share=0.001,
    )
    assert row["status"] == "ok", row.get("error")
    report = row["report"]
    assert [(k["step"], k["index"]) for k in report["injected"]] == [(3, 1), (5, 2)]
    assert [(f["step"], f["index"]) for f in report["failures"]] == [(3, 1), (5, 2)]
    assert row["kills_after_rebuild"] == [5]
    assert report["model_digest"] == reference["report"]["model_digest"]


@pytest.mark.parametrize("share", [0.0, 1.5, -1.0])
def test_bad_bench_rebuild_share(share: Any, capsys: pytest.CaptureFixture) -> None:
    from xdl_ec.cli import main

    with pytest.raises(ValueError, match=r"rebuild_share: must be a finite number in \(0.0, 1.0\]"):
        BenchConfig(rebuild_share=share).validate()
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--quick", "--rebuild-share", str(share)])
    assert exited.value.code == 2
    assert "--rebuild-share: expected a number in (0, 1]" in capsys.readouterr().err
