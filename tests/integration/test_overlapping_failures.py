"""Overlapping server failures under ``--ft ec`` (two at once, a replacement lost while it is rebuilt,
losses at adjacent steps, r = 1, 2, 3) end either at the failure-free model_digest or with a clear
"unrecoverable", never hang; a lost server's remnant delivers nothing after its holders rolled it back; SIGINT
stops a run mid-recovery within seconds. The stress loop (bench/stress_ft_ec.py, under load with a watchdog) runs
the same scenarios many more times; here a fixed, seeded set, and more under ``-m slow``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

import pytest

from support.interrupt import interrupt_when_recovering
from xdl_ec.benchmark.failure_scenarios import (
    SCENARIOS,
    Scenario,
    config,
    random_scenario,
    reference_digest,
    run_scenario,
)
from xdl_ec.ft.ec_recovery import EcRecovery

CI_RANDOM_SEEDS = range(4)
SLOW_RANDOM_SEEDS = range(100, 160)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_named_scenario_ends_exact_or_unrecoverable(name: str) -> None:
    scenario = SCENARIOS[name]
    outcome = run_scenario(scenario)
    expected = {"exact": ("exact",), "unrecoverable": ("unrecoverable",), "either": ("exact", "unrecoverable")}
    assert outcome.kind in expected[scenario.expect], outcome


@pytest.mark.parametrize("seed", CI_RANDOM_SEEDS)
def test_random_overlapping_schedule_ends_exact_or_unrecoverable(seed: int) -> None:
    outcome = run_scenario(random_scenario(seed))
    assert outcome.kind in ("exact", "unrecoverable"), outcome


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_RANDOM_SEEDS)
def test_many_random_overlapping_schedules(seed: int) -> None:
    outcome = run_scenario(random_scenario(seed))
    assert outcome.kind in ("exact", "unrecoverable"), outcome


@pytest.mark.slow
@pytest.mark.parametrize("repeat", range(20))
def test_issue19_scenario_repeated(repeat: int) -> None:
    assert run_scenario(SCENARIOS["issue19"]).kind == "exact"


def test_no_remnant_batch_lands_after_the_rollback(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cause of a recovery that once hung: a replacement lost mid-rebuild while another loss restarts the
    recovery still had a
    range recorded, which its forwarder delivered after the survivors rolled its stream back (the holders then
    disagreed on its seq for good and the key-index decode waited for them). I5: when the holders roll a lost
    server back, nothing of it runs any more; and 60 ms later (three times the forwarder's routing delay) none of
    them has moved past W_p."""
    seen: List[Dict[Tuple[int, int], int]] = []
    alive_at_rollback: List[int] = []
    roll_back, settle = EcRecovery.roll_back, EcRecovery.settle_rollback

    def checked_roll_back(self: EcRecovery, lost: Any, survivors: Any, progress: Any) -> Any:
        alive_at_rollback.extend(p for p in lost if self.view.server_alive(p, 1.0))
        return roll_back(self, lost, survivors, progress)

    def checked_settle(self: EcRecovery, pairs: Any, seq: Dict[int, int]) -> None:
        time.sleep(0.06)
        applied = self.call_many([(h, "applied", p) for p, h in pairs])
        seen.append({(p, h): a - seq[p] for (p, h), a in zip(pairs, applied)})
        settle(self, pairs, seq)

    monkeypatch.setattr(EcRecovery, "roll_back", checked_roll_back)
    monkeypatch.setattr(EcRecovery, "settle_rollback", checked_settle)
    # 2,2 on 5 servers: 0 and 1 lost at once, the replacement of 0 lost while it is rebuilt (r = 2, recoverable)
    scenario = Scenario("remnant", 5, 2, 2, 16, ((5, 0), (5, 1), (6, 0)), rebuild_share=0.01)
    outcome = run_scenario(scenario)
    assert outcome.kind == "exact", outcome
    assert len(seen) >= 2, "the test needs a recovery restarted over an unfinished one"
    assert alive_at_rollback == [], f"servers {alive_at_rollback} still ran when their holders rolled them back"
    assert all(d == 0 for s in seen for d in s.values()), seen


