"""Small deterministic parameter-server runs of the built-in job shared by the fault-tolerance tests, and their
failure-free references (each configuration trained once per test session)."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ft.failure_injector import FailureInjector  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402


def small_config(**overrides: Any) -> TrainConfig:
    """Seconds-long synthetic runs: 64-sample batches, dim 8, Adam (optimizer state in every record)."""
    base = dict(
        synthetic=True,
        synthetic_rows=3000,
        batch_size=64,
        steps=10,
        deterministic=True,
        progress=False,
        seed=5,
        emb_dim=8,
        optimizer="adam",
    )
    base.update(overrides)
    return TrainConfig(**base)


def make_trainer(
    config: TrainConfig, cluster: ClusterConfig, strategy: Any = None, failures: Optional[FailureSchedule] = None
) -> PSTrainer:
    """A PSTrainer of the built-in job of ``config`` (tests that look inside the driver)."""
    injector = None if failures is None else FailureInjector(failures)
    return PSTrainer(
        criteo_job(config).spec, cluster, RunSettings(config.seed, config.deterministic), strategy, injector
    )


def run(trainer: PSTrainer) -> Dict[str, Any]:
    """fit, the hold-out metrics, the digest and the cluster's report (what ``Job.fit`` reports); closes the
    trainer."""
    try:
        report = trainer.fit()
        if trainer.job.eval_fn is not None:
            report.update(trainer.evaluate(trainer.job.eval_fn()))
        report["model_digest"] = trainer.digest()
        report.update(trainer.report())
        return report
    finally:
        trainer.close()


def reference(servers: int, workers: int, **overrides: Any) -> Dict[str, Any]:
    """The report of the failure-free run of ``small_config(**overrides)`` on ``servers`` x ``workers`` (the
    session fixture ``failure_free`` in conftest.py trains each once per test session)."""
    config = small_config(**overrides)
    return criteo_job(config).fit(
        cluster=xdl_ec.Cluster(servers=servers, workers=workers), deterministic=config.deterministic, seed=config.seed
    )
