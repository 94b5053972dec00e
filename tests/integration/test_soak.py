"""The soak (issue #51): SIGKILLs on servers, workers and the driver of an ec run with a backstop, restarts of the
driver (on Ray the same command, which reattaches; in one process with --resume), then the failure-free twin: the
same model, nothing hung, nothing left running."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xdl_ec.benchmark.soak import Soak, SoakPlan


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_a_three_minute_soak_kills_every_role_and_ends_at_the_twins_model(tmp_path, backend):
    # a kill every 4 s on average: over ~3 minutes each role is hit several times (seed 2 hits all three)
    result = Soak(SoakPlan(minutes=1.0, backend=backend, seed=2, kill_every=4.0, leak_grace=90.0), str(tmp_path)).run()
    kills = result["kills"]
    assert isinstance(kills, dict)
    assert kills["server"] > 0 and kills["worker"] > 0 and kills["driver"] > 0, result
    assert result["digest_equal"] is True, result
    assert result["lost_samples"] == 0, result
    assert result["hung"] == 0, result
    assert result["leaked_processes"] == 0, result
    if backend == "ray":  # a driver killed after its first step left roles to reattach to
        assert result["reattached"] > 0, result
    else:
        assert result["reattached"] == 0, result


def test_a_soak_plan_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="minutes"):
        SoakPlan(minutes=0)
    with pytest.raises(ValueError, match="backend"):
        SoakPlan(minutes=1, backend="k8s")
    with pytest.raises(ValueError, match="kill_every"):
        SoakPlan(minutes=1, kill_every=-1)


def test_the_soak_sizes_its_run_from_the_calibrations_steady_rate(tmp_path, monkeypatch):
    """The calibration's steady samples/s (its report's), not its wall time to exit: that counted the digest, the
    report and Ray's shutdown, and an "8-minute" soak's twin trained for 51 s."""
    from xdl_ec.benchmark import soak

    def calibrated(self, command, kill_after):
        report = Path(command[command.index("--report") + 1])
        report.write_text(json.dumps({"steady_samples_per_sec": 2560.0, "samples_per_sec": 1000.0}))
        return soak._Segment(started=0.0, first_step_at=1.0, returncode=0)

    monkeypatch.setattr(soak.Soak, "_segment", calibrated)
    plan = SoakPlan(minutes=2.0, batch_size=256)
    steps, _ = Soak(plan, str(tmp_path), log=lambda line: None)._steps_for(plan.minutes)
    assert steps == 10 * 120
