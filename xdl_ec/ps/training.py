"""PSTrainer: the driver of a parameter-server run (``xdl-ec train --servers N --workers W``).

It builds the scheduler (servers), the workers and the authoritative dense replica, runs the step loop and writes
the same report as the single-process trainer plus per-server bytes in/out.

- Sync mode: step t is dispatched to every worker that has a batch left, with the dense weights; all answers are
  awaited (the barrier), the dense gradients averaged in worker order and applied; servers apply the step's sparse
  pushes merged in worker order (see :mod:`xdl_ec.ps.server`). Deterministic with ``--deterministic``; with one
  worker the model_digest equals the single-process trainer's.
- Async mode: each worker is kept busy; its step gets the next global step number and the weights of that moment,
  and its gradients (sparse on the servers, dense here) are applied as soon as they arrive.

Fault tolerance (issue 6) goes through one seam, a :class:`xdl_ec.ft.strategy.FaultTolerance` (``--ft``; default
``none``): ``attach`` once the cluster is up, ``after_step`` at every step boundary with no push in flight, and on a
role death confirmed by the scheduler ``recover``, whose :class:`~xdl_ec.ft.strategy.Resume` says where training
goes on (the failed step retried, or an earlier step with every worker's reader rewound). A failed step is first
drained (every call of it answered or failed) so no push is in flight during a recovery. A lost worker is
restarted by the driver itself (unless ``--ft none``): it holds no model state (the dense replica lives here), and
the new one continues from the reader position of its predecessor. Under ``none`` a lost role stops the run with
:class:`~xdl_ec.ft.strategy.Unrecoverable` naming role and index. Calls have timeouts, so nothing waits forever.

Optional strategy hooks beyond the seam: ``wants_boundary(step)`` (async mode: hold new steps until none is in flight,
e.g. for a due save), ``settle()`` (complete the strategy's own calls in flight; run by :meth:`PSTrainer.quiesce`),
``close()`` (end of the run). Strategies read or save server state only after :meth:`PSTrainer.quiesce`, since a
worker may answer a step before its push is acknowledged.

Failure injection (:class:`xdl_ec.ft.failure_schedule.FailureSchedule`) kills roles for real at step boundaries.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Dict, List, Optional

import numpy as np

from ..data.schema import NUM_DENSE, NUM_SPARSE
from .backend import DEFAULT_TIMEOUT, CallTimeout, RoleLost, make_backend, wait_first
from .client import PSClient
from .dense_sync import DenseReplica, average_gradients
from .scheduler import Scheduler
from .server import TableSpec
from .worker import StepResult, Worker

MODES = ("sync", "async")
BACKENDS = ("local", "ray")


@dataclasses.dataclass
class ClusterConfig:
    """The cluster flags of ``xdl-ec train``: servers, workers, backend (+ Ray address), mode, call timeout."""

    servers: int = 1
    workers: int = 1
    backend: str = "local"
    address: Optional[str] = None
    mode: str = "sync"
    call_timeout: float = DEFAULT_TIMEOUT

    def validate(self) -> None:
        for name in ("servers", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: must be one of {BACKENDS}, got {self.backend!r}")
        if self.address is not None and self.backend != "ray":
            raise ValueError("address: a Ray address needs --backend ray")
        if self.mode not in MODES:
            raise ValueError(f"mode: must be one of {MODES}, got {self.mode!r}")
        if not (isinstance(self.call_timeout, (int, float)) and self.call_timeout > 0):
            raise ValueError(f"call_timeout: must be a positive number of seconds, got {self.call_timeout!r}")


class PSTrainer:
    """Trains ``config`` (a :class:`xdl_ec.trainer.TrainConfig`) on a cluster; :meth:`run` returns the report."""

    TABLE_NAME = "criteo_categorical"

    def __init__(self, config: Any, cluster: ClusterConfig, strategy: Any = None, failures: Any = None) -> None:
        """``strategy``: a :class:`~xdl_ec.ft.strategy.FaultTolerance` (default ``none``); ``failures``: a
        :class:`~xdl_ec.ft.failure_schedule.FailureSchedule` of injected kills (default none)."""
        from .. import init, optim
        from ..ft.failure_schedule import FailureSchedule
        from ..ft.strategy import FaultTolerance, NoFaultTolerance
        from ..trainer import configure_determinism, num_train_batches, open_training_data

        config.validate()
        cluster.validate()
        strategy = NoFaultTolerance() if strategy is None else strategy
        if not isinstance(strategy, FaultTolerance):
            raise TypeError(f"strategy: expected a FaultTolerance, got {type(strategy).__name__}")
        failures = FailureSchedule() if failures is None else failures
        if not isinstance(failures, FailureSchedule):
            raise TypeError(f"failures: expected a FailureSchedule, got {type(failures).__name__}")
        self.strategy, self.failures = strategy, failures
        if config.data is not None:  # workers may run elsewhere (Ray actors in their own working directory)
            config = dataclasses.replace(config, data=os.path.abspath(config.data))
        self.config, self.cluster = config, cluster
        self.data = open_training_data(config)
        configure_determinism(config.seed, config.deterministic)
        self.dense = DenseReplica(config)
        self.table = TableSpec(self.TABLE_NAME, config.emb_dim, optim.get(config.optimizer, learning_rate=config.lr),
                               init.RandomUniform(-0.05, 0.05), seed=config.seed)
        self.total_batches = num_train_batches(self.data, config)
        self.failures.validate(cluster.servers, cluster.workers, self.total_steps)
        self.step = 0
        self.samples = 0  # samples trained so far (re-trained ones after a rollback included)
        self.worker_batches = [0] * cluster.workers  # reader position: batches each worker has trained
        # each worker's last push seq sent to each server, as of its last answered step: what a worker's push log
        # covered when it died (--ft ec checks that a rebuilt server lost none of a dead worker's pushes)
        self.push_seqs: List[Optional[List[int]]] = [None] * cluster.workers
        self.unlogged_push_seqs: List[Optional[List[int]]] = [None] * cluster.workers  # of restarted predecessors
        self._train_start: Optional[float] = None  # when the first fit began
        self._fit_start = 0.0  # when the current fit call began (the timeline's zero)
        self.injected: List[Dict[str, Any]] = []  # kills done by the failure schedule (step, role, index, time)
        self.losses: List[float] = []
        self.backend = make_backend(cluster.backend, cluster.address)
        try:
            # a hot spare where starting a server is slow (a Ray process) and a strategy replaces lost servers
            spares = 1 if cluster.backend == "ray" and not isinstance(strategy, NoFaultTolerance) else 0
            self.scheduler = Scheduler(self.backend, cluster.servers, (self.table,), spares=spares)
            prefetch = cluster.workers == 1 or cluster.mode == "async"
            self._worker_args = lambda i: (i, cluster.workers, config, list(self.scheduler.servers), self.table,
                                           self.total_batches, prefetch, cluster.call_timeout)
            self.workers = self.scheduler.start_workers(cluster.workers, Worker, self._worker_args)
            for w in self.workers:  # workers build TF models: wait for them before the clock starts
                self._result(w.call("ping"), timeout=max(cluster.call_timeout, 120.0))
            self.client = PSClient(self.scheduler.servers, worker=cluster.workers, timeout=cluster.call_timeout)
            self.strategy.attach(self)
        except BaseException:
            self.backend.shutdown()
            raise

    @property
    def total_steps(self) -> int:
        """Steps of the run: one per batch in async mode, one per W batches in sync mode."""
        if self.cluster.mode == "async":
            return self.total_batches
        return math.ceil(self.total_batches / self.cluster.workers)

    # ---- failures -------------------------------------------------------------------------------------
    def _result(self, future: Any, timeout: Optional[float] = None) -> Any:
        """``future.result`` with failures confirmed by the scheduler: a dead role raises its RoleLost."""
        timeout = self.cluster.call_timeout if timeout is None else timeout
        while True:
            try:
                return future.result(timeout)
            except (RoleLost, CallTimeout) as err:
                lost = self.scheduler.confirm_failure(err)
                if lost is not None:
                    raise lost from None
                if isinstance(err, CallTimeout) and not future.done():
                    continue  # our own wait ran out but the role answers pings: slow, not dead
                raise  # the error came from inside the call (e.g. a worker's own timeout): not a death

    # ---- training -------------------------------------------------------------------------------------
    def _record(self, result: StepResult) -> None:
        if not math.isfinite(result.loss):
            raise FloatingPointError(f"training diverged at step {self.step} (worker {result.worker}): loss is "
                                     f"{result.loss}; lower --lr / --dense-lr")

    def _drain(self, futures: List[Any]) -> tuple:
        """Waits for every future (a step's calls): (results or None per future, confirmed RoleLost errors)."""
        results: List[Any] = []
        lost: List[RoleLost] = []
        for future in futures:
            try:
                results.append(self._result(future))
            except RoleLost as err:
                results.append(None)
                lost.append(err)
        return results, lost

    def _fit_sync(self, bar: Any, stop: int) -> int:
        workers = len(self.workers)
        done: Dict[int, StepResult] = {}  # answers of the current step's workers (kept when it is retried)
        while self.step < stop:  # stop <= total_steps: every step has a batch for some worker
            if not done:
                self._inject(self.step + 1)
            participants = min(workers, self.total_batches - self.step * workers)
            step = self.step + 1
            weights = self.dense.weights()
            todo = [i for i in range(participants) if i not in done]
            futures = [self.workers[i].call("train_step", step, weights, participants) for i in todo]
            answers, lost = self._drain(futures)
            done.update((i, r) for i, r in zip(todo, answers) if r is not None)
            if lost:  # no call of the step is in flight any more: recover, then retry or replay
                if self._recover(lost, step):
                    done = {}  # rolled back: the step is replayed whole
                # else retried: the workers that answered trained their batch (their pushes wait on the servers
                # for the others'), only the failed ones run again
                continue
            results = [done[i] for i in range(participants)]
            done = {}
            for r in results:
                if r is None:
                    raise RuntimeError(f"a worker ran out of data at step {step}: the batch split is inconsistent")
                self._record(r)
            self.step = step
            self.dense.apply(average_gradients([r.dense_grads for r in results]))
            loss = results[0].loss if participants == 1 else float(np.mean([r.loss for r in results]))
            self.losses.append(loss)
            for i, r in enumerate(results):
                self.worker_batches[i] += 1
                self.push_seqs[i] = r.push_seqs
                self.samples += r.samples
            self._tick(bar, self.samples)
            self.strategy.after_step(self.step)
        return self.samples

    def _fit_async(self, bar: Any, stop: int) -> int:
        workers = len(self.workers)
        in_flight: Dict[Any, int] = {}
        step_of: Dict[Any, int] = {}  # the step number each call in flight trains
        retry: List[int] = []  # numbers of failed steps: a retried batch keeps its optimizer step, as in sync mode
        # Async steps overlap, so a boundary with no push in flight only exists when the driver makes one: a
        # strategy that needs it (e.g. a checkpoint due) says so through the optional ``wants_boundary(step)``.
        wants_boundary = getattr(self.strategy, "wants_boundary", None)

        def remaining(i: int) -> int:
            if not retry and self.step >= stop:
                return 0  # this call's steps are all dispatched (a failed one is still retried)
            return len(range(i, self.total_batches, workers)) - self.worker_batches[i] - \
                sum(1 for j in in_flight.values() if j == i)

        def dispatch(i: int) -> None:
            if retry:
                step = retry.pop(0)
            else:
                self._inject(self.step + 1)
                self.step += 1
                step = self.step
            future = self.workers[i].call("train_step", step, self.dense.weights(), 1)
            in_flight[future], step_of[future] = i, step

        for i in range(workers):
            if remaining(i) > 0:
                dispatch(i)
        while in_flight:
            done = wait_first(list(in_flight), self.cluster.call_timeout)
            if not done:  # nobody answered in time: let the scheduler judge the oldest call
                done = [next(iter(in_flight))]
            lost: List[RoleLost] = []
            for future in done:
                i = in_flight.pop(future)
                step = step_of.pop(future)
                try:
                    result = self._result(future)
                except RoleLost as err:
                    lost.append(err)
                    retry.append(step)
                    continue
                self._async_apply(i, result, bar)
            if lost:  # drain the other steps in flight (applying those that succeeded), then recover
                futures = list(in_flight.items())
                in_flight.clear()
                results, more = self._drain([f for f, _ in futures])
                for (future, i), result in zip(futures, results):
                    step = step_of.pop(future)
                    if result is not None:
                        self._async_apply(i, result, bar)
                    else:
                        retry.append(step)
                retry.sort()
                if self._recover(lost + more, self.step):
                    retry.clear()  # rolled back: the steps after the checkpoint are numbered again
                for i in range(workers):
                    if remaining(i) > 0 and i not in in_flight.values():
                        dispatch(i)
                continue
            if not in_flight:
                self.strategy.after_step(self.step)  # a boundary with no push in flight
            elif wants_boundary is not None and wants_boundary(self.step):
                continue  # hold new steps until the ones in flight are done: the strategy gets its boundary
            for i in range(workers):
                if remaining(i) > 0 and i not in in_flight.values():
                    dispatch(i)
        return self.samples

    def _async_apply(self, i: int, result: StepResult, bar: Any) -> None:
        self._record(result)
        self.dense.apply(result.dense_grads)
        self.losses.append(result.loss)
        self.worker_batches[i] += 1
        self.push_seqs[i] = result.push_seqs
        self.samples += result.samples
        self._tick(bar, self.samples)

    # ---- fault tolerance ------------------------------------------------------------------------------
    def quiesce(self) -> None:
        """Waits until every push sent so far is applied (workers may answer a step before its push's acks, see
        :mod:`xdl_ec.ps.worker`): call before reading or saving server state, or before killing a role."""
        futures = [w.call("flush") for w in self.workers]
        _, lost = self._drain(futures)
        if lost:
            raise lost[0]
        settle = getattr(self.strategy, "settle", None)  # optional: the strategy's own calls in flight
        if settle is not None:
            settle()

    def _inject(self, step: int) -> None:
        """Kills the roles the failure schedule wants dead before ``step`` (real kills, see FailureSchedule)."""
        if self.failures.empty:
            return
        elapsed = 0.0 if self._train_start is None else time.perf_counter() - self._train_start
        kills = self.failures.due(step, elapsed)
        if kills:
            self.quiesce()  # the kill lands at a clean boundary: the previous step's pushes are all applied
            for k in kills:
                self.scheduler.kill(k.role, k.index)
                self.injected.append({"step": step, "role": k.role, "index": k.index,
                                      "time": time.perf_counter()})

    def _detect_seconds(self, role: str, index: int) -> float:
        """Seconds from the injected kill of (role, index) to now (0.0 when the death was not injected)."""
        for k in reversed(self.injected):
            if k["role"] == role and k["index"] == index:
                return time.perf_counter() - k["time"]
        return 0.0

    def _recover(self, lost: List[RoleLost], step: int) -> bool:
        """Recovers every role of ``lost`` still dead: workers restarted here, servers by the strategy; applies
        the strategy's Resume (rollback of the step, the dense state and the readers, or nothing). True when
        training was rolled back."""
        from ..ft.strategy import FailureRecord, NoFaultTolerance

        seen = set()
        rolled_back = False
        # servers first (a new worker contacts every server when it starts); a server's recovery skips the dead
        # workers, which start afterwards from the then current servers and reader position
        for err in sorted(lost, key=lambda e: e.role == "worker"):
            key = (err.role, err.index)
            if key in seen:
                continue
            seen.add(key)
            if isinstance(self.strategy, NoFaultTolerance):
                raise err  # no redundancy: the run stops naming the lost role
            if key not in self.scheduler.dead:
                continue  # recovered together with an earlier loss
            detect = self._detect_seconds(*key)
            if err.role == "worker":
                start = time.perf_counter()
                while True:
                    try:
                        self._restart_worker(err.index)
                        break
                    except RoleLost as other:  # the new worker met a server that died too: recover it first
                        confirmed = self.scheduler.confirm_failure(other) if other.role == "server" else None
                        if confirmed is None:
                            raise
                        rolled_back = self._resume(self.strategy.recover(confirmed)) or rolled_back
                self.strategy.failures.append(FailureRecord(step=step, role="worker", index=err.index,
                                                            detect_seconds=detect,
                                                            rebuild_seconds=time.perf_counter() - start,
                                                            samples_per_sec_during_rebuild=0.0))
                continue
            before = len(self.strategy.failures)
            resume = self.strategy.recover(err)
            for record in self.strategy.failures[before:]:
                if not record.detect_seconds:
                    record.detect_seconds = detect
            rolled_back = self._resume(resume) or rolled_back
        if not getattr(self.strategy, "rebuilding", False):  # else the strategy replenishes when it is done
            self.scheduler.replenish_spares()
        return rolled_back

    def _resume(self, resume: Any) -> bool:
        if resume.reader_position is None:
            return False  # nothing rolled back: the failed step is retried
        if self.cluster.mode == "sync":
            self.losses = self.losses[:resume.step]
        self.step = resume.step
        self.worker_batches = [int(n) for n in resume.reader_position["worker_batches"]]
        futures = [w.call("seek", n) for w, n in zip(self._live_workers(), self.worker_batches) if w is not None]
        _, lost = self._drain(futures)
        if lost:
            raise lost[0]
        return True

    def _live_workers(self) -> List[Any]:
        """The workers' handles, None for those the scheduler knows dead (restarted by the driver later)."""
        return [None if ("worker", w.index) in self.scheduler.dead else w for w in self.workers]

    def samples_since(self, worker_batches: List[int]) -> int:
        """Samples trained after the reader position ``worker_batches`` (what a rollback re-trains)."""
        batches = sum(max(now - then, 0) for now, then in zip(self.worker_batches, worker_batches))
        return batches * self.config.batch_size

    def replace_server(self, index: int) -> Any:
        """Starts a fresh, empty server ``index`` in place of a dead one and points the workers and the driver's
        client at it; returns its handle (the strategy rebuilds its state)."""
        handle = self.scheduler.replace_server(index)
        self.client.servers[index] = handle
        futures = [w.call("set_server", index, handle) for w in self._live_workers() if w is not None]
        _, lost = self._drain(futures)
        if lost:
            raise lost[0]
        return handle

    def _restart_worker(self, index: int) -> None:
        """A new worker ``index`` continuing from its predecessor's reader position."""
        from .worker import Worker

        handle = self.backend.start("worker", index, Worker, *self._worker_args(index))
        previous, before = self.push_seqs[index], self.unlogged_push_seqs[index]
        if previous is not None:  # the predecessor's pushes died with its log (durable or not)
            self.unlogged_push_seqs[index] = previous if before is None else \
                [max(a, b) for a, b in zip(before, previous)]
        self.workers[index] = handle
        self.scheduler.workers[index] = handle
        self.scheduler.dead.pop(("worker", index), None)
        self.scheduler.version += 1
        self._result(handle.call("seek", self.worker_batches[index]), timeout=max(self.cluster.call_timeout, 120.0))

    def _tick(self, bar: Any, samples: int) -> None:
        now = time.perf_counter()
        if self._first_step_end is None:
            self._first_step_end, self._first_samples = now, samples
        # (step, seconds since training started, samples so far, step loss): throughput and loss over time for
        # `xdl-ec bench`; a few floats per step
        self.timeline.append([self.step, now - self._fit_start, samples, self.losses[-1]])
        bar.update(1)

    def fit(self, steps: Optional[int] = None) -> Dict[str, Any]:
        """The step loop; the same fields as :meth:`xdl_ec.trainer.Trainer.fit`, for the steps of this call.

        ``steps``: train at most that many more steps and return (the next call continues where this one stopped,
        like Keras' ``fit`` with ``initial_epoch``); None trains to the end of the data."""
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise ValueError(f"steps: must be a positive int (steps to train in this call) or None, got {steps!r}")
        from tqdm import tqdm

        from ..trainer import LAST_LOSSES

        cfg = self.config
        self._first_step_end, self._first_samples = None, 0
        self.samples = 0
        self.injected: List[Dict[str, Any]] = []
        self.timeline: List[List[float]] = []
        stop = self.total_steps if steps is None else min(self.total_steps, self.step + steps)
        bar = tqdm(total=stop - self.step, unit="step", disable=not cfg.progress, dynamic_ncols=True, leave=False)
        start = self._fit_start = time.perf_counter()
        if self._train_start is None:  # the first call: --mtbf kills count from here
            self._train_start = start
        try:
            samples = self._fit_sync(bar, stop) if self.cluster.mode == "sync" else self._fit_async(bar, stop)
            for future in [w.call("flush") for w in self.workers]:  # every push applied before the clock stops
                self._result(future)
        finally:
            bar.close()
        end = time.perf_counter()
        seconds = end - start
        first_end, first_samples = self._first_step_end, self._first_samples
        steady = (samples - first_samples) / (end - first_end) if first_end is not None and samples > first_samples else None
        return {"samples": samples, "steps": self.step, "train_seconds": seconds,
                "samples_per_sec": samples / seconds if seconds > 0 else 0.0, "steady_samples_per_sec": steady,
                "final_loss": float(np.mean(self.losses[-LAST_LOSSES:])) if self.losses else None,
                "timeline": self.timeline,
                "injected": [{"step": k["step"], "role": k["role"], "index": k["index"],
                              "seconds": k["time"] - start} for k in self.injected],
                **self.strategy.report()}

    # ---- evaluation and report ------------------------------------------------------------------------
    def evaluate(self) -> Dict[str, Any]:
        import tensorflow as tf

        from ..trainer import evaluate_holdout, rows_for_eval

        model, dim = self.dense.model, self.config.emb_dim
        predict = tf.function(lambda dense, emb: tf.sigmoid(model((dense, emb), training=False)),
                              input_signature=[tf.TensorSpec([None, NUM_DENSE], tf.float32),
                                               tf.TensorSpec([None, NUM_SPARSE, dim], tf.float32)])
        find = lambda keys: self.client.find(self.TABLE_NAME, keys, dim)  # noqa: E731
        return evaluate_holdout(self.data, self.config, predict, lambda sparse: rows_for_eval(find, sparse, dim))

    def digest(self) -> str:
        from ..digest import model_digest

        return model_digest(self.scheduler.exports(self.TABLE_NAME), self.dense.model.weights,
                            self.dense.optimizer.variables)

    def run(self) -> Dict[str, Any]:
        """fit + evaluate + digest + per-server and per-worker stats; shuts the cluster down at the end."""
        try:
            report = self.fit()
            start = time.perf_counter()
            report.update(self.evaluate())
            report["eval_seconds"] = time.perf_counter() - start
            report["model_digest"] = self.digest()
            servers = self.scheduler.server_stats()
            workers = [self._result(w.call("stats")) for w in self.workers]
        finally:
            self.close()
        report["embedding_rows"] = sum(sum(s["rows"].values()) for s in servers)
        report["bad_lines"] = self.data.bad_lines
        report["config"] = {**dataclasses.asdict(self.config), "data_source": self.data.description}
        report["cluster"] = {**dataclasses.asdict(self.cluster), "map": self.scheduler.cluster_map()}
        report["servers"] = [{k: s[k] for k in ("index", "bytes_in", "bytes_out", "pulls", "pushes", "keys_pulled",
                                                  "keys_pushed", "rows")} for s in servers]
        report["workers"] = workers
        samples = max(report["samples"], 1)
        report["bytes_pulled_per_sample"] = sum(w["bytes_pulled"] + w["bytes_requested"] for w in workers) / samples
        report["bytes_pushed_per_sample"] = sum(w["bytes_pushed"] for w in workers) / samples
        return report

    def kill(self, role: str, index: int) -> None:
        """Failure injection: kills a server or worker (see :meth:`Scheduler.kill`)."""
        self.scheduler.kill(role, index)

    def close(self) -> None:
        close_strategy = getattr(self.strategy, "close", None)
        if close_strategy is not None:
            close_strategy()
        for w in getattr(self, "workers", []):
            try:
                w.call("close").result(10.0)
            except Exception:  # noqa: BLE001 - already dead or closing
                pass
        self.backend.shutdown()
