"""ShardRestore: a replacement server's shards in restore mode, step (c) and (e) of docs/design/ec-protocol.md.

The replacement installs its recovered key index and starts empty; until the rebuild restores a data block, an
access that touches it decodes it on demand from the survivors (a degraded read), so training goes on at the failed
step while the stripes are rebuilt.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.ft.consistent_decode import consistent_decode, stripe_reads
from xdl_ec.ps.handle import Handle
from xdl_ec.sparse.table import EmbeddingTable


class ShardRestore:
    """The restore of server ``index`` of ``n`` under a (k, r) code, its shards' geometry ``tables`` {name:
    (block_slots, record_bytes)}; counts the blocks decoded on demand (``degraded_reads``)."""

    def __init__(self, index: int, n: int, k: int, r: int, tables: Mapping[str, Tuple[int, int]]) -> None:
        self.index, self.n, self.k, self.r = index, n, k, r
        self.tables = dict(tables)
        self.degraded_reads = 0  # blocks decoded on demand because an access touched them before the rebuild
        self._restoring: Dict[str, Tuple[Sequence[Handle], List[int]]] = {}  # table -> (servers, unavailable)
        self._stripe_layout: Optional[_core.StripeLayout] = None
        self._recoveries: Dict[str, _core.Recovery] = {}

    @property
    def active(self) -> bool:
        """Whether some shard is under restore (an access may have to decode the blocks it touches first)."""
        return bool(self._restoring)

    def begin(
        self,
        shard: _core.EmbeddingShard,
        table: str,
        keys: np.ndarray,
        slots: np.ndarray,
        high_water: int,
        servers: Sequence[Handle],
        unavailable: Sequence[int],
    ) -> int:
        """Installs the recovered key index of ``table`` in ``shard``; a block touched before the rebuild restores
        it is decoded on demand from ``servers`` (degraded read). Returns the number of blocks to restore."""
        down = sorted(int(u) for u in unavailable)

        def fault(block: int) -> np.ndarray:  # a degraded read: decoded from versions the parity agrees with
            self.degraded_reads += 1
            return self.decode_own_blocks(table, [block], servers, down)[0]

        shard.begin_restore(keys, slots, int(high_water), fault)
        self._restoring[table] = (servers, down)
        return int(shard.missing_blocks)

    def decode_own_blocks(
        self, table: str, blocks: Sequence[int], servers: Sequence[Handle], down: List[int]
    ) -> List[np.ndarray]:
        """This server's lost data ``blocks`` of ``table``, decoded together from consistent fragments of the
        survivors (one round of reads: one call per survivor)."""
        block_slots, record_bytes = self.tables[table]
        recovery, layout, index = self._recovery(table), self._layout(), self.index
        stripes = [layout.data_slot(index, int(block))[0] for block in blocks]
        return consistent_decode(
            servers,
            table,
            block_slots,
            lambda d, p: [recovery.decode_data_block(index, int(block), down, d, p) for block in blocks],
            reads=stripe_reads(recovery, stripes, down, record_bytes),
        )[0]

    def restore_touched(self, table: EmbeddingTable, keys: np.ndarray) -> None:
        """Under the server lock, before an access of ``keys`` to a shard under restore: the missing blocks
        holding their rows are decoded together and restored (one round of reads) rather than faulted in one by
        one, each fault a round of reads of its own on the step's path (on Ray, calls to every survivor)."""
        shard = table.shard
        if table.name not in self._restoring or not shard.missing_blocks:
            return
        blocks = [int(block) for block in shard.missing_blocks_of(keys)]
        if len(blocks) < 2:
            return  # none, or one: the fault does the same
        servers, down = self._restoring[table.name]
        for block, data in zip(blocks, self.decode_own_blocks(table.name, blocks, servers, down)):
            if shard.restore_block(block, data):
                self.degraded_reads += 1

    def _layout(self) -> _core.StripeLayout:
        if self._stripe_layout is None:
            self._stripe_layout = _core.StripeLayout(self.n, self.k, self.r)
        return self._stripe_layout

    def _recovery(self, table: str) -> _core.Recovery:
        """The C++ Recovery of ``table``'s geometry (kept: it caches decode tables per erasure pattern; thread-safe,
        so accesses and the rebuild share it)."""
        if table not in self._recoveries:
            self._recoveries[table] = _core.Recovery(self.n, self.k, self.r, *self.tables[table])
        return self._recoveries[table]
