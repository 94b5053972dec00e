"""HeldParity: a server's side of ``--ft ec`` as a parity holder: its C++ ParityHolder (parity blocks, applied seqs,
undo log) and, for senders in other processes, the :class:`~xdl_ec.ft.parity_link.ParityReceiver` applying what
their links send. A recovery rolls senders back, resets them and reads and writes blocks here.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.ft.parity_link import ParityReceiver
from xdl_ec.net.job_secret import JobSecret
from xdl_ec.sparse.memory_budget import TIER_COUNTS, MemoryBudget


class HeldParity:
    """Holder ``index`` of ``n`` under a (k, r) code of the tables ``tables`` {name: (block_slots, record_bytes)};
    ``secret``: the job's JobSecret, which its receiver's peers must prove they hold; ``memory``: the server's
    budget, whose parity share (:meth:`MemoryBudget.parity_share`) each table's parity keeps in RAM, the rest of
    its records in a file under the spill dir (None, or a budget without parity: all in RAM)."""

    def __init__(
        self,
        index: int,
        n: int,
        k: int,
        r: int,
        tables: Mapping[str, Tuple[int, int]],
        secret: JobSecret,
        memory: Optional[MemoryBudget] = None,
    ) -> None:
        self.index = index
        self._record_bytes = {name: rb for name, (_, rb) in tables.items()}
        share = 0 if memory is None else memory.parity_share(len(tables))
        spill = {name: (rb, share) for name, rb in self._record_bytes.items()} if share else {}
        self.holder = _core.ParityHolder(
            index,
            n,
            k,
            r,
            {name: bs * rb for name, (bs, rb) in tables.items()},
            spill=spill,
            spill_dir=memory.spill_dir if spill and memory is not None else "",
        )
        self._secret = secret
        self._receiver: Optional[ParityReceiver] = None  # made when a remote sender first asks for it
        self._receiver_lock = threading.Lock()

    def address(self, refuse: Callable[[], bool]) -> Tuple[str, int]:
        """(host, port) of this holder's ParityReceiver, started on the first request (in one process nobody asks:
        forwarders there apply to the holder directly); ``refuse()`` True (the server is crashing) drops its
        connections instead of applying."""
        with self._receiver_lock:
            if self.holder.closed:
                raise ValueError(f"parity_address: server {self.index}'s parity holder is closed (the server is gone)")
            if self._receiver is None:
                self._receiver = ParityReceiver(self.holder, self._secret, refuse)
            return self._receiver.address

    def security_events(self) -> List[str]:
        """The receiver's newest warnings (peers refused, batches refused), oldest first; [] without a receiver."""
        with self._receiver_lock:
            return list(self._receiver.events) if self._receiver is not None else []

    def tier_counts(self) -> Dict[str, int]:
        """The parity tier's counts summed over the tables, as ``parity_<count>`` (TIER_COUNTS; zeros untiered),
        with ``parity_tiered``: how many tables' parity is tiered."""
        per_table = self.holder.spill_stats()
        out = {f"parity_{key}": sum(int(c[key]) for c in per_table.values()) for key in TIER_COUNTS}
        out["parity_tiered"] = len(per_table)
        return out

    def apply(self, sender: int, batches: np.ndarray, durable: int) -> int:
        """A remote sender's serialised batches; returns how far its stream is applied."""
        return self.holder.apply(sender, batches, durable)

    def reset_sender(self, sender: int, seq: int, worker_seqs: Mapping[int, int]) -> None:
        self.holder.reset_sender(sender, seq, {int(w): int(s) for w, s in worker_seqs.items()})

    def read(self, table: str, block: int, offset: int, width: int) -> Tuple[np.ndarray, Dict[int, int]]:
        """(bytes, applied seq per sender) read atomically: which version of each sender's data they encode."""
        return self.holder.read_block(table, block, self._record_bytes[table], offset, width)

    def write_if(self, table: str, block: int, data: np.ndarray, expected: Mapping[int, int]) -> bool:
        """Writes a re-encoded block only if the holder applied exactly the versions ``expected`` it encodes (I8)."""
        return self.holder.write_block_if(
            table, block, np.ascontiguousarray(data, dtype=np.uint8), {int(s): int(v) for s, v in expected.items()}
        )

    def write(self, table: str, block: int, data: np.ndarray) -> None:
        self.holder.write_block(table, block, np.ascontiguousarray(data, dtype=np.uint8))

    def close(self) -> None:
        """Forwarders of other servers in this process find this holder closed (as a call to a dead server fails)."""
        self.holder.close()
        with self._receiver_lock:
            if self._receiver is not None:
                self._receiver.close()
