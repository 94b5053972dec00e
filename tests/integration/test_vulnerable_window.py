"""``--rebuild-within``: the window in which one more server loss is fatal has a bound in seconds. A rebuild made
slow through its per-stripe seam, whose deadline has passed, holds training's steps until full redundancy (sync,
async, boundary-paced), the model stays the failure-free one, and every failure reports its window
(``vulnerable_seconds``, ``vulnerable_within_bound``, ``training_held_seconds``). A far bound holds nothing."""

from __future__ import annotations

import time
from typing import Any, Dict, List

import pytest

from support.ft_runs import make_trainer, small_config
from support.ft_runs import run as run_trainer
from xdl_ec.ft.ec_strategy import DEFAULT_REBUILD_WITHIN, ErasureCoded
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill
from xdl_ec.ps import ClusterConfig

STEPS = 14
KILL_STEP = 3
STRIPE_SECONDS = 0.02  # the seam's delay per stripe: the rebuild outlasts several steps unless training waits
BOUND_PASSED = 1e-6  # seconds: the deadline has passed before the first boundary after the loss
FAR = 1e6  # seconds: a bound no rebuild comes near


def _slow_rebuild(**options: Any) -> "tuple[ErasureCoded, List[int]]":
    """A (2, 1) strategy whose every stripe takes STRIPE_SECONDS longer; the list gets the step each stripe ended at."""
    steps_of_stripes: List[int] = []

    def slow_stripe(stripe: int) -> None:
        time.sleep(STRIPE_SECONDS)
        steps_of_stripes.append(strategy.view.step)

    strategy = ErasureCoded(2, 1, on_rebuild_stripe=slow_stripe, **options)
    return strategy, steps_of_stripes


def _run(strategy: ErasureCoded, mode: str = "sync", kills: Any = None) -> Dict[str, Any]:
    kills = [Kill(KILL_STEP, "server", 1)] if kills is None else kills
    trainer = make_trainer(
        small_config(steps=STEPS),
        ClusterConfig(servers=3, workers=1, mode=mode),
        strategy=strategy,
        failures=FailureSchedule(kills),
    )
    return {**run_trainer(trainer), **strategy.report()}


def _held_until_whole(steps_of_stripes: List[int]) -> None:
    """Every stripe was rebuilt before training went past the first boundary after the loss: the steps waited."""
    assert len(steps_of_stripes) >= 3, "the test needs a rebuild of several stripes"
    assert max(steps_of_stripes) <= KILL_STEP, steps_of_stripes


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_rebuild_past_its_deadline_holds_the_steps_until_full_redundancy(failure_free: Any, mode: str) -> None:
    strategy, steps_of_stripes = _slow_rebuild(rebuild_within=BOUND_PASSED)
    report = _run(strategy, mode)
    _held_until_whole(steps_of_stripes)
    (failure,) = report["failures"]
    assert failure["training_held_seconds"] > 0.0
    assert failure["vulnerable_seconds"] > BOUND_PASSED and failure["vulnerable_within_bound"] is False
    assert report["rebuild_within"] == BOUND_PASSED
    if mode == "sync":
        assert report["model_digest"] == failure_free(3, 1, steps=STEPS)["model_digest"]
    else:  # async with one worker is deterministic: its failure-free twin
        reference = run_trainer(make_trainer(small_config(steps=STEPS), ClusterConfig(servers=3, mode="async")))
        assert report["model_digest"] == reference["model_digest"]


def test_a_boundary_paced_rebuild_past_its_deadline_rebuilds_the_rest_at_one_boundary(failure_free: Any) -> None:
    strategy, steps_of_stripes = _slow_rebuild(rebuild="boundary", rebuild_share=0.05, rebuild_within=BOUND_PASSED)
    report = _run(strategy)
    assert len(steps_of_stripes) >= 3 and len(set(steps_of_stripes)) == 1, steps_of_stripes
    assert report["failures"][0]["vulnerable_within_bound"] is False
    assert report["model_digest"] == failure_free(3, 1, steps=STEPS)["model_digest"]


def test_a_far_bound_holds_nothing_and_reports_the_window(failure_free: Any) -> None:
    strategy, steps_of_stripes = _slow_rebuild(rebuild_within=FAR)
    report = _run(strategy)
    (failure,) = report["failures"]
    assert failure["training_held_seconds"] == 0.0
    # r = 1: the whole time to full redundancy was a window in which one more loss was fatal
    assert failure["vulnerable_seconds"] == pytest.approx(failure["seconds_to_full_redundancy"])
    assert failure["vulnerable_within_bound"] is True
    assert 0.0 < failure["recovery_pause_seconds"] < failure["rebuild_seconds"]  # the pause, then the stripes
    assert report["model_digest"] == failure_free(3, 1, steps=STEPS)["model_digest"]


def test_with_r2_a_single_loss_opens_no_window() -> None:
    strategy = ErasureCoded(2, 2, rebuild_within=BOUND_PASSED)
    trainer = make_trainer(
        small_config(steps=STEPS),
        ClusterConfig(servers=4, workers=1),
        strategy=strategy,
        failures=FailureSchedule([Kill(KILL_STEP, "server", 1)]),
    )
    report = {**run_trainer(trainer), **strategy.report()}
    (failure,) = report["failures"]
    # one more loss would not have been fatal: no window, nothing held though the bound is tiny
    assert failure["vulnerable_seconds"] == 0.0 and failure["vulnerable_within_bound"] is None
    assert failure["training_held_seconds"] == 0.0
    assert report["rebuild_within"] == BOUND_PASSED


def test_the_default_bound() -> None:
    assert ErasureCoded(2, 1).deadline.within == DEFAULT_REBUILD_WITHIN
    assert ErasureCoded(2, 1, rebuild_within=3).successor().deadline.within == 3.0


def test_rebuild_within_flag_and_keyword(capsys: pytest.CaptureFixture) -> None:
    from xdl_ec.cli import main
    from xdl_ec.job.cluster import Cluster

    flags = "train --synthetic --synthetic-rows 3000 --steps 4 --batch-size 64 --emb-dim 8 --no-progress".split()
    flags += ["--servers", "3"]
    for bad in ("0", "-1", "inf", "x"):
        with pytest.raises(SystemExit) as exited:
            main([*flags, "--ft", "ec", "--code", "2,1", f"--rebuild-within={bad}"])
        assert exited.value.code == 2
        assert "--rebuild-within: expected a positive finite number" in capsys.readouterr().err
    assert main([*flags, "--ft", "ckpt", "--rebuild-within", "5"]) == 2
    assert "--rebuild-within: only used with --ft ec" in capsys.readouterr().err
    assert main([*flags, "--ft", "ec", "--code", "2,1", "--rebuild-within", "5", "--fail-at", "2:0"]) == 0
    assert "server 0 lost at step 2" in capsys.readouterr().out
    assert Cluster(servers=3, ft="ec", code=(2, 1), rebuild_within=2.5).strategy_config(0).rebuild_within == 2.5
    with pytest.raises(ValueError, match="rebuild_within: must be a"):
        Cluster(servers=3, ft="ec", code=(2, 1), rebuild_within=0).strategy_config(0)
    with pytest.raises(ValueError, match="rebuild_within: only used with ft='ec'"):
        Cluster(servers=3, ft="ckpt", rebuild_within=5)
