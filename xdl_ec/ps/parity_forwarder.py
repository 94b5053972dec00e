"""ParityForwarder: a data server's side of parity maintenance, off the push's critical path.

Every mutation of the server's shards that changed bytes (a push, a pull that inserted rows) gets the next delta
sequence number; its slot deltas are routed by the C++ :class:`ParityRouter` into one serialised ParityUpdate per
parity holder and queued, stamped with the worker push seqs the server has applied so far. One background thread
per holder sends it its queued batches in one ``apply_parity`` call (batched, in seq order; every holder
gets every seq, empty when it holds none of the touched stripes, so its ``applied`` seq stays contiguous) and
records how far each holder has applied. The durable watermark is the least seq every holder applied: the server
reports, per worker, the push seq that watermark includes, and workers forget logged pushes up to it.

A holder that died gets nothing more until :meth:`set_holder` names its replacement, whose parity was recomputed
from the stripes' data at the current seq.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Deque, Dict, List, Mapping, Optional, Tuple

from .backend import RoleLost
from .parity_role import ForwardedBatch


class ParityForwarder:
    """Forwards server ``index``'s delta batches to ``holders`` ({server: handle}) from a background thread."""

    def __init__(self, index: int, holders: Mapping[int, Any], seq: int = 0,
                 worker_seqs: Optional[Mapping[int, int]] = None) -> None:
        self.index = index
        self.seq = seq
        self.worker_seqs: Dict[int, int] = dict(worker_seqs or {})  # pushes applied so far, per worker
        self._holders: Dict[int, Any] = dict(holders)
        self._acked: Dict[int, int] = {h: seq for h in holders}
        self._down: set = set()
        self._queues: Dict[int, List[ForwardedBatch]] = {h: [] for h in holders}
        self._history: Deque[Tuple[int, Dict[int, int]]] = collections.deque()  # (seq, worker seqs) not durable
        self._durable_seqs: Dict[int, int] = dict(self.worker_seqs)
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self.bytes_sent = 0
        self.errors: List[str] = []
        self._threads = [threading.Thread(target=self._run, args=(h,), name=f"xdl-ec-forward{index}to{h}", daemon=True)
                         for h in holders]
        for thread in self._threads:
            thread.start()

    # ---- called by the server, under its lock, right after a mutation ------------------------------
    def record(self, routed: Mapping[str, Mapping[int, Any]], applied_pushes: Mapping[int, int]) -> int:
        """Queues one delta batch: ``routed`` {table: {holder: update bytes}}; ``applied_pushes`` {worker: seq}
        of the pushes this mutation applied. Returns its seq."""
        with self._cond:
            self.seq += 1
            self.worker_seqs.update(applied_pushes)
            stamp = dict(self.worker_seqs)
            for h, queue in self._queues.items():
                if h in self._down:
                    continue
                updates = {table: per_holder[h] for table, per_holder in routed.items() if h in per_holder}
                self.bytes_sent += sum(int(u.size) for u in updates.values())
                queue.append((self.seq, updates, stamp))
            self._history.append((self.seq, stamp))
            self._cond.notify_all()
            return self.seq

    def durable_seq(self, worker: int) -> int:
        """The highest push seq of ``worker`` that every parity holder has applied."""
        with self._cond:
            return self._durable_seqs.get(worker, 0)

    # ---- background sending: one thread per holder, so a holder that is slow to answer (e.g. a replacement
    # busy decoding a degraded read) never holds back the batches of the others -------------------------
    def _run(self, holder: int) -> None:
        while True:
            with self._cond:
                while not self._closed and (holder in self._down or not self._queues[holder]):
                    self._cond.wait()
                if self._closed:
                    return
                batches = self._queues[holder][:]
                self._queues[holder].clear()
                handle = self._holders[holder]
                durable = self._durable_locked()
                self._in_flight += 1
            try:
                applied = handle.call("parity_call", "apply_parity", self.index, batches, durable).result(60.0)
            except Exception as err:  # noqa: BLE001 - a holder that fails counts as down until replaced
                with self._cond:
                    if self._holders[holder] is handle:
                        self._down.add(holder)
                        self._queues[holder].clear()
                    if not isinstance(err, RoleLost):
                        self.errors.append(f"holder {holder}: {err!r}")
                    self._in_flight -= 1
                    self._cond.notify_all()
                continue
            with self._cond:
                if self._holders[holder] is handle:
                    self._acked[holder] = max(self._acked[holder], int(applied))
                self._in_flight -= 1
                self._advance_durable_locked()
                self._cond.notify_all()

    def _durable_locked(self) -> int:
        return min(self._acked.values()) if self._acked else self.seq

    def _advance_durable_locked(self) -> None:
        durable = self._durable_locked()
        while self._history and self._history[0][0] <= durable:
            self._durable_seqs = self._history.popleft()[1]

    # ---- recovery ----------------------------------------------------------------------------------
    def progress(self) -> Dict[str, Any]:
        """seq, the least seq the LIVE holders applied, whether anything is queued or in flight, worker seqs."""
        with self._cond:
            live = [self._acked[h] for h in self._acked if h not in self._down]
            pending = self._in_flight > 0 or any(self._queues[h] for h in self._queues if h not in self._down)
            return {"seq": self.seq, "live_applied": min(live) if live else self.seq, "pending": pending,
                    "worker_seqs": dict(self.worker_seqs), "down": sorted(self._down)}

    def set_holder(self, holder: int, handle: Any) -> None:
        """A replacement holder whose parity blocks reflect this server's stream up to the current seq."""
        with self._cond:
            self._holders[holder] = handle
            self._down.discard(holder)
            self._queues[holder] = []
            self._acked[holder] = self.seq
            self._advance_durable_locked()

    def drop_pending(self) -> None:
        """Failure injection: loses every batch not yet sent (the server dies before forwarding them)."""
        with self._cond:
            for queue in self._queues.values():
                queue.clear()
            self._closed = True
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
