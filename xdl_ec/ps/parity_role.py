"""ParityRole: the parity blocks one parameter server holds for the stripes the layout makes it a parity member of.

One :class:`ParityStore` (C++) per table, plus, per sender (a data server whose stripes this server protects):

- ``applied[sender]``: the sender's delta sequence number up to which its forwarded deltas are in the blocks.
  Batches are applied strictly in sequence order (a duplicate is skipped, a gap is an error);
- ``worker_seqs[sender]``: which workers' pushes (their per-server push sequence numbers) that prefix includes,
  as the sender stamped it on each delta batch. After a rollback to W it is what the rebuilt sender must claim,
  so workers replay exactly the pushes above it;
- an undo log of the batches above the sender's durable watermark (the seq every holder acknowledged: those are
  never rolled back). Parity deltas are XOR-ed in over GF(2^8), so applying a batch again undoes it.

See :mod:`xdl_ec.ft.ec_strategy` for the protocol and its consistency argument.
"""

from __future__ import annotations

import threading
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

from .. import _core

# One forwarded delta batch: (seq, {table: serialised ParityUpdate for this holder}, worker seqs after it).
ForwardedBatch = Tuple[int, Dict[str, np.ndarray], Dict[int, int]]


class ParityRole:
    """Parity blocks of ``tables`` ({name: block_bytes}) for a (k, r) code, held by server ``index``."""

    def __init__(self, index: int, k: int, r: int, tables: Mapping[str, int]) -> None:
        self.index = index
        self.k, self.r = k, r
        self.stores = {name: _core.new_parity_store(k, r, int(block_bytes)) for name, block_bytes in tables.items()}
        self.applied: Dict[int, int] = {}
        self.worker_seqs: Dict[int, Dict[int, int]] = {}
        self._undo: Dict[int, List[ForwardedBatch]] = {}
        self._base: Dict[int, Dict[int, int]] = {}  # worker seqs at the first undo entry's predecessor
        self._lock = threading.Lock()

    def _store(self, table: str) -> "_core.ParityStore":
        store = self.stores.get(table)
        if store is None:
            raise ValueError(f"table: server {self.index} holds no parity of table {table!r} (has {sorted(self.stores)})")
        return store

    def apply(self, sender: int, batches: Sequence[ForwardedBatch], durable: int) -> int:
        """Applies ``sender``'s batches in order; drops undo entries at or below ``durable``; returns applied."""
        with self._lock:
            applied = self.applied.get(sender, 0)
            undo = self._undo.setdefault(sender, [])
            for batch in batches:
                seq, updates, wseqs = batch
                if seq <= applied:
                    continue  # a resent batch: already in the blocks
                if seq != applied + 1:
                    raise ValueError(f"parity batch {seq} from server {sender} arrived after {applied} on server "
                                     f"{self.index}: batches must come in sequence order")
                for table, update in updates.items():
                    _core.parity_store_apply(self._store(table), update)
                undo.append(batch)
                applied = seq
                self.applied[sender] = seq
                self.worker_seqs[sender] = dict(wseqs)
            cut = 0
            while cut < len(undo) and undo[cut][0] <= durable:
                cut += 1
            if cut:
                self._base[sender] = undo[cut - 1][2]
                del undo[:cut]
            return applied

    def rollback(self, sender: int, to_seq: int) -> Dict[int, int]:
        """Undoes ``sender``'s batches above ``to_seq`` (newest first); returns the worker seqs at ``to_seq``."""
        with self._lock:
            undo = self._undo.get(sender, [])
            if self.applied.get(sender, 0) > to_seq and (not undo or undo[0][0] > to_seq + 1):
                raise ValueError(f"rollback: server {self.index} cannot roll server {sender} back to {to_seq}: its "
                                 f"undo log starts at {undo[0][0] if undo else None}")
            while undo and undo[-1][0] > to_seq:
                _, updates, _ = undo.pop()
                for table, update in updates.items():
                    _core.parity_store_apply(self._store(table), update)  # XOR: the same update undoes it
            if self.applied.get(sender, 0) > to_seq:
                self.applied[sender] = to_seq
                self.worker_seqs[sender] = dict(undo[-1][2] if undo else self._base.get(sender, {}))
            return dict(self.worker_seqs.get(sender, {}))

    def reset_sender(self, sender: int, seq: int, worker_seqs: Mapping[int, int]) -> None:
        """After this role's blocks were recomputed from data: they hold ``sender``'s stream up to ``seq``."""
        with self._lock:
            self.applied[sender] = seq
            self.worker_seqs[sender] = dict(worker_seqs)
            self._undo[sender] = []
            self._base[sender] = dict(worker_seqs)

    def read_block(self, table: str, c: int, record_bytes: int, offset: int, width: int) -> np.ndarray:
        store = self._store(table)
        if offset == 0 and width == record_bytes:
            return store.read_block(c)
        return _core.parity_store_read_columns(store, c, record_bytes, offset, width)

    def read_block_versioned(self, table: str, c: int, record_bytes: int, offset: int,
                             width: int) -> Tuple[np.ndarray, Dict[int, int]]:
        """(bytes, applied seq per sender) read atomically: which version of each sender's data they encode."""
        with self._lock:
            return self.read_block(table, c, record_bytes, offset, width), dict(self.applied)

    def write_block(self, table: str, c: int, data: np.ndarray) -> None:
        self._store(table).write_block(c, np.ascontiguousarray(data, dtype=np.uint8))

    def write_block_if(self, table: str, c: int, data: np.ndarray, expected: Mapping[int, int]) -> bool:
        """Overwrites block c with ``data`` (re-encoded from its stripe's data at the versions ``expected``
        {sender: seq}) only when this role has applied exactly those versions; False otherwise (retry)."""
        with self._lock:
            if any(self.applied.get(int(s), 0) != int(v) for s, v in expected.items()):
                return False
            self.write_block(table, c, data)
            return True

    def num_blocks(self, table: str) -> int:
        return self._store(table).num_blocks

    def bytes(self) -> int:
        return sum(s.bytes for s in self.stores.values())
