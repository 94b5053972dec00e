"""Parameter servers and workers (issue 5): XDL's roles with two backends behind one interface.

- :class:`ParameterServer` (``server.py``): one embedding shard per table, pull/push by key batches, stats.
- :class:`PSClient` (``client.py``): routes keys by ``KeyRouter::ServerOf``, one batched request per server.
- :class:`Worker` (``worker.py``): its part of the data, the TF model over fed rows, prefetching pulls.
- :class:`Scheduler` (``scheduler.py``): cluster map, starts/replaces servers, decides deaths.
- :class:`LocalBackend` / :class:`RayBackend` (``backend.py``): where roles run; dead roles -> :class:`ServerLost` /
  :class:`WorkerLost`.
- dense parameters: ``dense_sync.py``; the driver loop and report: :class:`PSTrainer` (``training.py``).

Nothing here imports TensorFlow or Ray at import time.
"""

from .backend import CallTimeout, LocalBackend, RayBackend, RoleLost, ServerLost, WorkerLost, make_backend
from .client import PSClient, route
from .scheduler import Scheduler
from .server import ParameterServer, PushAck, TableSpec
from .training import ClusterConfig, PSTrainer

__all__ = ["CallTimeout", "ClusterConfig", "LocalBackend", "PSClient", "PSTrainer", "ParameterServer", "PushAck",
           "RayBackend", "RoleLost", "Scheduler", "ServerLost", "TableSpec", "WorkerLost", "make_backend", "route"]
