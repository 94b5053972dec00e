"""Job: your model on xdl-ec, the public training API (as XDL's scripts, TorchRec's configs and TFRA's tables).

    import xdl_ec
    users = xdl_ec.Table("users", dim=16, optimizer=xdl_ec.optim.Adagrad(0.05))
    job = xdl_ec.Job(tables=[users], features=[xdl_ec.Feature("user", users)],
                     model_fn=make_model, input_fn=make_input)
    report = job.fit(steps=1000, cluster=xdl_ec.Cluster(servers=5, ft="ec", code=(4, 1)), deterministic=True)
    job.evaluate(holdout_batches)                     # {"auc": ..., "logloss": ..., "eval_samples": ...}

``model_fn()`` returns a Keras model called as ``model(embedded, dense)``; ``input_fn(worker, num_workers)`` returns
an iterable of dict batches (see :mod:`xdl_ec.model.feature_batch`). Both are factories: every worker (a Ray actor on
another machine, perhaps) builds its own. ``cluster=None`` trains in this process. Each :meth:`Job.fit` trains a
fresh model; the trained one stays with the job for :meth:`Job.evaluate` and :meth:`Job.predict`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from xdl_ec.ft.configs import EcConfig
from xdl_ec.ft.factory import make_strategy
from xdl_ec.ft.failure_injector import FailureInjector
from xdl_ec.job.cluster import Cluster
from xdl_ec.job.driver_reattach import DriverReattach
from xdl_ec.job.export_schedule import ExportSchedule
from xdl_ec.job.local_run import LocalRun
from xdl_ec.job.local_tables import LocalTables
from xdl_ec.job.stop_request import STOP_REQUEST, StopAtBoundary
from xdl_ec.job.tensorboard_log import TensorBoardLog
from xdl_ec.job.trained_model import TrainedModel
from xdl_ec.keep.backstop import Backstop
from xdl_ec.keep.run_saver import RunSaver
from xdl_ec.keep.saved_run import SavedRun, SaveMismatch
from xdl_ec.model.feature import Feature
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.model.side_input import Input
from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.fault_tolerance import Unrecoverable
from xdl_ec.ps.move_hooks import MoveHooks
from xdl_ec.ps.reattachable_run import DEFAULT_GRACE
from xdl_ec.ps.resize import ResizeError, Resizer
from xdl_ec.ps.training import PSTrainer
from xdl_ec.ps.worker import RunSettings
from xdl_ec.settings import checks
from xdl_ec.sparse.disk_tier_full import DiskTierFull, spill_dir_of
from xdl_ec.sparse.memory_budget import MemoryBudget
from xdl_ec.sparse.table_config import Table
from xdl_ec.tf.determinism import configure_determinism

PathLike = Union[str, os.PathLike]
logger = logging.getLogger(__name__)


class Job:
    """A training job: tables, features, model and input factories, loss (see the module docstring)."""

    def __init__(
        self,
        tables: Sequence[Table],
        features: Sequence[Feature],
        model_fn: Callable[[], Any],
        input_fn: Callable[[int, int], Any],
        loss: Union[str, Dict[str, str], Callable[[Any, Any], Any]] = "binary_crossentropy",
        dense_optimizer: Union[str, Dict[str, Any]] = "adam",
        dense_learning_rate: float = 0.001,
        eval_fn: Optional[Callable[[], Iterable[Any]]] = None,
        inputs: Sequence[Input] = (),
        loss_weights: Optional[Dict[str, float]] = None,
        table_groups: bool = True,
    ) -> None:
        """``dense_optimizer``: the dense model's Keras optimizer (a name or a Keras config dict) at
        ``dense_learning_rate``; ``eval_fn()``: hold-out batches that :meth:`fit` evaluates on at the end.

        Several heads: batches carry ``"labels": {head: float [B]}``, the model returns {head: logits}, and ``loss``
        is {head: "binary_crossentropy"} (weighted by ``loss_weights``, 1.0 each by default) or a callable
        ``loss(labels: dict, logits: dict)``. ``inputs``: side inputs (:class:`xdl_ec.Input`) the model receives as
        ``model(embedded, {"dense": dense, name: tensor, ...})``. ``table_groups=False``: every table steps on its
        own (one pull, push and TF op each) instead of in groups per dim (:mod:`xdl_ec.model.table_groups`); the
        trained model is the same bit for bit, only slower with many tables."""
        self.spec = JobSpec(
            tuple(tables),
            tuple(features),
            model_fn,
            input_fn,
            loss,
            dense_optimizer,
            dense_learning_rate,
            eval_fn,
            tuple(inputs),
            loss_weights,
            bool(table_groups),
        )
        self.model: Optional[TrainedModel] = None  # the model of the last fit
        self.source: Optional[Dict[str, Any]] = None  # where the job comes from (see xdl_ec.job.job_source), for saves
        self._finished: Optional[_FinishedRun] = None  # the last fit's end, for save()
        self._resizer: Optional[Resizer] = None  # the running cluster fit's, for resize()
        # a test's or benchmark's observer of this job's resizes and their fixed pace (xdl_ec.ps.move_hooks)
        self.move_hooks = MoveHooks()

    @property
    def tables(self) -> Sequence[Table]:
        return self.spec.tables

    @property
    def features(self) -> Sequence[Feature]:
        return self.spec.features

    def fit(
        self,
        steps: Optional[int] = None,
        cluster: Optional[Cluster] = None,
        deterministic: bool = False,
        seed: int = 0,
        progress: bool = False,
        resume: Optional[PathLike] = None,
        save_dir: Optional[PathLike] = None,
        save_every: Optional[str] = None,
        keep: int = 2,
        backstop_every: Optional[str] = None,
        logdir: Optional[PathLike] = None,
        export_every: Optional[str] = None,
        export_dir: Optional[PathLike] = None,
        memory_budget: Optional[Union[int, str]] = None,
        spill_dir: Optional[PathLike] = None,
        run_dir: Optional[PathLike] = None,
        reattach_within: float = DEFAULT_GRACE,
        preload: Optional[Mapping[str, Callable[[], Iterable[np.ndarray]]]] = None,
    ) -> Dict[str, Any]:
        """Trains a fresh model for at most ``steps`` steps (a step trains one batch on every worker; None: until
        the input is exhausted), in this process or on ``cluster``; returns the run report (the same as
        ``xdl-ec train --report``): samples, steps, samples_per_sec, final_loss, model_digest, the hold-out
        metrics when the job has an ``eval_fn``, and a cluster's servers, workers and fault-tolerance fields.

        ``resume``: continue the newest save under that directory (from :meth:`save` or ``save_dir``) instead of
        starting fresh: ``steps`` counts the whole run, so the resumed run trains ``steps`` minus the saved step
        (same ``seed``, ``deterministic`` and worker count as the saved run; any backend and server count).
        ``save_dir`` / ``save_every`` (``"500"`` steps or ``"60s"``) / ``keep``: save the run periodically
        there, keeping the newest ``keep`` saves (see :mod:`xdl_ec.keep.run_saver`). ``backstop_every`` (a cluster
        run, e.g. ``"60s"``): incremental saves into ``save_dir`` written in the background instead (see
        :mod:`xdl_ec.keep.backstop`); when the run cannot recover, its error names the save to resume from.
        ``logdir``: write TensorBoard scalars there (loss, progressive AUC, samples/s, rows per table, failures; see
        :mod:`xdl_ec.job.tensorboard_log`). ``export_every`` (``"500"`` steps or ``"60s"``) with ``export_dir``: fresh
        serving, a SavedModel ``export_dir/base`` when the fit begins, then deltas ``export_dir/delta-NNNNNN`` that
        plain TensorFlow applies to the served model without a reload (see :mod:`xdl_ec.job.export_schedule`); the
        report's ``exports`` gives their freshness and size. ``memory_budget`` (bytes or ``"4G"``) with ``spill_dir``
        (in this process; a cluster takes them as ``Cluster(memory_budget=, spill_dir=)``): the tables keep at most
        that much in RAM and the rest of their rows on disk there, the model the same bit for bit (see
        :mod:`xdl_ec.sparse.memory_budget`); the report then has each table's tier counts and ``memory``. A budgeted
        run never holds every row in the driver: its ``model_digest`` is streamed from the servers in key order a
        chunk at a time, and a cluster's trained model (``job.model``) copies their rows into tables under the
        servers' budget in this process, the rest in the spill dir (gone when the model is closed).
        ``run_dir`` (a cluster on Ray of one worker, ft "ec" or "none"): the servers, their parity and the worker
        outlive this process for ``reattach_within`` seconds, and the same fit run again with the same ``run_dir``
        reattaches to them, continuing with nothing re-trained; past that grace it resumes from the newest save in
        ``save_dir`` (the backstop). The report's ``reattach`` says which (docs/design/reattach.md).
        ``preload`` ({table name: a callable returning that table's keys in int64 chunks}): before the first step of
        a fresh run (not a resumed one: its save holds the rows), every key gets the row a step's first pull would
        create (its initializer's), a chunk at a time, through the servers' own insert path (so parity and
        checkpoints follow); every step then reads what it reads without the preload. The report's ``preload``
        gives {table: {"rows", "seconds"}}."""
        reattach: Optional[DriverReattach] = None
        if run_dir is not None:
            if cluster is None:
                raise ValueError("run_dir: roles that outlive the driver need a cluster on Ray")
            reattach = DriverReattach(run_dir, reattach_within, cluster, self.spec, seed, deterministic)
        try:
            if reattach is not None:
                resume = reattach.resume_from(resume, save_dir)
            return self._run(
                steps,
                cluster,
                deterministic,
                seed,
                progress,
                False,
                resume,
                save_dir,
                save_every,
                keep,
                backstop_every,
                logdir,
                export_every,
                export_dir,
                memory=MemoryBudget.of(memory_budget, None if spill_dir is None else str(spill_dir)),
                reattach=reattach,
                preload=preload,
            )
        finally:
            if reattach is not None:
                reattach.end()

    def verify(
        self,
        steps: Optional[int] = None,
        cluster: Optional[Cluster] = None,
        deterministic: bool = False,
        seed: int = 0,
        progress: bool = False,
    ) -> Dict[str, Any]:
        """:meth:`fit` on an ``ft="ec"`` cluster, then re-encode every parity stripe from its data: the report's
        ``scrub`` lists the stripes whose stored parity disagrees (empty: all consistent)."""
        if cluster is None or cluster.ft != "ec":
            raise ValueError("verify: scrubs erasure-coded parity, so it needs cluster=Cluster(..., ft='ec')")
        return self._run(steps, cluster, deterministic, seed, progress, True, None, None, None, 2, None)

    def _run(
        self,
        steps: Optional[int],
        cluster: Optional[Cluster],
        deterministic: bool,
        seed: int,
        progress: bool,
        scrub: bool,
        resume: Optional[PathLike],
        save_dir: Optional[PathLike],
        save_every: Optional[str],
        keep: int,
        backstop_every: Optional[str],
        logdir: Optional[PathLike] = None,
        export_every: Optional[str] = None,
        export_dir: Optional[PathLike] = None,
        memory: Optional[MemoryBudget] = None,
        reattach: Optional[DriverReattach] = None,
        preload: Optional[Mapping[str, Callable[[], Iterable[np.ndarray]]]] = None,
    ) -> Dict[str, Any]:
        if steps is not None:
            checks.positive_int("steps", steps)
        if memory is not None and cluster is not None:
            raise ValueError(
                "memory_budget / spill_dir: fit's are for a run in this process; a cluster's servers take them as "
                "Cluster(memory_budget=..., spill_dir=...)"
            )
        checks.non_negative_int("seed", seed)
        checks.instance("deterministic", deterministic, bool)
        if cluster is not None:
            checks.instance("cluster", cluster, Cluster)
            if not self.spec.tables:  # a dense-only model (XDL's mnist): runs alike, with nothing on the servers
                logger.warning(
                    "the job has no tables: its %d servers hold no rows, so ft=%r has nothing to keep and a lost "
                    "server nothing to rebuild (it is noticed when the run next meets it); the dense model is the "
                    "driver's, as always",
                    cluster.servers,
                    cluster.ft,
                )
        preload = dict(preload or {})
        names = {t.name for t in self.spec.tables}
        for name, keys in preload.items():
            if name not in names:
                raise ValueError(f"preload: the job has no table {name!r} (its tables: {sorted(names)})")
            if not callable(keys):
                raise TypeError(f"preload[{name!r}]: must be a callable returning the keys in chunks, got {keys!r}")
        workers = 1 if cluster is None else cluster.workers
        saved = None
        if resume is not None:  # checked whole before anything starts
            saved = SavedRun.open(resume)
            saved.check_job(self.spec)
            saved.check_run(workers)
            if (saved.seed, saved.deterministic) != (seed, deterministic):
                raise SaveMismatch(
                    f"{saved.directory}: saved by a run with seed={saved.seed}, deterministic="
                    f"{saved.deterministic}; resume with the same (got seed={seed}, "
                    f"deterministic={deterministic})"
                )
            saved.verify()
        for name, value in (("save_every", save_every), ("backstop_every", backstop_every)):
            if value is not None and save_dir is None:
                raise ValueError(f"{name}: needs save_dir, the directory the saves go to")
        if backstop_every is not None:
            if save_every is not None:
                raise ValueError(
                    "backstop_every: give it or save_every, not both (one writes incremental saves in the "
                    "background, the other full saves at the step boundary, into one save_dir)"
                )
            if cluster is None:
                raise ValueError(
                    "backstop_every: backs up parameter servers; it needs a cluster (and is meant for "
                    "ft='ec', for what parity cannot cover)"
                )
        saver: Optional[RunSaver]
        if save_dir is None:
            saver = None
        elif backstop_every is not None:
            saver = Backstop(
                save_dir,
                self.spec,
                seed=seed,
                deterministic=deterministic,
                workers=workers,
                every=backstop_every,
                source=self.source,
            )
        else:
            saver = RunSaver(
                save_dir,
                self.spec,
                seed=seed,
                deterministic=deterministic,
                workers=workers,
                every=save_every,
                keep=keep,
                source=self.source,
            )
        try:  # the saver holds its save dir from here: released however the fit ends
            settings = RunSettings(seed=seed, deterministic=deterministic)
            configure_determinism(seed, deterministic)
            if (export_every is None) != (export_dir is None):
                raise ValueError(
                    "export_every / export_dir: give both (how often to export, e.g. '60s' or '500' steps, and the "
                    "directory the base and its deltas go to) or neither"
                )
            exporter = None if export_dir is None else ExportSchedule(export_dir, str(export_every), self.spec)
            log = None if logdir is None else TensorBoardLog(logdir)
            if exporter is not None:
                exporter.log = log
            self._close_model()
            try:
                if cluster is None:
                    return self._fit_here(steps, settings, progress, saved, saver, log, exporter, memory, preload)
                return self._fit_on(
                    cluster, steps, settings, progress, scrub, saved, saver, log, exporter, reattach, preload
                )
            finally:
                if log is not None:
                    log.close()
        finally:
            if saver is not None:
                saver.close()

    @staticmethod
    def _steps_left(steps: Optional[int], saved: Optional[SavedRun]) -> Optional[int]:
        """``steps`` counts the whole run: a resumed run trains what is left of it (0: nothing)."""
        if steps is None or saved is None:
            return steps
        return max(steps - saved.step, 0)

    @staticmethod
    def _resumed(report: Dict[str, Any], saved: Optional[SavedRun], saver: Optional[RunSaver]) -> None:
        if saved is not None:
            report["resumed_from"] = {"directory": str(saved.directory), "step": saved.step, "samples": saved.samples}
            stopped = saved.stopped_run()
            if stopped is not None:  # the run that failed said how far it got: what the resume trained again
                report["retrained_samples"] = max(int(stopped["samples"]) - saved.samples, 0)
                report["resumed_from"]["stopped_run"] = stopped
        if saver is not None:
            report["saves"] = saver.report()

    def _fit_here(
        self,
        steps: Optional[int],
        settings: RunSettings,
        progress: bool,
        saved: Optional[SavedRun],
        saver: Optional[RunSaver],
        log: Optional[TensorBoardLog] = None,
        exporter: Optional[ExportSchedule] = None,
        memory: Optional[MemoryBudget] = None,
        preload: Optional[Dict[str, Callable[[], Iterable[np.ndarray]]]] = None,
    ) -> Dict[str, Any]:
        run = LocalRun(self.spec, settings, progress, memory)
        try:
            preloaded = self._begin(run, saved, saver, log, exporter, preload)
            try:
                report = run.fit(self._steps_left(steps, saved))
            except DiskTierFull as full:
                raise self._stopped_on_full_disk(full, saver, run) from full
            self._save_end(saver, run)
            if exporter is not None:
                exporter.finish(run)
                report["exports"] = exporter.report()
            report.update(self._evaluate(run.trained()))
            report["model_digest"] = run.digest()
            report.update(run.report())
            if preloaded:
                report["preload"] = preloaded
            self._resumed(report, saved, saver)
            if log is not None:
                log.finish(run, report)
        except BaseException:
            run.close()
            run.tables.close()
            raise
        run.close()
        self.model = run.trained()
        self._finished = _FinishedRun(self.model, run.reader_position(), run.samples, settings, 1)
        report["job"] = self.spec.describe()
        return report

    def _begin(
        self,
        run: Any,
        saved: Optional[SavedRun],
        saver: Optional[RunSaver],
        log: Optional[TensorBoardLog],
        exporter: Optional[ExportSchedule] = None,
        preload: Optional[Dict[str, Callable[[], Iterable[np.ndarray]]]] = None,
    ) -> Dict[str, Any]:
        """Before a run's first step (in this process or on a cluster): the save it resumes or else the preload
        (returns {table: {"rows", "seconds"}} of it), its saver and its TensorBoard log as hooks, and the clean stop
        at a step boundary on SIGINT / SIGTERM."""
        preloaded: Dict[str, Any] = {}
        if saved is not None:
            run.restore(saved)
        else:
            for name, keys in (preload or {}).items():
                start = time.perf_counter()
                rows = run.preload(name, keys())
                preloaded[name] = {"rows": rows, "seconds": time.perf_counter() - start}
        if saver is not None:
            saver.start(run.step)
            run.hooks.append(saver)
        if exporter is not None:  # the base: the model as the first step finds it
            exporter.start(run)
            run.hooks.append(exporter)
        if log is not None:
            log.start(run)
            run.hooks.append(log)
        run.hooks.append(StopAtBoundary(STOP_REQUEST, lambda: self._save_end(saver, run)))
        return preloaded

    def _stopped_on_full_disk(self, full: DiskTierFull, saver: Optional[RunSaver], run: Any) -> DiskTierFull:
        """A run stopped by its spill dir's disk: saved when it stopped at a boundary and has a save dir."""
        if not full.at_boundary or saver is None:
            return full
        self._save_end(saver, run)
        return full.with_save(None if saver.last is None else str(saver.last.directory))

    @staticmethod
    def _save_end(saver: Optional[RunSaver], run: Any) -> None:
        """A run with a save directory ends with a save of its last step (unless its last save is of it)."""
        if saver is None:
            return
        if isinstance(saver, Backstop):
            saver.wait()
        if saver.last is None or saver.last.step != run.step:
            saver.save(run)
        if isinstance(saver, Backstop):
            saver.wait()

    def _fit_on(
        self,
        cluster: Cluster,
        steps: Optional[int],
        settings: RunSettings,
        progress: bool,
        scrub: bool,
        saved: Optional[SavedRun],
        saver: Optional[RunSaver],
        log: Optional[TensorBoardLog] = None,
        exporter: Optional[ExportSchedule] = None,
        reattach: Optional[DriverReattach] = None,
        preload: Optional[Dict[str, Callable[[], Iterable[np.ndarray]]]] = None,
    ) -> Dict[str, Any]:
        config = cluster.strategy_config(settings.seed)
        if scrub and isinstance(config, EcConfig):  # `verify` checks parity: an ec cluster's
            config = dataclasses.replace(config, scrub=True)
        schedule = cluster.failure_schedule(settings.seed)
        injector = None if schedule.empty else FailureInjector(schedule)
        cluster_config = cluster.cluster_config()
        if reattach is not None:
            cluster_config = reattach.cluster_config(cluster_config)
        trainer = PSTrainer(
            self.spec,
            cluster_config,
            settings,
            make_strategy(config),
            injector,
            progress,
            cluster.caches(self.spec.tables),
            reattach=None if reattach is None else reattach.record,
        )
        resizer = self._resizer = self._resizer_of(trainer, cluster, steps, self.move_hooks)
        tables: Optional[LocalTables] = None  # the trained model's rows: a budgeted run's copied as they stream
        exports: List[List[Dict[str, Any]]] = []
        try:
            # a reattached run's rows are the servers' own: nothing to preload
            preloaded = self._begin(
                trainer, saved, saver, log, exporter, None if trainer.reattached_step is not None else preload
            )
            steps_left = self._steps_left(steps, saved)
            if reattach is not None:
                reattach.started(trainer)
                if steps is not None and trainer.reattached_step is not None:
                    steps_left = max(steps - trainer.reattached_step, 0)
            try:
                report = trainer.fit(steps_left)
            except (RoleLost, Unrecoverable) as err:
                if isinstance(saver, Backstop):
                    saver.note_stop(trainer.step, trainer.samples, str(err))
                    raise self._backstop_error(err, saver) from err
                raise
            except RuntimeError as err:  # a server's disk tier could not write: its part of the step is not applied
                spill_dir = spill_dir_of(err)
                if spill_dir is None:
                    raise
                cause = str(err).splitlines()[-1]
                raise DiskTierFull(spill_dir, cause, trainer.step, at_boundary=False) from err
            self._save_end(saver, trainer)
            if exporter is not None:
                exporter.finish(trainer)
                report["exports"] = exporter.report()
            start = time.perf_counter()
            if self.spec.eval_fn is not None:
                report.update(trainer.evaluate(self.spec.eval_fn()))
            report["eval_seconds"] = time.perf_counter() - start
            if cluster_config.memory is None:
                exports = [trainer.scheduler.exports(t.name) for t in self.spec.tables]
                report["model_digest"] = trainer.digest_of(exports)
            else:  # tables larger than RAM: the digest streamed, the driver's copy of the rows as budgeted
                tables = self._budgeted_copy(cluster_config.memory)
                report["model_digest"] = trainer.digest_streamed(
                    [tables.loading(t.name, trainer.key_order_rows(t.name)) for t in self.spec.tables]
                )
            report.update(trainer.report())
            if preloaded:
                report["preload"] = preloaded
            if resizer.records:
                report["resizes"] = resizer.report()
            self._resumed(report, saved, saver)
            if reattach is not None:
                report["reattach"] = reattach.report(trainer, saved)
            if log is not None:
                log.finish(trainer, report)
            position, samples = trainer.reader_position(), trainer.samples
        except BaseException:
            if tables is not None:
                tables.close()
            raise
        finally:
            resizer.close()
            if isinstance(saver, Backstop):
                saver.close()
            trainer.close()
        if tables is None:
            tables = LocalTables(self.spec.tables)
            for table, parts in zip(self.spec.tables, exports):
                for rows in parts:
                    if len(rows["keys"]):
                        tables.tables[table.name].load(rows["keys"], rows["values"], rows["state"])
        self.model = TrainedModel(self.spec, tables, trainer.dense, trainer.signature)
        self._finished = _FinishedRun(self.model, position, samples, settings, cluster.workers)
        report["job"] = self.spec.describe()
        return report

    def _budgeted_copy(self, memory: MemoryBudget) -> LocalTables:
        """Empty tables for a budgeted cluster run's trained model, filled as its digest streams the servers' rows:
        the servers' budget (without their parity's share) in this process's RAM, the rest in their spill dir
        (unlinked files, gone when the model is closed or the process ends): a table larger than RAM stays so."""
        return LocalTables(self.spec.tables, dataclasses.replace(memory, parity_code=None), reserve=False)

    @staticmethod
    def _backstop_error(err: BaseException, backstop: Backstop) -> Unrecoverable:
        """The run cannot recover: the error names the newest complete backstop save to resume from."""
        try:
            backstop.wait()
        except (RuntimeError, TimeoutError) as failed:
            return Unrecoverable(f"{err}; and the backstop's last write failed ({failed})")
        if backstop.last is None:
            return Unrecoverable(f"{err}; the backstop in {backstop.store.root} has no save yet")
        return Unrecoverable(
            f"{err}; resume from the backstop: the same command with --resume {backstop.store.root} "
            f"(its newest save is of step {backstop.last.step}: {backstop.last.directory})"
        )

    @staticmethod
    def _resizer_of(trainer: PSTrainer, cluster: Cluster, steps: Optional[int], hooks: MoveHooks) -> Resizer:
        """The hook that resizes ``trainer``'s servers: ``cluster.resize_at``'s schedule and :meth:`resize`'s asks."""
        resizer = Resizer(cluster.resize_schedule(), cluster.resize_share, hooks)
        try:
            resizer.validate(cluster.servers, trainer.strategy.stripe_code, steps)
        except ValueError:
            trainer.close()
            raise
        resizer.attach(trainer)
        trainer.hooks.append(resizer)
        return resizer

    @property
    def resizable(self) -> bool:
        """Whether a cluster fit is running now, so :meth:`resize` may be asked (a run's cluster is up)."""
        return self._resizer is not None and self._resizer.active

    def resize(
        self,
        servers: int,
        drain: Union[int, Sequence[int], None] = None,
        timeout: Optional[float] = None,
        code: Union[str, Tuple[int, int], None] = None,
    ) -> Dict[str, Any]:
        """Resizes the servers of the cluster fit running now (call it from another thread) to ``servers`` at the
        next step boundary, and returns the resize's record once it is done: step (the first on the new count),
        servers_before / servers_after, rows, rows_moved, rows_copied, bytes_copied, drained, server_ids, seconds
        (see :mod:`xdl_ec.ps.resize`: rows move while the cluster stands at that boundary, under ``ec`` onto fresh
        servers with the stripes re-formed, and the model stays the one of a run never resized). ``drain``: the
        server id (or ids) to remove, e.g. a spot machine reclaimed with notice: only its rows move (plus what the
        count change implies) and it stops last; ``servers`` counts the servers after, so ``drain=i`` with the
        current count replaces server i. ``timeout``: seconds to wait for a boundary before withdrawing. ``code``:
        the (k, r) (or "k,r") the re-formed stripes take under ``ft="ec"`` (None: kept; the record names
        ``code_before`` and ``code``); a new code at the current count re-forms the stripes in place.
        ResizeError, changing nothing: no cluster fit running, fewer servers than 1 or than the (new) code's
        k + r, the current count and code without a drain, a drained id not live, a code without ``ft="ec"`` or
        against ``--code``'s rule, another resize under way, or a cluster the resize does not support yet
        (``--ft ckpt`` / ``cpr``, caches, bounded tables)."""
        resizer = self._resizer
        if resizer is None:
            raise ResizeError("resize: no cluster run is training (resize while job.fit(cluster=...) runs)")
        return resizer.request(servers, drain, timeout, code)

    def save(self, directory: PathLike, keep: int = 2) -> str:
        """Saves the last fit's model (every table's rows with optimizer state, the dense weights with their
        optimizer state, reader positions, step, seed) into the save root ``directory`` as its newest save
        (atomic; the newest ``keep`` kept); returns that save's path. :meth:`fit` with ``resume=directory``
        continues it, :func:`xdl_ec.load` loads it."""
        if self._finished is None or self.model is None:
            raise ValueError("save: this job has no trained model yet: call fit first")
        run = self._finished
        saver = RunSaver(
            directory,
            self.spec,
            seed=run.settings.seed,
            deterministic=run.settings.deterministic,
            workers=run.workers,
            keep=keep,
            source=self.source,
        )
        try:
            return str(saver.save(run).directory)
        finally:
            saver.close()

    def _evaluate(self, model: TrainedModel) -> Dict[str, Any]:
        if self.spec.eval_fn is None:
            return {}
        start = time.perf_counter()
        out = model.evaluate(self.spec.eval_fn())
        out["eval_seconds"] = time.perf_counter() - start
        return out

    def _trained(self) -> TrainedModel:
        if self.model is None:
            raise ValueError("this job has no trained model yet: call fit first")
        return self.model

    def evaluate(self, batches: Iterable[Any]) -> Dict[str, Any]:
        """AUC, log loss and sample count of the last fit's model on ``batches`` (dict batches as input_fn's)."""
        return self._trained().evaluate(batches)

    def predict(self, batch: Any) -> Union[np.ndarray, Dict[str, np.ndarray]]:
        """Probabilities [B] of one batch with the last fit's model."""
        return self._trained().predict(batch)

    def export(self, directory: PathLike) -> str:
        """The last fit's model as a TensorFlow SavedModel that serves without xdl-ec (``serving_default``: one
        input per feature, ``dense``, -> ``probability`` [B]; see :mod:`xdl_ec.job.serving_export`)."""
        return self._trained().export(directory)

    def _close_model(self) -> None:
        if self.model is not None:
            self.model.close()
            self.model = None
            self._finished = None


class _FinishedRun:
    """A fit that has ended, as :class:`~xdl_ec.keep.run_saver.RunSaver` saves runs: its model, step, samples and
    reader positions."""

    def __init__(
        self, model: TrainedModel, position: Dict[str, Any], samples: int, settings: RunSettings, workers: int
    ) -> None:
        self.model, self._position, self.samples = model, dict(position), samples
        self.settings, self.workers = settings, workers
        self.step = int(position["step"])
        self.signature = model.signature

    def quiesce(self) -> None:
        """Nothing runs any more."""

    def save_tables(self, pending: Any) -> int:
        return pending.save_server(0, self.model.tables.tables).nbytes()

    def dense_state(self) -> tuple:
        return self.model.dense.state()

    def reader_position(self) -> Dict[str, Any]:
        return dict(self._position)