def test_sigint_mid_recovery_stops_the_run_within_seconds(tmp_path: Any) -> None:
    """``xdl-ec train`` interrupted right after it starts recovering two lost servers (a large table, so the
    rebuild is long): it exits with status 130 within a few seconds, leaving no process behind."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "xdl_ec",
        "train",
        "--synthetic",
        "--synthetic-rows",
        "60000",
        "--batch-size",
        "512",
        "--steps",
        "400",
        "--emb-dim",
        "32",
        "--no-progress",
        "--servers",
        "5",
        "--ft",
        "ec",
        "--code",
        "3,2",
        "--rebuild-share",
        "0.01",
        "--fail-at",
        "40:0",
        "--fail-at",
        "40:3",
    ]
    status, seconds, stderr, session = interrupt_when_recovering(cmd, env)
    assert status == 130, stderr
    assert seconds < 5.0, f"SIGINT took {seconds:.1f} s to stop the run"
    assert "interrupted" in stderr
    leftover = subprocess.run(["pgrep", "-s", str(session)], capture_output=True, text=True).stdout.split()
    assert leftover == [], f"processes left in the run's session: {leftover}"


def test_default_rebuild_runs_beside_training_and_reports_time_to_full_redundancy() -> None:
    """The default rebuild runs in its own thread while training goes on (no step boundary rebuilds a stripe),
    ends exact, and each failure reports the seconds from the kill to full redundancy (detection included). Its
    governor measured training's normal speed on the steps before the kill and stopped governing once the rebuild
    was complete."""
    from support.ft_runs import make_trainer
    from support.ft_runs import run as run_trainer
    from xdl_ec.ft.ec_strategy import ErasureCoded
    from xdl_ec.ft.failure_schedule import FailureSchedule, Kill
    from xdl_ec.ps import ClusterConfig

    scenario = Scenario("one-loss", 4, 2, 2, 24, ((10, 1),))
    strategy = ErasureCoded(2, 2)
    trainer = make_trainer(
        config(scenario.steps),
        ClusterConfig(servers=4),
        strategy=strategy,
        failures=FailureSchedule([Kill(10, "server", 1)]),
    )
    report = run_trainer(trainer)
    assert report["rebuild"] == "background" and report["model_digest"] == reference_digest(scenario)
    assert strategy.background is not None and strategy.background.stripes > 0
    assert strategy.boundaries_rebuilding == 0
    (failure,) = report["failures"]
    assert failure["seconds_to_full_redundancy"] >= failure["detect_seconds"] > 0
    assert failure["seconds_to_full_redundancy"] >= failure["rebuild_seconds"] > 0
    governor = strategy.governor
    assert governor is not None and governor.normal is not None and governor.normal > 0
    assert not governor.governing and strategy.background.duty >= 0.05


def test_overlap_bench_counts_the_runs_each_strategy_survives(tmp_path: Any) -> None:
    """``xdl-ec bench --overlap``: kills as close as one step apart, not waiting for rebuilds; every row says how
    many of its runs trained to the end and how many of those equal the failure-free model."""
    import json

    from xdl_ec.benchmark import BenchConfig
    from xdl_ec.benchmark.overlap import overlap_table, run_overlap

    results = run_overlap(BenchConfig(out=str(tmp_path), progress=False, variants=["ec-4+2"]), 1, log=lambda _: None)
    assert [row["label"] for row in results["rows"]] == ["ec-4+2", "ec-4+2 (boundary)"]
    for row in results["rows"]:
        assert row["runs"] == 1 and 0 <= row["exact"] <= row["survived"] <= 1
        assert all(o["status"] in ("survived", "stopped") for o in row["outcomes"])
    assert json.loads((tmp_path / "overlap.json").read_text())["rows"][0]["label"] == "ec-4+2"
    assert "| ec-4+2 |" in overlap_table(results)
