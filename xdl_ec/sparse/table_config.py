"""Table: how one embedding table is built (name, row width, sparse optimizer, initializer, seed), the one
description every layer uses: the job API declares it, parameter servers build their shards from it, fault
tolerance reads its geometry, and :meth:`Table.shard_config` is the single conversion to the core's
``ShardConfig``. Frozen and picklable, so it travels to Ray actors as is."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union, cast

from xdl_ec import _core
from xdl_ec.settings import checks
from xdl_ec.sparse import init, optim
from xdl_ec.sparse.row_rules import Admit, Evict, row_policy_config

MAX_DIM = 1 << 16
MAX_BLOCK_SLOTS = 1 << 24


@dataclasses.dataclass(frozen=True)
class Table:
    """An embedding table: int64 ids -> ``dim`` floats plus the optimizer's state, rows created on first use from
    (``seed``, id). ``optimizer`` / ``initializer``: an object of :mod:`xdl_ec.optim` / :mod:`xdl_ec.init` or its
    name. ``block_slots``: slots per block of the shard (the unit of parity stripes and of a rebuild).
    ``admit`` / ``evict``: the rules that bound the table (:mod:`xdl_ec.sparse.row_rules`); None: every id gets a
    row on first use and keeps it."""

    name: str
    dim: int
    optimizer: Union[str, optim.Optimizer] = "adagrad"
    initializer: Union[str, init.Initializer] = "truncated_normal"
    seed: int = 0
    block_slots: int = 1024
    admit: Optional[Admit] = None
    evict: Optional[Evict] = None

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
        if self.admit is not None and not isinstance(self.admit, Admit):
            raise TypeError(f"{where}: admit must be an xdl_ec.Admit or None, got {type(self.admit).__name__}")
        if self.evict is not None and not isinstance(self.evict, Evict):
            raise TypeError(f"{where}: evict must be an xdl_ec.Evict or None, got {type(self.evict).__name__}")
        if self.evict is not None and self.evict.max_rows is not None and self.evict.max_rows < self.block_slots:
            raise ValueError(
                f"{where}: Evict max_rows = {self.evict.max_rows} is below one block (block_slots = "
                f"{self.block_slots}); raise max_rows or lower block_slots"
            )

    @property
    def bounded(self) -> bool:
        """Whether the table has admission or eviction rules."""
        return self.admit is not None or self.evict is not None

    def shard_config(self, servers: int = 1) -> Any:
        """The core's ``ShardConfig`` of this table's shard on one of ``servers`` servers (validated by the core;
        the servers matter only to an ``Evict(max_rows=...)``, shared evenly)."""
        config = _core.ShardConfig()
        config.dim = int(self.dim)
        config.seed = int(self.seed)
        config.block_slots = int(self.block_slots)
        # __post_init__ made both objects (a name is looked up there)
        config.optimizer = cast(optim.Optimizer, self.optimizer).to_config()
        config.initializer = cast(init.Initializer, self.initializer).to_config()
        if self.bounded:
            config.row_policy = row_policy_config(
                self.name, self.admit, self.evict, self.block_slots, checks.positive_int("servers", servers)
            )
        return config

    def describe(self) -> dict:
        """A JSON-friendly description (reports, checkpoint manifests)."""
        out = {
            "name": self.name,
            "dim": self.dim,
            "optimizer": repr(self.optimizer),
            "initializer": repr(self.initializer),
            "seed": self.seed,
            "block_slots": self.block_slots,
        }
        if self.admit is not None:  # only then: descriptions of tables without rules stay as they were
            out["admit"] = self.admit.describe()
        if self.evict is not None:
            out["evict"] = self.evict.describe()
        return out
