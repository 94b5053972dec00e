"""Small deterministic parameter-server runs of the built-in job shared by the fault-tolerance tests, and their
failure-free references (each configuration trained once per test session)."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.ft.failure_injector import FailureInjector  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402
from xdl_ec.sparse.memory_budget import MemoryBudget  # noqa: E402


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


def ray_ec_kill_run(
    config: TrainConfig, memory: Optional[MemoryBudget] = None
) -> Tuple[Dict[str, Any], str, List[Any]]:
    """``config`` on 3 Ray servers (each with ``memory``, None: no budget) under ec (2, 1) with server 1 killed
    before step 4 (Ray started here unless it runs): the report (with the servers' disk tier at the end as "tier"),
    the model digest and the scrub's inconsistent stripes."""
    import ray

    from xdl_ec.ft.ec_strategy import ErasureCoded
    from xdl_ec.ps.backend import ray_runtime_env

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=ray_runtime_env())
    try:
        strategy = ErasureCoded(2, 1)
        trainer = make_trainer(
            config,
            ClusterConfig(servers=3, workers=1, backend="ray", memory=memory),
            strategy=strategy,
            failures=FailureSchedule([Kill(4, "server", 1)]),
        )
        try:
            return {**trainer.fit(), "tier": trainer.tier_report()}, trainer.digest(), strategy.verify()
        finally:
            trainer.close()
    finally:
        if started:
            ray.shutdown()
