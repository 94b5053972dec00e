"""PSTrainer: the driver of a parameter-server run (``xdl-ec train --servers N --workers W``).

It builds the scheduler (servers), the workers and the authoritative dense replica, runs the step loop and writes
the same report as the single-process trainer plus per-server bytes in/out.

- Sync mode: step t is dispatched to every worker that has a batch left, with the dense weights; all answers are
  awaited (the barrier), the dense gradients averaged in worker order and applied; servers apply the step's sparse
  pushes merged in worker order (see :mod:`xdl_ec.ps.server`). Deterministic with ``--deterministic``; with one
  worker the model_digest equals the single-process trainer's.
- Async mode: each worker is kept busy; its step gets the next global step number and the weights of that moment,
  and its gradients (sparse on the servers, dense here) are applied as soon as they arrive.

A lost server or worker stops the run with :class:`RoleLost` naming role and index (confirmed by the scheduler);
calls have timeouts, so nothing waits forever.
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

    def __init__(self, config: Any, cluster: ClusterConfig) -> None:
        from .. import init, optim
        from ..trainer import configure_determinism, num_train_batches, open_training_data

        config.validate()
        cluster.validate()
        if config.data is not None:  # workers may run elsewhere (Ray actors in their own working directory)
            config = dataclasses.replace(config, data=os.path.abspath(config.data))
        self.config, self.cluster = config, cluster
        self.data = open_training_data(config)
        configure_determinism(config.seed, config.deterministic)
        self.dense = DenseReplica(config)
        self.table = TableSpec(self.TABLE_NAME, config.emb_dim, optim.get(config.optimizer, learning_rate=config.lr),
                               init.RandomUniform(-0.05, 0.05), seed=config.seed)
        self.total_batches = num_train_batches(self.data, config)
        self.step = 0
        self.losses: List[float] = []
        self.backend = make_backend(cluster.backend, cluster.address)
        try:
            self.scheduler = Scheduler(self.backend, cluster.servers, (self.table,))
            prefetch = cluster.workers == 1 or cluster.mode == "async"
            servers = list(self.scheduler.servers)
            self.workers = self.scheduler.start_workers(
                cluster.workers, Worker,
                lambda i: (i, cluster.workers, config, servers, self.table, self.total_batches, prefetch,
                           cluster.call_timeout))
            for w in self.workers:  # workers build TF models: wait for them before the clock starts
                self._result(w.call("ping"), timeout=max(cluster.call_timeout, 120.0))
        except BaseException:
            self.backend.shutdown()
            raise
        self.client = PSClient(self.scheduler.servers, worker=cluster.workers, timeout=cluster.call_timeout)

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

    def _fit_sync(self, bar: Any) -> int:
        workers = len(self.workers)
        samples = 0
        for first in range(0, self.total_batches, workers):
            participants = min(workers, self.total_batches - first)
            self.step += 1
            weights = self.dense.weights()
            futures = [self.workers[i].call("train_step", self.step, weights, participants)
                       for i in range(participants)]
            results: List[StepResult] = [self._result(f) for f in futures]
            for r in results:
                if r is None:
                    raise RuntimeError(f"a worker ran out of data at step {self.step}: the batch split is inconsistent")
                self._record(r)
            self.dense.apply(average_gradients([r.dense_grads for r in results]))
            loss = results[0].loss if participants == 1 else float(np.mean([r.loss for r in results]))
            self.losses.append(loss)
            samples += sum(r.samples for r in results)
            self._tick(bar, samples)
        return samples

    def _fit_async(self, bar: Any) -> int:
        per_worker = [len(range(i, self.total_batches, len(self.workers))) for i in range(len(self.workers))]
        in_flight: Dict[Any, int] = {}
        samples = 0

        def dispatch(i: int) -> None:
            self.step += 1
            per_worker[i] -= 1
            in_flight[self.workers[i].call("train_step", self.step, self.dense.weights(), 1)] = i

        for i in range(len(self.workers)):
            if per_worker[i] > 0:
                dispatch(i)
        while in_flight:
            done = wait_first(list(in_flight), self.cluster.call_timeout)
            if not done:  # nobody answered in time: let the scheduler judge the oldest call
                done = [next(iter(in_flight))]
            for future in done:
                i = in_flight.pop(future)
                result = self._result(future)
                self._record(result)
                self.dense.apply(result.dense_grads)
                self.losses.append(result.loss)
                samples += result.samples
                self._tick(bar, samples)
                if per_worker[i] > 0:
                    dispatch(i)
        return samples

    def _tick(self, bar: Any, samples: int) -> None:
        if self._first_step_end is None:
            self._first_step_end, self._first_samples = time.perf_counter(), samples
        bar.update(1)

    def fit(self) -> Dict[str, Any]:
        """The step loop; the same fields as :meth:`xdl_ec.trainer.Trainer.fit`."""
        from tqdm import tqdm

        from ..trainer import LAST_LOSSES

        cfg = self.config
        self._first_step_end, self._first_samples = None, 0
        bar = tqdm(total=self.total_batches if self.cluster.mode == "async" else
                   math.ceil(self.total_batches / len(self.workers)),
                   unit="step", disable=not cfg.progress, dynamic_ncols=True, leave=False)
        start = time.perf_counter()
        try:
            samples = self._fit_sync(bar) if self.cluster.mode == "sync" else self._fit_async(bar)
        finally:
            bar.close()
        end = time.perf_counter()
        seconds = end - start
        first_end, first_samples = self._first_step_end, self._first_samples
        steady = (samples - first_samples) / (end - first_end) if first_end is not None and samples > first_samples else None
        return {"samples": samples, "steps": self.step, "train_seconds": seconds,
                "samples_per_sec": samples / seconds if seconds > 0 else 0.0, "steady_samples_per_sec": steady,
                "final_loss": float(np.mean(self.losses[-LAST_LOSSES:])) if self.losses else None}

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
        for w in getattr(self, "workers", []):
            try:
                w.call("close").result(10.0)
            except Exception:  # noqa: BLE001 - already dead or closing
                pass
        self.backend.shutdown()
