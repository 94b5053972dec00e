"""``make_strategy(name, args)``: the :class:`~xdl_ec.ft.strategy.FaultTolerance` of ``--ft none|ckpt|cpr|ec``.

``args`` is anything with the strategy flags as attributes (the CLI's argparse namespace, or a
``types.SimpleNamespace`` in tests); missing attributes take the defaults below. Strategy modules are imported
lazily: ``ec`` lives in :mod:`xdl_ec.ft.ec_strategy`, written separately.
"""

from __future__ import annotations

import importlib
from typing import Any

from .strategy import FaultTolerance, NoFaultTolerance

STRATEGIES = ("none", "ckpt", "cpr", "ec")

DEFAULTS = {"code": "4,1", "ckpt_interval": "auto", "ckpt_dir": None, "cpr_pls": 0.02, "cpr_mode": "mfu",
            "cpr_interval": None, "mtbf": None, "seed": 0, "rebuild_share": 0.05}


def strategy_arg(args: Any, name: str) -> Any:
    """``args.<name>``, or the default when absent or None."""
    value = getattr(args, name, None)
    return DEFAULTS.get(name) if value is None else value


def make_strategy(name: str, args: Any = None) -> FaultTolerance:
    """The strategy ``name`` configured from ``args``; ValueError names a bad value and the choices."""
    if name not in STRATEGIES:
        raise ValueError(f"--ft: must be one of {', '.join(STRATEGIES)}, got {name!r}")
    if name == "none":
        return NoFaultTolerance()
    if name == "ckpt":
        from .ckpt_strategy import Checkpointing

        return Checkpointing.from_args(args)
    if name == "cpr":
        from .cpr_strategy import PartialRecovery

        return PartialRecovery.from_args(args)
    try:
        module = importlib.import_module(".ec_strategy", __package__)
    except ModuleNotFoundError as err:
        if err.name != f"{__package__}.ec_strategy":
            raise
        raise ValueError("--ft ec: the erasure-coded strategy (xdl_ec.ft.ec_strategy) is not part of this build; "
                         "use --ft none, ckpt or cpr") from None
    cls = module.ErasureCoded
    return cls.from_args(args) if hasattr(cls, "from_args") else cls(args)
