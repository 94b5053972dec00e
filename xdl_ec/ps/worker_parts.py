"""WorkerParts: the parts a worker is made of, each with one job, as its training step works with them."""

from __future__ import annotations

import dataclasses

from xdl_ec.ps.batch_rows import BatchRows
from xdl_ec.ps.pushes_in_flight import PushesInFlight
from xdl_ec.ps.step_client import StepClient
from xdl_ec.ps.step_stats import StepStats
from xdl_ec.ps.worker_input import WorkerInput
from xdl_ec.ps.worker_model import WorkerModel
from xdl_ec.ps.worker_servers import WorkerServers


@dataclasses.dataclass(frozen=True)
class WorkerParts:
    """A worker's ``client`` of the rows (servers', or tables in this process), its ``input``, its dense ``model``
    and step, its batches' ``rows``, its ``pushes`` in flight, its ``servers`` and their links, and its step
    ``stats``."""

    client: StepClient
    input: WorkerInput
    model: WorkerModel
    rows: BatchRows
    pushes: PushesInFlight
    servers: WorkerServers
    stats: StepStats
