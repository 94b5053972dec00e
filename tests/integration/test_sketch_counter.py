"""The sketch counter (Admit(counter="sketch")) in real runs of the built-in job: its cells live in reserved slot
records of each shard, so under ``--ft ec`` (r = 1 and 2) a killed server is rebuilt to the failure-free
model_digest, ckpt and cpr roll it back exactly, and a save resumes at the uninterrupted digest on the saved server
count (each server its own cells) and runs on another (each server the sum of the saved cells)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.ft_runs import make_trainer, ray_ec_kill_run, small_config  # noqa: E402
from xdl_ec.builtin.criteo_job import criteo_job  # noqa: E402
from xdl_ec.cli import main  # noqa: E402
from xdl_ec.ft.ckpt_strategy import Checkpointing  # noqa: E402
from xdl_ec.ft.cpr_strategy import PartialRecovery  # noqa: E402
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ps import ClusterConfig  # noqa: E402

# the built-in job halves the sketch at its eviction cadence: every 2 steps here, so kills land around halvings
SKETCH: Dict[str, Any] = dict(admit_min_count=2, admit_counter="sketch", evict_ttl_steps=3, evict_every_steps=2)
STEPS = 8


def fit(strategy: Any, kills: List[Kill], servers: int = 3) -> Dict[str, Any]:
    trainer = make_trainer(
        small_config(steps=STEPS, **SKETCH),
        ClusterConfig(servers=servers, workers=1),
        strategy=strategy,
        failures=FailureSchedule(kills),
    )
    try:
        report = trainer.fit()
        report["model_digest"] = trainer.digest()
        if isinstance(strategy, ErasureCoded):  # stripes whose parity disagrees with the servers' records
            report["scrub"] = strategy.verify()
        return report
    finally:
        trainer.close()


def test_a_sketch_run_counts_without_pending_records(failure_free: Any) -> None:
    sketch = failure_free(3, 1, steps=STEPS, **SKETCH)
    (entry,) = sketch["tables"].values()
    assert set(entry) == {"rows", "admitted", "not_admitted_lookups", "evicted", "bytes"}
    assert entry["admitted"] > 0 and entry["not_admitted_lookups"] > 0
    exact = failure_free(3, 1, steps=STEPS, **dict(SKETCH, admit_counter="exact"))
    assert sketch["model_digest"] != exact["model_digest"]  # the halving admits fewer ids than exact counts do


@pytest.mark.parametrize(
    "servers, r, kills",
    [
        (3, 1, [Kill(3, "server", 1)]),  # before the halving of step 4
        (3, 1, [Kill(4, "server", 0)]),  # at a halving step
        (4, 2, [Kill(5, "server", 0), Kill(5, "server", 3)]),
    ],
)
def test_ec_rebuilds_the_sketch_exactly(failure_free: Any, servers: int, r: int, kills: List[Kill]) -> None:
    strategy = ErasureCoded(servers - r, r)
    report = fit(strategy, kills, servers)
    assert sorted(f["index"] for f in report["failures"]) == sorted(k.index for k in kills)
    assert report["scrub"] == []
    assert report["model_digest"] == failure_free(servers, 1, steps=STEPS, **SKETCH)["model_digest"]


# slow (not in CI's 20 minutes): the local backend's test of the same rebuild runs in CI, and Ray's transport
# under a kill is test_ft_ec's and test_memory_budget_ray's
@pytest.mark.slow
@pytest.mark.ray
def test_ec_on_ray_rebuilds_the_sketch_exactly(failure_free: Any) -> None:
    pytest.importorskip("ray")
    report, digest, scrub = ray_ec_kill_run(small_config(steps=STEPS, **SKETCH))
    assert [f["index"] for f in report["failures"]] == [1] and scrub == []
    assert digest == failure_free(3, 1, steps=STEPS, **SKETCH)["model_digest"]


def test_ckpt_and_cpr_roll_the_sketch_back_exactly(tmp_path: Path, failure_free: Any) -> None:
    expected = failure_free(3, 1, steps=STEPS, **SKETCH)["model_digest"]
    ckpt = fit(Checkpointing("3", str(tmp_path / "ckpt")), [Kill(5, "server", 1)])
    assert [f["index"] for f in ckpt["failures"]] == [1] and ckpt["model_digest"] == expected
    cpr = fit(PartialRecovery(interval_steps=1, full_every=1, directory=str(tmp_path / "cpr")), [Kill(5, "server", 2)])
    assert [f["index"] for f in cpr["failures"]] == [2] and cpr["model_digest"] == expected


def test_a_save_resumes_the_sketch(tmp_path: Path) -> None:
    config = small_config(steps=12, seed=1, **dict(SKETCH, evict_every_steps=4))  # cells counted since step 8
    job = criteo_job(config)

    def run(cluster: Any, **kwargs: Any) -> Dict[str, Any]:
        return job.fit(cluster=cluster, deterministic=True, seed=config.seed, **kwargs)

    three = xdl_ec.Cluster(servers=3)
    full = run(three)
    saves = tmp_path / "saves"
    run(three, save_dir=saves, save_every="5")  # saves after 5, 10 and at the end (12)
    newest = sorted(p for p in saves.iterdir() if p.name.startswith("ckpt-"))[-1]
    shutil.rmtree(newest)  # as if the run had died after step 10
    same = run(three, resume=saves)
    assert same["resumed_from"]["step"] == 10 and same["model_digest"] == full["model_digest"]
    ec = run(xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), fail_at=["11:1"]), resume=saves)
    assert ec["model_digest"] == full["model_digest"]  # the resumed cells reached parity: the rebuild is exact
    for other in (xdl_ec.Cluster(servers=2), None):  # the summed cells: an over-estimate, the run goes on
        resumed = run(other, resume=saves)
        assert resumed["resumed_from"]["step"] == 10 and resumed["steps"] == 12
        assert next(iter(resumed["tables"].values()))["rows"] > 0


def test_the_cli_flag_picks_the_sketch(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    flags = ["train", "--synthetic", "--synthetic-rows", "2000", "--steps", "4", "--batch-size", "64", "--no-progress"]
    flags += ["--admit-min-count", "2", "--admit-counter", "sketch", "--report", str(tmp_path / "report.json")]
    assert main(flags) == 0
    (entry,) = json.loads((tmp_path / "report.json").read_text())["tables"].values()
    assert entry["admitted"] > 0 and entry["not_admitted_lookups"] > 0
    with pytest.raises(SystemExit):  # argparse names the choices
        main([*flags[:-4], "--admit-counter", "bloom"])
    assert "invalid choice: 'bloom'" in capsys.readouterr().err
