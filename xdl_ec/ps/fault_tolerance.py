"""FaultTolerance: the one seam through which a strategy (``--ft none|ckpt|cpr|ec``) meets the training driver.

The driver (:class:`xdl_ec.ps.training.PSTrainer`, its :class:`~xdl_ec.ps.training_loop.TrainingLoop` and
:class:`~xdl_ec.ps.recovery_coordinator.RecoveryCoordinator`) owns the step loop; a strategy owns what happens around
it, and sees the cluster only through a :class:`~xdl_ec.ps.cluster_view.ClusterView`. Every hook is declared here, with
its default:

- ``attach(view)`` once the cluster is up and before the first step (e.g. ``ec`` gives every server its parity
  agent, ``ckpt`` takes the step-0 checkpoint, ``cpr`` starts its access counters);
- ``after_step(step)`` at every step boundary where no push is in flight (sync mode: after the barrier; async mode:
  whenever no step is outstanding), e.g. a periodic save;
- ``wants_boundary(step)`` (async mode): True holds new steps until none is in flight, so ``after_step`` comes;
- ``settle()`` completes the strategy's own calls in flight (run by ``ClusterView.quiesce``);
- ``recover(lost)`` when the scheduler has confirmed that a server (or worker) is dead. It replaces and rebuilds
  what was lost and returns a :class:`Resume` telling the driver where training goes on: at the failed step
  (``ec``, ``cpr``: nothing is rolled back) or at an earlier step with the readers rewound (``ckpt``). It raises
  :class:`Unrecoverable` naming the lost roles when it cannot make the model exact or has nothing to recover from;
- ``rebuilding``: True while a recovery still rebuilds in the background (the driver starts no spare meanwhile);
- ``report()`` the strategy's fields of the report: ``ft``, ``failures`` (one :class:`FailureRecord` each),
  ``lost_samples``, ``checkpoint_seconds``, ``parity_bytes``;
- ``close()`` at the end of the run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple


class Unrecoverable(RuntimeError):
    """The strategy cannot bring the model back exactly: names the lost roles and what the strategy tolerates."""


@dataclasses.dataclass(frozen=True)
class Resume:
    """Where training goes on after a recovery.

    ``step``: the last step whose effects the cluster now holds (the driver continues with ``step + 1``);
    ``reader_position``: {"worker_batches": [...]} to read from next (None: unchanged, the failed step is retried);
    ``lost_samples``: samples whose updates were dropped by this recovery (``cpr``), or re-trained (``ckpt``).
    """

    step: int
    reader_position: Optional[Any] = None
    lost_samples: int = 0


@dataclasses.dataclass
class FailureRecord:
    """One failure as the report shows it."""

    step: int
    role: str
    index: int
    detect_seconds: float = 0.0
    rebuild_seconds: float = 0.0
    samples_per_sec_during_rebuild: Optional[float] = None
    lost_samples: int = 0
    seconds_to_full_redundancy: Optional[float] = None  # from the loss to every stripe redundant again (ec)
    lost_updates: int = 0  # a lost worker's cached gradients that no server had seen (worker caches)
    # ec: of the seconds to full redundancy, those in which one more loss was fatal (r servers down), whether that
    # window kept --rebuild-within, the seconds training's steps were held to keep it, and the recovery's pause
    # before the rebuild (drain, rollback, key index, replay: no pacing shortens it)
    vulnerable_seconds: Optional[float] = None
    vulnerable_within_bound: Optional[bool] = None
    training_held_seconds: float = 0.0
    recovery_pause_seconds: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


class FaultTolerance:
    """Base of the strategies; subclasses set ``name`` and override the hooks they need."""

    name: str = ""

    def __init__(self) -> None:
        self.failures: List[FailureRecord] = []
        self.checkpoint_seconds = 0.0
        # the ClusterView, from attach on (typed in the strategies: the view's parts import this module)
        self.view: Any = None

    def attach(self, view: Any) -> None:
        self.view = view

    #: whether :meth:`reattach` can take over a run whose driver died (docs/design/reattach.md)
    reattaches = False

    @property
    def link_secret(self) -> Any:
        """The secret of the strategy's own links between servers (None: it has none), which a reattaching driver
        gets back from the run record."""
        return None

    def reattach(self, view: Any, link_secret: Any) -> None:
        """Takes over the servers of a run whose driver died, as they are (``link_secret``: this strategy's from the
        run record), instead of :meth:`attach`'s setting them up."""
        raise ValueError(f"--ft {self.name}: a driver of this strategy cannot reattach to a run (use --ft ec or none)")

    def after_step(self, step: int) -> None:
        """Called at step boundaries with no push in flight."""

    def wants_boundary(self, step: int) -> bool:
        return False

    def settle(self) -> None:
        """Completes this strategy's own calls in flight."""

    def recover(self, lost: BaseException) -> Resume:
        raise Unrecoverable(f"{lost} ({self.name or type(self).__name__} keeps no redundancy)") from lost

    @property
    def rebuilding(self) -> bool:
        return False

    def finish_rebuild(self) -> None:
        """Completes a rebuild under way now, on the caller's thread (before a save reads every server)."""

    def resumed(self, step: int) -> None:
        """The run continues a save of ``step`` whose rows are now loaded (after :meth:`attach`): a strategy
        whose redundancy is a copy of the state takes a fresh one."""

    def catch_up(self) -> None:
        """Waits until the redundancy has taken in every change the servers made so far, where it trails them: a
        bulk load's pace, so that what is in flight stays one chunk's (a strategy that keeps nothing in flight has
        nothing to wait for)."""

    @property
    def stripe_code(self) -> Optional[Tuple[int, int]]:
        """(k, r) when the servers form stripes of k + r members of which any r may be lost together (the
        placement then keeps at most r of a stripe on one node, :mod:`xdl_ec.ps.placement`); None otherwise."""
        return None

    @property
    def reforms_on_resize(self) -> bool:
        """True when this strategy's redundancy depends on the server count (``ec``'s stripes): a resize then moves
        every row onto fresh servers under a :meth:`successor`, and :meth:`retire`s this one first."""
        return False

    def retire(self) -> None:
        """A resize has read every row of this strategy's servers and replaces them: stop its threads."""

    def successor(self, code: Optional[Tuple[int, int]] = None) -> "FaultTolerance":
        """The strategy of the resized cluster (attached to it by the caller); ``code``: its stripes' (k, r) when
        the resize asks another (None: this one's)."""
        raise NotImplementedError(f"{type(self).__name__} does not re-form on a resize")

    def parity_bytes(self) -> int:
        return 0

    def report(self) -> Dict[str, Any]:
        return self._report(self.parity_bytes())

    def _report(self, parity_bytes: int) -> Dict[str, Any]:
        """The common report fields, with ``parity_bytes`` already known (a subclass may read it along with
        other figures in one round of calls)."""
        return {
            "ft": self.name,
            "failures": [f.to_json() for f in self.failures],
            "lost_samples": sum(f.lost_samples for f in self.failures),
            "lost_updates": sum(f.lost_updates for f in self.failures),
            "checkpoint_seconds": self.checkpoint_seconds,
            "parity_bytes": parity_bytes,
        }

    def close(self) -> None:
        """The run ended (successfully or not)."""


class NoFaultTolerance(FaultTolerance):
    """``--ft none``: a dead role stops training with the driver's clear error."""

    name = "none"
    reattaches = True

    def reattach(self, view: Any, link_secret: Any) -> None:
        self.attach(view)  # the servers hold nothing of a strategy

    def recover(self, lost: BaseException) -> Resume:
        raise Unrecoverable(f"{lost} (--ft none keeps no redundancy: use --ft ec, ckpt or cpr)") from lost
