"""Parameter servers and workers: XDL's roles, with two backends behind one interface, and the driver.

- :class:`ParameterServer` (``server.py``): one embedding shard per table, pull/push by key batches, one agent;
- :class:`PSClient` (``client.py``): routes keys by ``KeyRouter::ServerOf``, one request per server;
- :class:`Worker` (``worker.py``): its own input, the job's model over fed rows, prefetching pulls;
- :class:`Scheduler` (``scheduler.py``): cluster map, starts/replaces servers, decides deaths;
- :class:`LocalBackend` / :class:`RayBackend` (``backend.py``): where roles run; dead roles -> :class:`ServerLost` /
  :class:`WorkerLost`; :class:`Remote` (``remote.py``) calls them by the interfaces of ``api.py``;
- the driver :class:`PSTrainer` (``training.py``) with its loops, recovery coordinator and the seams through which
  fault tolerance reaches it: :class:`FaultTolerance` (``fault_tolerance.py``), :class:`ClusterView`,
  :class:`ServerAgent` (``agent.py``).

Nothing here imports TensorFlow or Ray at import time, and nothing here knows a strategy (``xdl_ec.ft`` builds on
this package, never the reverse).
"""

from xdl_ec.ps.agent import ServerAgent
from xdl_ec.ps.backend import CallTimeout, LocalBackend, RayBackend, RoleLost, ServerLost, WorkerLost, make_backend
from xdl_ec.ps.client import PSClient, route
from xdl_ec.ps.cluster_view import ClusterView
from xdl_ec.ps.fault_tolerance import FailureRecord, FaultTolerance, NoFaultTolerance, Resume, Unrecoverable
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.scheduler import Scheduler
from xdl_ec.ps.server import ParameterServer, PushAck
from xdl_ec.ps.training import ClusterConfig, PSTrainer
from xdl_ec.ps.worker import RunSettings, Worker

__all__ = [
    "CallTimeout",
    "ClusterConfig",
    "ClusterView",
    "FailureRecord",
    "FaultTolerance",
    "LocalBackend",
    "NoFaultTolerance",
    "PSClient",
    "PSTrainer",
    "ParameterServer",
    "PushAck",
    "RayBackend",
    "Remote",
    "Resume",
    "RoleLost",
    "RunSettings",
    "Scheduler",
    "ServerAgent",
    "ServerLost",
    "Unrecoverable",
    "Worker",
    "WorkerLost",
    "make_backend",
    "route",
]
