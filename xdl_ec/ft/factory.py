"""``make_strategy(config)``: the :class:`~xdl_ec.ps.fault_tolerance.FaultTolerance` of a strategy config."""

from __future__ import annotations

from xdl_ec.ft.ckpt_strategy import Checkpointing
from xdl_ec.ft.configs import CkptConfig, CprConfig, EcConfig, StrategyConfig
from xdl_ec.ft.cpr_strategy import PartialRecovery
from xdl_ec.ft.ec_strategy import ErasureCoded
from xdl_ec.ps.fault_tolerance import FaultTolerance, NoFaultTolerance


def make_strategy(config: StrategyConfig) -> FaultTolerance:
    """None -> no fault tolerance; an EcConfig, CkptConfig or CprConfig -> its strategy."""
    if config is None:
        return NoFaultTolerance()
    if isinstance(config, EcConfig):
        strategy = ErasureCoded(
            *config.code,
            rebuild_share=config.rebuild_share,
            rebuild=config.rebuild,
            rebuild_keeps=config.rebuild_keeps,
            urgent_rebuild=config.urgent_rebuild,
            rebuild_within=config.rebuild_within,
        )
        strategy.scrub = config.scrub
        return strategy
    if isinstance(config, CkptConfig):
        return Checkpointing(config.interval, config.directory, config.mtbf, config.keep)
    if isinstance(config, CprConfig):
        return PartialRecovery(
            config.pls,
            config.mtbf,
            config.interval_steps,
            config.mode,
            config.fraction,
            config.full_every,
            config.directory,
            config.seed,
        )
    raise TypeError(f"config: expected None, EcConfig, CkptConfig or CprConfig, got {type(config).__name__}")
