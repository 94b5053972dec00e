"""ResizeTrainer: what a resize reads and changes of the run whose servers it resizes (the driver's trainer).

A Protocol rather than the trainer's class: the resize and its background move need a dozen of its members, and
naming them here keeps the move's code independent of how the driver's loop is built.
"""

from __future__ import annotations

from typing import Any, List, Optional, Protocol, Sequence, Tuple

from xdl_ec.model.job_spec import JobSpec
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.ps.client import PSClient
from xdl_ec.ps.cluster_view import ClusterView
from xdl_ec.ps.fault_tolerance import FaultTolerance
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.remote import Remote
from xdl_ec.ps.scheduler import Scheduler


class RoleKiller(Protocol):
    """The part of a backend a resize uses: stopping a role it started (a server left empty, a fresh one unused)."""

    def kill(self, handle: Any) -> None: ...


class ReformingStrategy(Protocol):
    """A strategy that re-forms its redundancy on a resize (``reforms_on_resize``: ec's stripes): the rows loaded
    onto the fresh servers are durable once it drained, and only then may the old servers stop."""

    def drain(self) -> None: ...


class ResizeTrainer(Protocol):
    """The run a resize works on: its servers (``scheduler``), strategy, clients and step, and the calls that leave
    nothing in flight at a step boundary."""

    job: JobSpec
    cluster: Any  # the run's ClusterConfig (a frozen dataclass): a resize replaces it with the new count
    scheduler: Scheduler
    strategy: FaultTolerance
    backend: RoleKiller
    client: PSClient
    view: ClusterView

    @property
    def step(self) -> int: ...

    @property
    def total_steps(self) -> Optional[int]: ...

    @property
    def link_secret(self) -> Optional[JobSecret]: ...  # on Ray: the run's, proving the driver's links (else None)

    def quiesce(self, settle: bool = True) -> None: ...

    def live_workers(self) -> List[Optional[Handle]]: ...

    def worker(self, index: int) -> Remote: ...

    def server_beside(self, index: int) -> Handle: ...

    def drain(self, futures: Sequence[Any]) -> Tuple[List[Any], List[BaseException]]: ...


def wait_answers(trainer: ResizeTrainer, futures: Sequence[Any]) -> List[Any]:
    """The answers of ``futures`` (calls of the run's roles), in order; the first loss among them is raised (a
    server's is confirmed by the scheduler, and its strategy recovers it at the boundary)."""
    answers, lost = trainer.drain(futures)
    if lost:
        raise lost[0]
    return answers
