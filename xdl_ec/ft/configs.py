"""The fault-tolerance strategies' settings, each checked once when it is made (the CLI maps its flags onto
these in one function; the job API's ``Cluster`` builds them from its keywords)."""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple, Union

from xdl_ec.ft.rebuild_deadline import DEFAULT_REBUILD_WITHIN
from xdl_ec.ft.rebuild_governor import DEFAULT_REBUILD_KEEPS
from xdl_ec.settings import checks
from xdl_ec.settings.interval import IntervalPolicy, parse_interval
from xdl_ec.settings.stripe_code import parse_code

STRATEGIES = ("none", "ckpt", "cpr", "ec")
CPR_MODES = ("mfu", "ssu")
REBUILD_MODES = ("background", "boundary")
URGENT_REBUILDS = ("flat-out", "paced")  # a background rebuild when one more loss would be fatal


@dataclasses.dataclass(frozen=True)
class EcConfig:
    """``--ft ec``: a (k, r) code over the servers; ``rebuild``: "background" (a thread beside the steps, flat
    out while a core is idle or one more loss would be fatal) or "boundary" (at step boundaries);
    ``rebuild_share``: the share of wall time a rebuild keeps to while it would slow training, in (0, 1];
    ``rebuild_keeps``: a background rebuild takes more while training keeps this share of its samples/s, in
    [0, 1) (0: exactly ``rebuild_share``; :mod:`xdl_ec.ft.rebuild_governor`);
    ``urgent_rebuild``: a background rebuild while one more loss would be fatal (r servers down) runs "flat-out"
    (the shortest window without redundancy; training slows meanwhile) or "paced" like any other (training keeps
    its speed; the window is longer);
    ``rebuild_within``: the bound in seconds on the window in which one more loss is fatal, from the loss to full
    redundancy (the rebuild works more, and holds training's steps, as its measured progress demands;
    :mod:`xdl_ec.ft.rebuild_deadline`);
    ``scrub``: re-encode every stripe when the run reports (``xdl-ec verify``)."""

    code: Tuple[int, int] = (4, 1)
    rebuild_share: float = 0.05
    scrub: bool = False
    rebuild: str = "background"
    rebuild_keeps: float = DEFAULT_REBUILD_KEEPS
    urgent_rebuild: str = "flat-out"
    rebuild_within: float = DEFAULT_REBUILD_WITHIN

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", parse_code(self.code))
        checks.one_of("urgent_rebuild", self.urgent_rebuild, URGENT_REBUILDS)
        checks.positive_number("rebuild_within", self.rebuild_within)
        checks.number("rebuild_keeps", self.rebuild_keeps, 0.0, 1.0, high_open=True)
        checks.one_of("rebuild", self.rebuild, REBUILD_MODES)
        checks.number("rebuild_share", self.rebuild_share, 0.0, 1.0, low_open=True)
        checks.instance("scrub", self.scrub, bool)


@dataclasses.dataclass(frozen=True)
class CkptConfig:
    """``--ft ckpt``: full checkpoints every ``interval`` ("N" steps, "Ns" seconds, "auto": Young's interval from
    the measured save cost and ``mtbf``) into ``directory`` (None: a temporary one), the last ``keep`` kept."""

    interval: Union[str, IntervalPolicy] = "auto"
    directory: Optional[str] = None
    mtbf: Optional[float] = None
    keep: int = 2

    def __post_init__(self) -> None:
        if self.mtbf is not None:
            checks.positive_number("mtbf", self.mtbf)
        if not isinstance(self.interval, IntervalPolicy):
            try:
                parse_interval(str(self.interval), self.mtbf)
            except ValueError as err:
                raise ValueError(f"ckpt interval: {err}") from None
        checks.positive_int("keep", self.keep)


@dataclasses.dataclass(frozen=True)
class CprConfig:
    """``--ft cpr`` (partial recovery): checkpoint interval from the target portion of lost samples ``pls`` and
    ``mtbf`` (``2 * servers * mtbf * pls`` seconds) or every ``interval_steps``; rows saved between full saves by
    ``mode`` (mfu: most updated; ssu: of sub-sampled batches)."""

    pls: float = 0.02
    mtbf: Optional[float] = None
    interval_steps: Optional[int] = None
    mode: str = "mfu"
    fraction: float = 0.1
    full_every: int = 10
    directory: Optional[str] = None
    seed: int = 0

    def __post_init__(self) -> None:
        checks.number("pls", self.pls, 0.0, 1.0, low_open=True, high_open=True)
        if self.mtbf is not None:
            checks.positive_number("mtbf", self.mtbf)
        if self.interval_steps is not None:
            checks.positive_int("interval_steps", self.interval_steps)
        if self.interval_steps is None and self.mtbf is None:
            raise ValueError(
                "cpr: the interval comes from pls and mtbf (2 * servers * MTBF * PLS); give mtbf, or interval_steps"
            )
        checks.one_of("cpr mode", self.mode, CPR_MODES)
        checks.number("fraction", self.fraction, 0.0, 1.0, low_open=True)
        checks.positive_int("full_every", self.full_every)
        checks.non_negative_int("seed", self.seed)


StrategyConfig = Union[None, EcConfig, CkptConfig, CprConfig]
