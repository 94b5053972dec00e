"""Table: how one embedding table is built (name, row width, sparse optimizer, initializer, seed), the one
description every layer uses: the job API declares it, parameter servers build their shards from it, fault
tolerance reads its geometry, and :meth:`Table.shard_config` is the single conversion to the core's
``ShardConfig``. Frozen and picklable, so it travels to Ray actors as is."""

from __future__ import annotations

import dataclasses
from typing import Any, Union

from xdl_ec import _core
from xdl_ec.settings import checks
from . import init, optim

MAX_DIM = 1 << 16
MAX_BLOCK_SLOTS = 1 << 24


@dataclasses.dataclass(frozen=True)
class Table:
    """An embedding table: int64 ids -> ``dim`` floats plus the optimizer's state, rows created on first use from
    (``seed``, id). ``optimizer`` / ``initializer``: an object of :mod:`xdl_ec.optim` / :mod:`xdl_ec.init` or its
    name. ``block_slots``: slots per block of the shard (the unit of parity stripes and of a rebuild)."""

    name: str
    dim: int
    optimizer: Union[str, optim.Optimizer] = "adagrad"
    initializer: Union[str, init.Initializer] = "truncated_normal"
    seed: int = 0
    block_slots: int = 1024

    def __post_init__(self) -> None:
        checks.non_empty_str("Table name", self.name)
        where = f"table {self.name!r}"
        checks.integer(f"{where}: dim", self.dim, 1, MAX_DIM)
        checks.integer(f"{where}: seed", self.seed, 0, (1 << 64) - 1)
        checks.integer(f"{where}: block_slots", self.block_slots, 1, MAX_BLOCK_SLOTS)
        try:
            object.__setattr__(self, "optimizer", optim.get(self.optimizer))
            object.__setattr__(self, "initializer", init.get(self.initializer))
        except (TypeError, ValueError) as err:
            raise type(err)(f"{where}: {err}") from None

    def shard_config(self) -> Any:
        """The core's ``ShardConfig`` of this table (validated by the core)."""
        config = _core.ShardConfig()
        config.dim = int(self.dim)
        config.seed = int(self.seed)
        config.block_slots = int(self.block_slots)
        config.optimizer = self.optimizer.to_config()
        config.initializer = self.initializer.to_config()
        return config

    def describe(self) -> dict:
        """A JSON-friendly description (reports, checkpoint manifests)."""
        return {"name": self.name, "dim": self.dim, "optimizer": repr(self.optimizer),
                "initializer": repr(self.initializer), "seed": self.seed, "block_slots": self.block_slots}
