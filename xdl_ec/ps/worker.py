"""Worker: trains a job's model on its own input against the parameter servers: the role a backend starts, whose
methods are its remote interface (:class:`~xdl_ec.ps.api.WorkerAPI`).

It composes the parts that do the work, each with one job (:class:`~xdl_ec.ps.worker_parts.WorkerParts`): its share
of the input (:class:`~xdl_ec.ps.worker_input.WorkerInput`), its copy of the dense model and the TF step
(:class:`~xdl_ec.ps.worker_model.WorkerModel`), the rows of its batches
(:class:`~xdl_ec.ps.batch_rows.BatchRows`), its pushes in flight (:class:`~xdl_ec.ps.pushes_in_flight.PushesInFlight`),
the servers it calls (:class:`~xdl_ec.ps.worker_servers.WorkerServers`) and its step stats
(:class:`~xdl_ec.ps.step_stats.StepStats`); one step over them is a :class:`~xdl_ec.ps.training_step.TrainingStep`.

On Ray the driver's step calls and the pulls and pushes go over direct links (:mod:`xdl_ec.ps.direct`, given the
run's ``link_secret``): the step runs on the link's thread, so every method that touches the worker's state holds
its lock (Ray runs the other calls on its own thread). The same class trains in one process
(:mod:`xdl_ec.job.local_run`), there over the tables themselves.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union, cast

import numpy as np

from xdl_ec.model.dense_model import DenseModel
from xdl_ec.model.feature_batch import FeatureBatch
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.model.model_step import ModelStep
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.batch_rows import BatchRows
from xdl_ec.ps.cached_client import CachedClient
from xdl_ec.ps.client import PSClient
from xdl_ec.ps.dense_state import DenseState
from xdl_ec.ps.direct import LinkHost
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.pushes_in_flight import PushesInFlight
from xdl_ec.ps.run_settings import RunSettings
from xdl_ec.ps.step_client import StepClient
from xdl_ec.ps.step_result import StepResult
from xdl_ec.ps.step_stats import StepStats
from xdl_ec.ps.trained_since import TrainedSince
from xdl_ec.ps.training_step import TrainingStep
from xdl_ec.ps.worker_input import WorkerInput
from xdl_ec.ps.worker_model import WorkerModel
from xdl_ec.ps.worker_parts import WorkerParts
from xdl_ec.ps.worker_servers import WorkerServers, connect
from xdl_ec.sparse.cache_config import Cache
from xdl_ec.tf.determinism import configure_determinism, size_op_pools

__all__ = ["DenseState", "RunSettings", "StepResult", "Worker"]

_Method = TypeVar("_Method", bound=Callable[..., Any])


def _serialised(method: _Method) -> _Method:
    """Runs ``method`` holding the worker's lock (a step from a direct link's thread, other calls from Ray's)."""

    @functools.wraps(method)
    def run(self: "Worker", *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(_Method, run)


class Worker(LinkHost):
    """Worker ``index`` of ``count`` of ``job``: its input, a copy of the dense model, a client over ``servers``
    (handles) or the given ``client``. ``prefetch_across_steps``: pull the next batch's untouched keys during the
    current step (see :mod:`xdl_ec.ps.training_step` for when that is exact)."""

    link_role = "worker"

    def __init__(
        self,
        index: int,
        count: int,
        job: JobSpec,
        settings: RunSettings,
        servers: Sequence[Handle],
        prefetch_across_steps: bool,
        call_timeout: Optional[float] = None,
        client: Optional[StepClient] = None,
        apply_dense: bool = False,
        caches: Optional[Mapping[str, Cache]] = None,
        table_rows: Optional[Mapping[str, int]] = None,
        report_dense: bool = False,
        link_secret: Optional[JobSecret] = None,
        combine_calls: bool = True,
    ) -> None:
        """``apply_dense``: each step applies its dense gradients to this worker's model itself, inside the same
        TF call (one process; a cluster's only worker), and answers none unless ``report_dense`` (a cluster's only
        worker answers them: the driver logs them, see :mod:`xdl_ec.ps.dense_sync`). ``caches``: {table: Cache},
        the worker's embedding caches (:mod:`xdl_ec.ps.cached_client`), sized by ``table_rows`` for "P%" ones.
        ``link_secret``: the run's JobSecret: pulls and pushes go over direct links to the servers (Ray handles).
        ``combine_calls``: with prefetching, a step's push and the next step's pull in one request per server."""
        self._lock = threading.RLock()
        if not 0 <= index < count:
            raise ValueError(f"index: must be in [0, {count}), got {index}")
        configure_determinism(settings.seed, settings.deterministic)
        self.index, self.count, self.job, self.settings = index, count, job, settings
        dims = {t.name: t.dim for t in job.tables}
        if client is None:
            client = connect(index, servers, link_secret, call_timeout, caches, dims, table_rows)
        self.client: StepClient = client
        combine_calls = combine_calls and prefetch_across_steps and type(client) in (PSClient, CachedClient)
        # one worker combining calls pulls every key of a batch with the push before it: no fresh keys to know
        worker_input = WorkerInput(
            job,
            index,
            count,
            prefetch_across_steps and not (combine_calls and count == 1),
            # a caching client keeps a cache per table: its tables step one by one
            grouped=job.table_groups and client.steps_groups and not isinstance(client, CachedClient),
        )
        if worker_input.current is not None:  # TF's pools are sized by the step (before the model's first op)
            size_op_pools(settings.deterministic, len(worker_input.current))
        model = WorkerModel(job, index, settings.seed, apply_dense, report_dense)
        model.build_for(worker_input.current)
        self.parts = WorkerParts(
            client,
            worker_input,
            model,
            BatchRows(client, dims),
            PushesInFlight(index, client),
            WorkerServers(index, client, link_secret),
            StepStats(),
        )
        self.training_step = TrainingStep(index, count, self.parts, prefetch_across_steps, combine_calls)
        self._trained = TrainedSince(self.parts.input.position)

    # ---- the model (local runs read it here) -----------------------------------------------------------------
    @property
    def dense(self) -> Optional[DenseModel]:
        """The dense model; None until the first batch built it."""
        return self.parts.model.dense

    @property
    def built_dense(self) -> DenseModel:
        """The dense model, built with the first batch (its shapes fix the model's)."""
        return self.parts.model.built_dense

    @property
    def built_step(self) -> ModelStep:
        """The TF step, built with the first batch."""
        return self.parts.model.built_step

    def batch_signature_built(self) -> Optional[Tuple[Any, ...]]:
        """The batch signature this worker's model and step were built for."""
        return self.parts.model.signature

    @property
    def position(self) -> int:
        """Batches of this worker's input trained so far (its reader position)."""
        return self.parts.input.position

    # ---- the remote interface (WorkerAPI) --------------------------------------------------------------------
    def ping(self) -> int:
        return self.index

    @_serialised
    def batch_signature(self) -> Optional[Tuple[Any, ...]]:
        """The shapes of this worker's batches (None when its input is empty): the driver builds its model so."""
        current = self.parts.input.current
        return None if current is None else current.signature()

    @_serialised
    def train_step(
        self,
        step: int,
        weights: Union[None, DenseState, Sequence[np.ndarray]],
        participants: int,
        more: bool = True,
        ttl_before: Optional[Mapping[str, int]] = None,
    ) -> Optional[StepResult]:
        """Trains this worker's next batch at optimizer ``step`` with dense ``weights`` (None: keep its own; a
        :class:`DenseState`: load it whole first); None when its input is exhausted. ``participants``: pushes a
        server waits for at this step (sync mode). ``more``: another step may follow in this fit, so the next
        batch's rows may be prefetched (a pull inserts rows: the last step of a fit prefetches nothing, so a run
        that stops early holds only rows it trained). ``ttl_before``: {table: cutoff} of the tables whose
        ``Evict(ttl_seconds)`` pass ends this step's push (the driver's :class:`~xdl_ec.ps.step_times.StepTimes`),
        sent with the push."""
        result = self.training_step.train(step, weights, participants, more, ttl_before)
        if result is not None:  # before answering: a driver that dies now finds the step here (progress)
            self._trained.add(result)
        return result

    @_serialised
    def progress(self) -> Dict[str, Any]:
        """What this worker trained since its reader was last set (its start or a seek), for a reattaching driver
        (docs/design/reattach.md): {"position", "since", "samples", "losses", "last" (the last StepResult),
        "has_next", "unanswered" (a step trained whose push met a lost server, kept for its retry; None: none)}.
        Serialised with :meth:`train_step`: a step in flight ends first."""
        return {
            **self._trained.report(),
            "position": self.position,
            "has_next": self.parts.input.current is not None,
            "unanswered": self.training_step.unanswered,
        }

    @_serialised
    def mark_progress(self) -> int:
        """Counts :meth:`progress` from here (a boundary the driver recorded, docs/design/reattach.md); returns
        the reader position."""
        self._trained = TrainedSince(self.parts.input.position)
        return self.position

    @_serialised
    def load_dense(self, state: DenseState) -> None:
        """Takes ``state`` as this worker's dense model (weights and optimizer variables)."""
        self.parts.model.load(state)

    @_serialised
    def dense_state(self) -> Tuple[List[np.ndarray], List[np.ndarray], int]:
        """(weights, optimizer variables, optimizer iterations) of this worker's dense model: a worker that applies
        its own dense updates hands the driver its state (see :mod:`xdl_ec.ps.dense_sync`)."""
        return self.parts.model.state()

    @_serialised
    def call_latency(self, calls: int, direct: bool = True) -> float:
        """Mean seconds of an empty call (a ping) from this worker to a server, ``calls`` rounds over every server
        one call at a time, over the path pulls and pushes take (``direct``) or through the backend's handle
        (bench/bench_ray_step.py)."""
        return self.parts.servers.call_latency(calls, direct)

    @_serialised
    def flush(self, write_back: bool = False) -> int:
        """Waits for the acks of this worker's last push (raising its failure, if any); returns how many.
        ``write_back``: first push every gradient its caches hold (the driver's quiesce: saves, checkpoints, the
        end of a run see every update)."""
        return self.parts.pushes.flush(write_back)

    @_serialised
    def predict(self, batch: FeatureBatch, rows: Dict[str, np.ndarray]) -> Union[np.ndarray, Dict[str, np.ndarray]]:
        return self.parts.model.built_step.predict(batch, rows)

    @_serialised
    def stats(self) -> Dict[str, Any]:
        """Steps, seconds spent waiting for pulls / computing / pushing, and the client's byte counters."""
        return self.parts.stats.report(self.index, self.client, self.parts.input.stats())

    @_serialised
    def input_position(self) -> Optional[Any]:
        """The input's own position after the batches trained (:attr:`position`), for a save; None when the input
        does not know it (then a resume skips batches)."""
        return self.parts.input.input_position()

    @_serialised
    def seek(self, position: int, state: Optional[Any] = None) -> bool:
        """Continues from this worker's ``position``-th batch (a restarted worker taking over its predecessor's
        reader position, or a rollback; ``state``: the input's own position there, from a save); returns whether a
        batch is left."""
        parts = self.parts
        parts.pushes.forget()  # rolled back: those steps are trained (and pushed) again
        self.training_step.forget()
        parts.rows.drop()
        current = parts.input.seek(position, state)
        parts.model.build_for(current)
        self._trained = TrainedSince(parts.input.position)
        return current is not None

    @_serialised
    def set_server(self, index: int, handle: Handle) -> None:
        """Points this worker at a replacement of server ``index``; a prefetch from the old one is dropped."""
        self.parts.servers.replace(index, handle)
        self.parts.rows.drop()  # it may hold the dead server's failed future: pull everything again
        self.parts.pushes.forget_server(index)

    @_serialised
    def settle_pulls(self) -> None:
        """Waits for this worker's pulls in flight (a prefetch of the next batch's rows): before the servers' rows
        move (:mod:`xdl_ec.ps.resize`), every row a pull inserts must be in place. The rows stay valid for the next
        step: a move changes where rows live, not what they hold."""
        self.parts.rows.settle()

    @_serialised
    def set_servers(
        self,
        handles: Sequence[Handle],
        kept: Optional[int] = None,
        server_ids: Optional[Sequence[int]] = None,
        origin: Optional[Sequence[int]] = None,
    ) -> None:
        """Points this worker at a resized cluster's servers (``handles``: servers 0..len-1, the first ``kept`` or
        those ``origin`` names the same as before, ``server_ids`` their stable ids, see PSClient.set_servers);
        called with nothing in flight (after :meth:`flush` and :meth:`settle_pulls`); a worker's caches start empty on
        the new layout (:meth:`CachedClient.set_servers`)."""
        if self.parts.pushes.unacked:
            raise ValueError("set_servers: pushes are still unacknowledged; flush first")
        self.parts.servers.reform(handles, kept, server_ids, origin)

    @_serialised
    def enable_push_log(self) -> None:
        """Keeps each push until its server reports it durable (``--ft ec``), for :meth:`replay_pushes`."""
        self.parts.pushes.keep_log()

    @_serialised
    def replay_pushes(self, server: int, after_seq: int, handle: Optional[Handle] = None) -> int:
        """Re-sends this worker's logged pushes to (rebuilt) ``server`` above push seq ``after_seq``, in order;
        ``handle``: the server's replacement, used from now on (a prefetch from the dead one is dropped)."""
        if handle is not None:
            self.set_server(server, handle)
        return self.parts.pushes.replay(server, after_seq)

    def close(self) -> None:
        self.parts.input.close()
        self.close_links()
        self.parts.servers.close()
