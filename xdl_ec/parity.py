"""Parity groups: N embedding shards of one table protected by an erasure code over their record bytes.

Every pull that inserts, push, erase and load routes its slot deltas to the parity holders of the
rotated stripes (RAID-5/6 style) and applies them in place, so up to ``r`` lost servers are rebuilt bit
for bit (keys, values, optimizer state) while training continues: operations on a lost server install
a replacement whose missing blocks are decoded on demand (degraded reads), and the rebuild proceeds
stripe by stripe (``rebuild_step``) or at once (``rebuild``). All logic is in C++
(``cpp/include/xdl_ec/parity_group.h``); this module checks and converts arguments.
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core, init, optim
from .table import as_keys, as_rows

__all__ = ["ParityGroup", "ScrubMismatch", "StripeLayout", "server_of"]

StripeLayout = _core.StripeLayout

_STATES = {
    _core.ServerState.HEALTHY: "healthy",
    _core.ServerState.LOST: "lost",
    _core.ServerState.RESTORING: "restoring",
}


class ScrubMismatch(NamedTuple):
    """A stored parity block that disagrees with the parity re-encoded from its stripe's data."""

    stripe: int
    parity_member: int
    server: int
    block: int


def _int(name: str, value: Any, low: int, high: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be {'in [%d, %d]' % (low, high) if high is not None else '>= %d' % low}, got {value}")
    return value


def server_of(keys: Any, n: int) -> np.ndarray:
    """The server owning each key among ``n`` (a mixed hash, stable across runs): int32[len(keys)]."""
    return _core.server_of(as_keys(keys), _int("n", n, 1))


class ParityGroup:
    """``n`` servers, each with one shard of a table, protected by a (k data, r parity) erasure code.

    The caller says which server each operation goes to (:func:`server_of` is the usual routing).
    ``kill`` drops servers with everything they held; more than ``r`` lost servers is refused with a
    ValueError ("unrecoverable: ...") and changes nothing. ``scrub`` re-encodes every stripe and lists
    the parity blocks that disagree. ``shard(s)`` / ``parity_store(s)`` give raw access for byte
    comparisons (writes through them bypass the parity, which is how tests inject corruption).
    """

    def __init__(
        self,
        n: int,
        k: int,
        r: int,
        dim: int,
        optimizer: Union[str, optim.Optimizer] = "adagrad",
        initializer: Union[str, init.Initializer] = "truncated_normal",
        seed: int = 0,
        block_slots: int = 1024,
    ) -> None:
        config = _core.ShardConfig()
        config.dim = _int("dim", dim, 1, 1 << 16)
        config.seed = _int("seed", seed, 0, (1 << 64) - 1)
        config.block_slots = _int("block_slots", block_slots, 1, 1 << 24)
        config.optimizer = optim.get(optimizer).to_config()
        config.initializer = init.get(initializer).to_config()
        self._group = _core.ParityGroup(_int("n", n, 1), _int("k", k, 1), _int("r", r, 1), config)
        self._dim = config.dim

    # ---- geometry ------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self._group.n

    @property
    def k(self) -> int:
        return self._group.k

    @property
    def r(self) -> int:
        return self._group.r

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def layout(self) -> "_core.StripeLayout":
        return self._group.layout

    @property
    def record_bytes(self) -> int:
        return self._group.record_bytes

    @property
    def block_bytes(self) -> int:
        return self._group.block_bytes

    @property
    def background_apply(self) -> bool:
        """True: a background thread applies parity updates, off the push's critical path (every read of
        parity, decode and scrub waits for them first). False (default): applied before each call returns."""
        return self._group.background_apply

    @background_apply.setter
    def background_apply(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise TypeError(f"background_apply must be a bool, got {type(on).__name__}")
        self._group.background_apply = on

    def server_of(self, keys: Any) -> np.ndarray:
        """The server owning each key in this group: int32[len(keys)]."""
        return server_of(keys, self.n)

    def _server(self, server: Any) -> int:
        return _int("server", server, 0, self.n - 1)

    # ---- training path -------------------------------------------------------------------------
    def pull(self, server: int, keys: Any) -> np.ndarray:
        """Rows of ``keys`` on ``server`` (inserting missing ones): float32[len(keys), dim]."""
        return self._group.pull(self._server(server), as_keys(keys))

    def find(self, server: int, keys: Any) -> Tuple[np.ndarray, np.ndarray]:
        """(rows, found) without inserting; rows of missing keys are zeros."""
        return self._group.find(self._server(server), as_keys(keys))

    def push(self, server: int, keys: Any, grads: Any, step: int) -> None:
        """One optimizer step on ``server`` (duplicate keys summed); ``step`` is the 1-based global step."""
        keys = as_keys(keys)
        grads = as_rows(grads, len(keys), self._dim, "grads", "dim")
        self._group.push(self._server(server), keys, grads, _int("step", step, 1))

    def erase(self, server: int, keys: Any) -> int:
        """Removes the rows of ``keys`` that exist on ``server``; returns how many."""
        return self._group.erase(self._server(server), as_keys(keys))

    def load(self, server: int, keys: Any, values: Any, state: Any = None) -> None:
        """Inserts or overwrites rows on ``server``; ``state=None`` gives them fresh optimizer state."""
        keys = as_keys(keys)
        values = as_rows(values, len(keys), self._dim, "values", "dim")
        if state is not None:
            state = as_rows(state, len(keys), self._group.state_floats, "state", "state_floats")
        self._group.load(self._server(server), keys, values, state)

    # ---- failures and recovery -----------------------------------------------------------------
    def kill(self, servers: Union[int, Sequence[int]]) -> None:
        """Drops ``servers`` (shard and parity store, everything they held)."""
        if isinstance(servers, numbers.Integral) and not isinstance(servers, bool):
            servers = [servers]
        elif isinstance(servers, np.ndarray):
            servers = servers.tolist()
        if isinstance(servers, (str, bytes)) or not isinstance(servers, Sequence):
            raise TypeError(f"servers must be an int or a sequence of ints, got {type(servers).__name__}")
        self._group.kill([self._server(s) for s in servers])

    def begin_rebuild(self) -> None:
        """Decodes the lost servers' key indexes and installs their replacements (restore mode)."""
        self._group.begin_rebuild()

    def rebuild_step(self, max_stripes: int = 1) -> int:
        """Rebuilds up to ``max_stripes`` stripes; returns how many remain (0: every server healthy)."""
        return self._group.rebuild_step(_int("max_stripes", max_stripes, 0))

    def finish_rebuild(self) -> None:
        """Rebuilds everything still missing; afterwards every server is healthy."""
        self._group.finish_rebuild()

    def rebuild(self) -> None:
        """Rebuilds every lost server at once (begin + finish)."""
        self._group.begin_rebuild()
        self._group.finish_rebuild()

    @property
    def rebuild_remaining(self) -> int:
        return self._group.rebuild_remaining

    def state(self, server: int) -> str:
        """'healthy', 'lost' or 'restoring'."""
        return _STATES[self._group.state(self._server(server))]

    def unavailable_servers(self) -> List[int]:
        """Servers lost or being rebuilt."""
        return list(self._group.unavailable_servers())

    # ---- verification and stats ----------------------------------------------------------------
    def scrub(self) -> List[ScrubMismatch]:
        """Every stored parity block that disagrees with its stripe's data (empty when consistent)."""
        return [ScrubMismatch(*m) for m in self._group.scrub()]

    def stats(self) -> Dict[str, Any]:
        """Per-server data/parity bytes, delta bytes received and rows, plus totals and overhead."""
        stats = dict(self._group.stats())
        data = stats["total_data_bytes"]
        stats["parity_overhead"] = stats["total_parity_bytes"] / data if data else 0.0
        return stats

    def num_data_blocks(self, server: int) -> int:
        return self._group.num_data_blocks(self._server(server))

    def num_parity_blocks(self, server: int) -> int:
        return self._group.num_parity_blocks(self._server(server))

    def read_data_block(self, server: int, block: int) -> np.ndarray:
        """Bytes of a data block (zeros past the end); on a restoring server this decodes it first."""
        return self._group.read_data_block(self._server(server), _int("block", block, 0))

    def read_parity_block(self, server: int, block: int) -> np.ndarray:
        """Bytes of a parity block (zeros when never written)."""
        return self._group.read_parity_block(self._server(server), _int("block", block, 0))

    def shard(self, server: int) -> Optional["_core.EmbeddingShard"]:
        """The server's shard, None while lost. Writes through it bypass the parity."""
        return self._group.shard(self._server(server))

    def parity_store(self, server: int) -> Optional["_core.ParityStore"]:
        """The server's parity store, None while lost. Writes through it bypass the parity."""
        return self._group.parity_store(self._server(server))

    def __repr__(self) -> str:
        return f"ParityGroup(n={self.n}, k={self.k}, r={self.r}, dim={self._dim}, unavailable={self.unavailable_servers()})"
