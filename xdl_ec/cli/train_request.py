"""TrainRequest: what ``xdl-ec train`` was asked (the job, the Cluster, the fit arguments), made from its flags by
:func:`train_request`, the one mapping of those flags; a UsageError names the flag at fault."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from xdl_ec.builtin.criteo_job import (
    TrainConfig,
    criteo_job,
    num_train_batches,
    open_training_data,
    synthetic_preload,
)
from xdl_ec.cli.config_flags import flag_names, given, values
from xdl_ec.cli.parser import UsageError
from xdl_ec.cli.run_outputs import RunOutputs
from xdl_ec.cli.saving import Saving
from xdl_ec.data.source import TrainingData
from xdl_ec.job.cluster import Cluster
from xdl_ec.job.job import Job
from xdl_ec.job.job_source import builtin_source, load_script_job
from xdl_ec.settings.flag import field_flags
from xdl_ec.sparse.cache_config import Cache
from xdl_ec.sparse.memory_budget import MemoryBudget

# Where `xdl-ec train` without --data looks for the Criteo sample, in order: $XDL_EC_CRITEO_SAMPLE, ../shared/data
# and shared/data below the working directory, and ../shared/data beside a source checkout of the package.
SAMPLE_NAME = "criteo_kaggle_train_head10k.tsv.gz"

RUN_FLAGS = field_flags(TrainConfig, ["run"])  # --steps, --seed, --deterministic: any job's run
BUILTIN_FLAGS = field_flags(TrainConfig, ["built-in"])  # the built-in job's, refused with --script
# the built-in job's table rules, which also apply to a --script job: the rules of its tables that declare none
TABLE_RULE_FLAGS = field_flags(TrainConfig, ["bounded"])
CLUSTER_FLAGS = field_flags(Cluster)
CACHE_FLAGS = [f for f in CLUSTER_FLAGS if f.config is Cache]
# the flags that need --servers, by why: where and how the job runs, and fault tolerance
# a memory budget applies to one process as well as to servers
PLACEMENT_FLAGS = [
    f for f in field_flags(Cluster, ["servers", "resize"]) if f.field not in ("servers", "memory_budget", "spill_dir")
]
MEMORY_FLAGS = [f for f in field_flags(Cluster, ["servers"]) if f.field in ("memory_budget", "spill_dir")]
FT_FLAGS = field_flags(Cluster, ["ft"])


@dataclasses.dataclass(frozen=True)
class TrainRequest:
    """What ``xdl-ec train`` was asked: the job, where it runs, and how."""

    job: Job
    cluster: Optional[Cluster]
    steps: Optional[int]
    seed: int
    deterministic: bool
    progress: bool
    config: Optional[TrainConfig] = None  # the built-in job's
    data: Optional[TrainingData] = None  # the built-in job's data (description and bad lines for the report)
    fit_options: Dict[str, Any] = dataclasses.field(default_factory=dict)  # saving, logdir and exports

    def fit_arguments(self) -> Dict[str, Any]:
        return dict(
            steps=self.steps,
            cluster=self.cluster,
            deterministic=self.deterministic,
            seed=self.seed,
            progress=self.progress,
            **self.fit_options,
        )


def find_criteo_sample() -> Optional[Path]:
    """The Criteo sample used by the no-argument demo, or None when it is not around."""
    candidates = []
    if os.environ.get("XDL_EC_CRITEO_SAMPLE"):
        candidates.append(Path(os.environ["XDL_EC_CRITEO_SAMPLE"]))
    cwd = Path.cwd()
    candidates += [
        cwd.parent / "shared" / "data" / SAMPLE_NAME,
        cwd / "shared" / "data" / SAMPLE_NAME,
        Path(__file__).resolve().parents[2].parent / "shared" / "data" / SAMPLE_NAME,
    ]
    return next((p for p in candidates if p.is_file()), None)


def train_request(args: argparse.Namespace) -> TrainRequest:
    """The job, the Cluster and the fit arguments ``args`` ask for, every flag checked (before TensorFlow is
    imported or Ray started). Reads ``args``, changes nothing."""
    outputs = RunOutputs(**values(args, field_flags(RunOutputs)))
    outputs.check()
    cluster = _cluster(args)
    saving = Saving(**values(args, field_flags(Saving)))
    lonely = given(args, field_flags(Saving, ["cadence"]))
    if saving.save_dir is None and lonely:
        raise UsageError(f"{', '.join(lonely)}: needs --save-dir DIR, where the saves go")
    saving.check(args.servers)
    run = {**{f.field: f.default for f in RUN_FLAGS}, **values(args, RUN_FLAGS)}
    fit_options = {**saving.fit_arguments(), **outputs.fit_arguments(), **_reattach_options(args, cluster)}
    if cluster is None:  # --memory-budget, --spill-dir in this process: fit's (a Cluster has them otherwise)
        memory = values(args, MEMORY_FLAGS)
        try:
            MemoryBudget.of(memory.get("memory_budget"), memory.get("spill_dir"))
        except ValueError as err:
            raise UsageError(flag_names(str(err), MEMORY_FLAGS)) from None
        fit_options.update(memory)
    if args.evict_ttl_steps is not None and args.evict_ttl_seconds is not None:
        raise UsageError(
            "--evict-ttl-steps, --evict-ttl-seconds: give one of them (a row ages by steps or by seconds of "
            "training wall time, not both)"
        )
    if args.script is not None:
        job = _script_job(args, cluster, run["steps"])
        return TrainRequest(job, cluster, progress=outputs.progress, fit_options=fit_options, **run)
    if args.stream is not None:
        return _stream_request(args, cluster, run, outputs.progress, fit_options)
    if args.stream_idle_exit is not None:
        raise UsageError("--stream-idle-exit: ends a --stream; give --stream DIR")
    data, synthetic = args.data, args.synthetic
    if data is None and not synthetic:
        sample = find_criteo_sample()
        if sample is not None:
            data = str(sample)
        else:
            synthetic = True
        print(
            f"xdl-ec train: no --data given: demo on {data or 'synthetic data (Criteo sample not found)'}",
            file=sys.stderr,
        )
    if data is not None and not Path(data).is_file():
        raise UsageError(f"--data: no such file: {data}")
    settings = _builtin_settings(args, ("data", "synthetic"))
    try:
        config = TrainConfig(data=data, synthetic=synthetic, progress=outputs.progress, **run, **settings)
        training_data = open_training_data(config)
    except (OSError, ValueError) as err:
        raise UsageError(str(err)) from None
    # the run's steps, known here (the input is bounded to the run's batches): the progress bar's total
    batches = num_train_batches(training_data, config)
    workers = 1 if cluster is None else cluster.workers
    steps = (batches if cluster is not None and cluster.mode == "async" else -(-batches // workers)) or None
    _check_kills(cluster, steps)
    job = criteo_job(config)
    job.source = builtin_source(config)
    if config.synthetic_preload:
        fit_options["preload"] = synthetic_preload(config)
    return TrainRequest(
        job, cluster, steps, run["seed"], run["deterministic"], outputs.progress, config, training_data, fit_options
    )


def _cluster(args: argparse.Namespace) -> Optional[Cluster]:
    """The Cluster of the --servers run (None without --servers, when no cluster flag may be given)."""
    if args.servers is None:
        placement = given(args, PLACEMENT_FLAGS) + (["--run-dir"] if args.run_dir is not None else [])
        if placement:
            raise UsageError(f"{', '.join(placement)}: needs --servers N (without it training runs in one process)")
        ft = given(args, FT_FLAGS)
        if ft:
            raise UsageError(f"{', '.join(ft)}: needs --servers N (fault tolerance is about parameter servers)")
        return None
    if args.ckpt_dir is not None and Path(args.ckpt_dir).exists() and not Path(args.ckpt_dir).is_dir():
        raise UsageError(f"--ckpt-dir: {args.ckpt_dir} exists and is not a directory")
    try:
        cache = None
        if args.cache_rows is not None:
            cache = Cache(**values(args, CACHE_FLAGS))
        else:
            settings = [f for f in CACHE_FLAGS if f.field != "rows"]
            if values(args, settings):
                raise UsageError(
                    f"{', '.join(given(args, settings))}: set the worker cache, which needs --cache-rows N|P%"
                )
        own = values(args, [f for f in CLUSTER_FLAGS if f.config is Cluster])
        return Cluster(**own, cache=cache)
    except (TypeError, ValueError) as err:
        raise UsageError(flag_names(str(err), CLUSTER_FLAGS)) from None


def _reattach_options(args: argparse.Namespace, cluster: Optional[Cluster]) -> Dict[str, Any]:
    """fit's run_dir and reattach_within: a --run-dir on Ray is a reattachable run (docs/design/reattach.md)."""
    on_ray = cluster is not None and cluster.backend == "ray" and args.run_dir is not None
    if args.reattach_within is not None and not on_ray:
        raise UsageError("--reattach-within: how long a run's roles wait for its driver; needs --backend ray --run-dir")
    if not on_ray:
        return {}
    grace = 300.0 if args.reattach_within is None else args.reattach_within
    if not grace > 0:
        raise UsageError(f"--reattach-within: must be > 0 seconds, got {grace:g}")
    return {"run_dir": args.run_dir, "reattach_within": grace}


