"""DriverReattach: a fit with ``run_dir`` on Ray decides whether its driver reattaches to a dead driver's run or
starts again (from the backstop when there is one), and reports which (docs/design/reattach.md).

The same command run again after its driver died finds the run's roles through the run dir
(:class:`~xdl_ec.ps.reattachable_run.ReattachableRun`) and continues at the step it agrees on with them: nothing
re-trained. When the grace has passed (the roles are gone), or the roles cannot continue the run exactly (the
worker died, more servers than the code covers), the fit resumes from the newest save in its ``save_dir`` (a
backstop's) and reports how many steps that re-trains.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Dict, Optional, Union

from xdl_ec.job.cluster import Cluster
from xdl_ec.keep.saved_run import SavedRun
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.ps.cluster_config import ClusterConfig
from xdl_ec.ps.reattachable_run import ReattachableRun
from xdl_ec.ps.run_keeper import RunRecord

PathLike = Union[str, "os.PathLike[str]"]
REATTACHING_STRATEGIES = ("none", "ec")

log = logging.getLogger(__name__)


class DriverReattach:
    """The reattach side of a fit of ``spec`` on ``cluster`` with ``run_dir`` and a grace of ``grace`` seconds:
    connects to the run's Ray head (started when none is up); :attr:`record` is the run to reattach to, if any."""

    def __init__(
        self, run_dir: PathLike, grace: float, cluster: Cluster, spec: JobSpec, seed: int, deterministic: bool
    ) -> None:
        if cluster.backend != "ray":
            raise ValueError("run_dir: roles outlive the driver only on Ray; give backend='ray' (--backend ray)")
        if cluster.address is not None:
            raise ValueError(
                "run_dir: a reattachable run starts a Ray head of its own (its grace ends it); drop the Ray address"
            )
        if cluster.workers != 1 or cluster.mode != "sync":
            raise ValueError(
                "run_dir: a driver reattaches to a run of one worker in sync mode (its worker keeps the dense "
                f"state); got workers={cluster.workers}, mode={cluster.mode!r}"
            )
        if cluster.ft not in REATTACHING_STRATEGIES:
            raise ValueError(f"run_dir: a driver reattaches with ft 'ec' or 'none', got ft={cluster.ft!r}")
        self.grace = float(grace)
        self.shape: Dict[str, Any] = {
            "servers": cluster.servers,
            "workers": cluster.workers,
            "mode": cluster.mode,
            "ft": cluster.ft,
            "code": list(cluster.ec_code) if cluster.ft == "ec" else None,
            "tables": [t.name for t in spec.tables],
            "seed": seed,
            "deterministic": deterministic,
        }
        self.run = ReattachableRun(run_dir, grace)
        try:
            tolerated = cluster.ec_code[1] if cluster.ft == "ec" else 0
            self.record: Optional[RunRecord] = self.run.usable_record(self.shape, tolerated)
        except BaseException:
            self.run.end()
            raise

    def resume_from(self, resume: Optional[PathLike], save_dir: Optional[PathLike]) -> Optional[PathLike]:
        """What the fit resumes from: ``resume`` when given; ``save_dir`` when a dead driver's run could not be
        reattached and a save is there (the backstop); else None (a fresh start)."""
        if resume is not None or self.record is not None or self.run.previous is None or save_dir is None:
            return resume
        try:
            SavedRun.open(save_dir)
        except (FileNotFoundError, ValueError):
            return None
        return save_dir

    def cluster_config(self, config: ClusterConfig) -> ClusterConfig:
        """``config`` on the run's Ray head, with roles that outlive the driver."""
        return dataclasses.replace(config, address=self.run.address, detached=True)

    def started(self, trainer: Any) -> None:
        """The fit's trainer is ready (resumed or reattached): its record is kept from now on, step by step."""
        self.run.keep(trainer, self.shape)
        trainer.hooks.append(self.run)
        if trainer.reattached_step is not None:  # said as it happens (an orchestrator's log, bench/soak.py)
            step = trainer.reattached_step
            log.warning("--run-dir %s: reattached at step %d, nothing re-trained", self.run.directory, step)

    def report(self, trainer: Any, saved: Optional[SavedRun]) -> Dict[str, Any]:
        """The report's ``reattach``: whether this driver reattached, the steps re-trained (0 when it did; else the
        dead driver's last step minus the step resumed from), the grace, and why a dead run was not reattached."""
        reattached = trainer.reattached_step is not None
        retrained = 0
        if not reattached and self.run.previous is not None:
            retrained = max(int(self.run.previous.get("step", 0)) - (0 if saved is None else saved.step), 0)
        entry: Dict[str, Any] = {"reattached": reattached, "steps_retrained": retrained, "grace_s": self.grace}
        if reattached:
            entry["step"] = trainer.reattached_step
            if self.run.redone:  # the dead driver was recovering them: their recovery was redone
                entry["recovery_redone"] = list(self.run.redone)
        if self.run.previous is not None and not reattached:
            entry["dead_run_step"] = int(self.run.previous.get("step", 0))
        if self.run.refused is not None:
            entry["refused"] = self.run.refused
        return entry

    def end(self) -> None:
        self.run.end()
