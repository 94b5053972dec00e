"""The report's ``stages`` (#37): where a run's step time went, in one process and with servers."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402
from xdl_ec.ps.step_stages import STAGE_KEYS, stages_text  # noqa: E402

example = load_example("user_item_tags")
LOG = example.ClickLog(batch_size=64, batches=10, eval_batches=1)


def check_stages(report: dict) -> None:
    stages = report["stages"]
    assert set(stages) == set(STAGE_KEYS)
    assert all(v >= 0 for v in stages.values()), stages
    # each of the step's stages ran inside the fit's wall time; TF and the input did run
    for key in ("pull_s", "tf_s", "push_s", "wait_s"):
        assert stages[key] <= report["train_seconds"] * 1.05 + 0.05, (key, stages, report["train_seconds"])
    assert stages["tf_s"] > 0 and stages["input_s"] > 0 and stages["cores_busy"] > 0
    assert stages_text(stages).startswith("stages: input ")


def test_a_one_process_run_reports_its_stages() -> None:
    check_stages(example.make_job(LOG).fit(deterministic=True, seed=3))


def test_a_run_on_servers_reports_its_stages() -> None:
    check_stages(example.make_job(LOG).fit(cluster=xdl_ec.Cluster(servers=2), deterministic=True, seed=3))