def _builtin_settings(args: argparse.Namespace, besides: tuple) -> Dict[str, Any]:
    """The built-in job's settings given as flags (its table rules included), but those named ``besides``."""
    return {k: v for k, v in values(args, BUILTIN_FLAGS + TABLE_RULE_FLAGS).items() if k not in besides}


def _script_job(args: argparse.Namespace, cluster: Optional[Cluster], steps: Optional[int]) -> Job:
    """The job of --script, the flags checked that only the built-in job takes or that need a rule."""
    refused = given(args, BUILTIN_FLAGS)
    if refused:
        raise UsageError(
            f"{', '.join(refused)}: describe the built-in model; with --script the job declares its own tables, "
            f"model and input (drop the flag(s) or the --script)"
        )
    table_rules = values(args, TABLE_RULE_FLAGS)
    if table_rules and not any(
        name in table_rules for name in ("admit_min_count", "evict_ttl_steps", "evict_ttl_seconds", "max_rows")
    ):
        raise UsageError(
            f"{', '.join(given(args, TABLE_RULE_FLAGS))}: set how a rule counts or when it runs; give the rule too "
            f"(--admit-min-count, --evict-ttl-steps, --evict-ttl-seconds or --max-rows)"
        )
    _check_kills(cluster, steps)
    if cluster is not None and cluster.backend == "ray" and Path(args.script).is_file():
        from xdl_ec.ps.backend import check_project_folder

        try:  # before the script runs (it may import TensorFlow) and Ray starts
            check_project_folder(str(Path(args.script).resolve().parent))
        except ValueError as err:
            raise UsageError(str(err)) from None
    return load_script_job(args.script, table_rules)


