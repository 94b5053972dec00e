"""FragmentReads: what a server answers a decode of the survivors (a recovery's, a rebuild's, a degraded read's):
its data blocks with the delta seq they are at and its parity blocks with the seqs they encode (I7 of
docs/design/ec-protocol.md)."""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.ft.consistent_decode import VersionedFragment
from xdl_ec.ft.delta_forwarding import DeltaForwarding
from xdl_ec.ft.held_parity import HeldParity
from xdl_ec.ps.agent import AgentHost


class FragmentReads:
    """Reads of one server's fragments: ``tables`` {name: (block_slots, record_bytes)}, its data side
    ``forwarding`` and its parity ``held``."""

    def __init__(self, tables: Mapping[str, Tuple[int, int]], forwarding: DeltaForwarding, held: HeldParity) -> None:
        self.tables = dict(tables)
        self._forwarding, self._held = forwarding, held

    def data(self, shard: _core.EmbeddingShard, table: str, block: int, offset: int, width: int) -> np.ndarray:
        """Bytes ``offset .. offset + width`` of every record of data block ``block`` of ``table``'s ``shard``."""
        block_slots, record_bytes = self.tables[table]
        data = shard.read_block(block)
        if offset == 0 and width == record_bytes:
            return data
        return np.ascontiguousarray(data.reshape(block_slots, record_bytes)[:, offset : offset + width]).reshape(-1)

    def many(self, host: AgentHost, table: str, reads: Sequence[Tuple[str, int, int, int]]) -> List[VersionedFragment]:
        """The fragments a decode reads from this server, in one call (a batch of stripes: one round trip per
        server): each read (``"read_data"`` or ``"read_parity"``, block, offset, width) answered in order, a data
        block as (bytes, delta seq), all of them read under one hold of the server lock (mutations hold it, so
        they are at one seq), a parity block as (bytes, applied seq per sender). Before the data reads, under the
        same hold, the forwarder delivers what it recorded (in one process on this thread): the holders' parity
        then encodes the seq read unless a mutation slips in before the parity is read, where a lagging forwarder
        (it runs in the cores' idle time) would else make the decode's first reads disagree."""
        out: List[Optional[VersionedFragment]] = [None] * len(reads)
        if any(kind == "read_data" for kind, *_ in reads):
            with host.lock:
                self._forwarding.flush()
                seq = self._forwarding.forwarder.seq
                shard = host.table(table).shard
                for i, (kind, block, offset, width) in enumerate(reads):
                    if kind == "read_data":
                        out[i] = (self.data(shard, table, block, offset, width), seq)
        for i, (kind, block, offset, width) in enumerate(reads):
            if kind == "read_parity":
                out[i] = self._held.read(table, block, offset, width)
            elif kind != "read_data":
                raise ValueError(f"read_many: a read is 'read_data' or 'read_parity', got {kind!r}")
        return [answer for answer in out if answer is not None]
