"""The pipelined one-process step (#37): the report's ``stages`` (in one process and with servers) and the same
model as the serial step (``XDL_EC_SERIAL_STEP=1``)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402
from xdl_ec.job.local_tables import LocalTables  # noqa: E402
from xdl_ec.job.pipelined_tables import PipelinedTables  # noqa: E402
from xdl_ec.ps.step_stages import STAGE_KEYS  # noqa: E402
from xdl_ec.tf.determinism import SERIAL_STEP_ENV  # noqa: E402

example = load_example("user_item_tags")
LOG = example.ClickLog(batch_size=64, batches=10, eval_batches=1)


def fit(cluster: "xdl_ec.Cluster | None" = None) -> dict:
    return example.make_job(LOG).fit(cluster=cluster, deterministic=True, seed=3)


def check_stages(report: dict) -> None:
    stages = report["stages"]
    assert set(stages) == set(STAGE_KEYS)
    assert all(v >= 0 for v in stages.values()), stages
    # each stage ran inside the fit's wall time; TF and the input did run
    for key in ("pull_s", "tf_s", "push_s", "wait_s"):
        assert stages[key] <= report["train_seconds"] * 1.05 + 0.05, (key, stages, report["train_seconds"])
    assert stages["tf_s"] > 0 and stages["input_s"] > 0 and stages["cores_busy"] > 0


def test_a_one_process_run_reports_its_stages_and_trains_the_serial_steps_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipelined = fit()
    check_stages(pipelined)
    monkeypatch.setenv(SERIAL_STEP_ENV, "1")
    serial = fit()
    check_stages(serial)
    assert pipelined["model_digest"] == serial["model_digest"]
    assert pipelined["auc"] == serial["auc"]


def test_the_serial_step_env_selects_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    from xdl_ec.job.local_run import LocalRun
    from xdl_ec.ps.worker import RunSettings

    for value, kind in (("1", LocalTables), ("0", PipelinedTables)):
        monkeypatch.setenv(SERIAL_STEP_ENV, value)
        run = LocalRun(example.make_job(LOG).spec, RunSettings(seed=3, deterministic=True))
        try:
            assert type(run.tables) is kind
        finally:
            run.close()
            run.tables.close()


def test_a_run_on_servers_reports_its_stages() -> None:
    report = fit(xdl_ec.Cluster(servers=2))
    check_stages(report)