def _stream_request(
    args: argparse.Namespace, cluster: Optional[Cluster], run: Dict[str, Any], progress: bool, fit_options: Dict
) -> TrainRequest:
    """The built-in job on ``--stream DIR``: endless (``--steps`` bounds it), no hold-out."""
    if not Path(args.stream).is_dir():
        raise UsageError(f"--stream: no such directory: {args.stream}")
    if args.epochs is not None or args.eval_fraction is not None:
        endless = given(args, [f for f in BUILTIN_FLAGS if f.field in ("epochs", "eval_fraction")])
        raise UsageError(
            f"{', '.join(endless)}: a stream is endless and has no hold-out (its progressive validation is in the "
            f"report); drop the flag(s)"
        )
    settings = _builtin_settings(args, ("data", "synthetic"))
    try:
        config = TrainConfig(progress=progress, **run, **settings)
    except (OSError, ValueError) as err:
        raise UsageError(str(err)) from None
    workers = 1 if cluster is None else cluster.workers
    steps = (
        None
        if config.steps is None
        else config.steps
        if cluster is not None and cluster.mode == "async"
        else -(-config.steps // workers)
    )
    _check_kills(cluster, steps)
    job = criteo_job(config)
    job.source = builtin_source(config)
    return TrainRequest(job, cluster, steps, config.seed, config.deterministic, progress, config, None, fit_options)


def _check_kills(cluster: Optional[Cluster], steps: Optional[int]) -> None:
    """--fail-at / --fail-worker-at against the cluster's servers, workers and the run's steps: checked here, before
    TensorFlow is imported or Ray started, not when the first kill is due."""
    if cluster is None:
        return
    try:
        cluster.failure_schedule(0).validate(cluster.servers, cluster.workers, steps)
    except ValueError as err:
        raise UsageError(str(err)) from None
