"""ClusterView: what a fault-tolerance strategy sees of a running cluster, and the only things it may change.

Reading: the servers and workers (through :class:`~xdl_ec.ps.remote.Remote`), the tables, who is dead, the
step, samples and reader positions, the dense state. Changing: replacing a dead server, quiescing, waiting for
calls (failures confirmed by the scheduler), and loading a dense state. The driver's own bookkeeping (steps,
readers, push seqs) stays the driver's.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Set, Tuple

import numpy as np

from xdl_ec.ps.api import ServerAPI, WorkerAPI
from xdl_ec.ps.backend import Handle, RoleLost
from xdl_ec.ps.dense_sync import DriverDense
from xdl_ec.ps.recovery_coordinator import RecoveryCoordinator
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.run_persistence import RunPersistence
from xdl_ec.ps.running_cluster import RunningCluster
from xdl_ec.ps.training_state import TrainingState
from xdl_ec.sparse.table_config import Table


class ClusterView:
    """A strategy's window on a driver's run: its ``cluster`` at ``state``, with its ``persistence`` (reader
    positions, dense state), ``recovery`` (replacing a server) and ``dense`` model."""

    def __init__(
        self,
        cluster: RunningCluster,
        state: TrainingState,
        persistence: RunPersistence,
        recovery: RecoveryCoordinator,
        dense: DriverDense,
    ) -> None:
        self._cluster, self._state, self._persistence = cluster, state, persistence
        self._recovery, self._dense = recovery, dense

    def sources(self) -> Tuple[RunningCluster, TrainingState, RunPersistence, RecoveryCoordinator, DriverDense]:
        """The driver's parts this view reads (the arguments of another view of the same run)."""
        return self._cluster, self._state, self._persistence, self._recovery, self._dense

    # ---- who is there -----------------------------------------------------------------------------------
    @property
    def num_servers(self) -> int:
        return len(self._cluster.scheduler.servers)

    @property
    def num_workers(self) -> int:
        return len(self._cluster.workers)

    @property
    def backend(self) -> str:
        return self._cluster.config.backend

    @property
    def mode(self) -> str:
        return self._cluster.config.mode

    @property
    def tables(self) -> Tuple[Table, ...]:
        return self._cluster.job.tables

    def server_handles(self) -> List[Handle]:
        """The current server handles, index i = server i (to hand to servers that reach each other)."""
        return list(self._cluster.scheduler.servers)

    def server(self, index: int) -> Remote:
        return Remote(self._cluster.scheduler.servers[index], ServerAPI)

    def servers(self) -> List[Remote]:
        return [Remote(h, ServerAPI) for h in self._cluster.scheduler.servers]

    def beside_handles(self) -> List[Handle]:
        """The current server handles for calls beside the servers' others (``Handle.call_beside``: on Ray over
        direct links of their own, see :meth:`~xdl_ec.ps.running_cluster.RunningCluster.server_beside`)."""
        return [self._cluster.server_beside(i) for i in range(self.num_servers)]

    def agent(self, index: int, api: type, beside: bool = False) -> Remote:
        """Server ``index``'s agent, by the methods of ``api`` (its class); ``beside``: its calls beside the
        server's others."""
        handle = self._cluster.server_beside(index) if beside else self._cluster.scheduler.servers[index]
        return Remote(handle, api, agent=True, beside=beside)

    def workers(self) -> List[Remote]:
        """The live workers (a dead one is restarted by the driver after the recovery)."""
        return [Remote(w, WorkerAPI) for w in self._cluster.live_workers() if w is not None]

    def dead(self) -> Set[Tuple[str, int]]:
        return set(self._cluster.scheduler.dead)

    def dead_servers(self) -> List[int]:
        return sorted(index for role, index in self._cluster.scheduler.dead if role == "server")

    # ---- where training is ------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        return self._state.step

    @property
    def samples(self) -> int:
        return self._state.samples

    @property
    def finished(self) -> bool:
        """True once every worker's input is exhausted: the run has no step left."""
        return self._state.finished

    @property
    def total_steps(self) -> Optional[int]:
        return self._state.total_steps

    def reader_position(self) -> dict:
        """Where every worker's input is: {"step", "worker_batches", "worker_samples"} (JSON)."""
        return self._persistence.reader_position()

    def samples_since(self, worker_batches: Sequence[int]) -> int:
        return self._state.samples_since(worker_batches)

    def push_seqs(self) -> Tuple[list, list]:
        """(each worker's last push seqs as of its last answered step, those of restarted workers' predecessors)."""
        return list(self._state.push_seqs), list(self._state.unlogged_push_seqs)

    def dense_state(self) -> Tuple[List[np.ndarray], List[np.ndarray]]:
        return self._persistence.dense_state()

    def dense_variables(self) -> Tuple[list, list]:
        """The authoritative dense weights (trainable, then non-trainable such as BatchNorm statistics) and optimizer
        variables (TF variables, for checkpoint writers)."""
        dense = self._dense.take()
        return dense.variables, dense.optimizer.variables

    # ---- what a strategy may do -------------------------------------------------------------------------
    def load_dense_state(self, weights: Sequence[np.ndarray], optimizer_variables: Sequence[np.ndarray]) -> None:
        self._dense.take().load_state(weights, optimizer_variables)

    def replace_server(self, index: int) -> Handle:
        """A fresh, empty server ``index`` in place of a dead one, known to the workers and the driver."""
        return self._recovery.replace_server(index)

    def server_alive(self, index: int, timeout: float) -> bool:
        """Whether server ``index`` (its current handle) still answers a ping within ``timeout``."""
        return self._cluster.backend.alive(self._cluster.scheduler.servers[index], timeout)

    def kill(self, role: str, index: int) -> None:
        """Kills a server or worker for real (failure injection: its Ray process, or its object here)."""
        self._cluster.scheduler.kill(role, index)

    def replenish_spares(self) -> None:
        self._cluster.scheduler.replenish_spares()

    def quiesce(self) -> None:
        """Waits until every push sent so far is applied (and the strategy's own calls settled)."""
        self._cluster.quiesce()

    def wait(self, futures: Sequence[Any]) -> Tuple[List[Any], List[RoleLost]]:
        """Waits for every future: (results or None per future, confirmed RoleLost errors)."""
        return self._cluster.drain(futures)

    def confirm_failure(self, error: Any) -> Optional[RoleLost]:
        return self._cluster.scheduler.confirm_failure(error)
