"""An independent Python reference of ParityRouter (cpp/include/xdl_ec/parity_router.h): a data server's slot deltas
-> one serialised ParityUpdate ("XPU1" wire form, parity_update.h) per parity holder. Tests build holder batches with
it, so the C++ routing is checked against a second implementation instead of against itself."""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Tuple

import numpy as np


def route(layout: Any, source: int, slots: np.ndarray, xor: np.ndarray, block_slots: int) -> Dict[int, np.ndarray]:
    """{holder: ParityUpdate bytes} for the deltas ``xor`` (uint8[m, record_bytes], old XOR new) of ``slots`` made on
    server ``source`` of ``layout`` (a StripeLayout): slot x is record x % block_slots of local data block
    x // block_slots, data member j of its stripe, whose parity member i sits in the holder's parity block c."""
    record_bytes = int(xor.shape[1])
    entries: Dict[int, List[Tuple[int, int, int, int]]] = {}
    deltas: Dict[int, List[bytes]] = {}
    for x, delta in zip(slots.tolist(), xor):
        stripe, j = layout.data_slot(source, x // block_slots)
        for i in range(layout.r):
            holder, c = layout.parity_member(stripe, i)
            entries.setdefault(holder, []).append((c, (x % block_slots) * record_bytes, i, j))
            deltas.setdefault(holder, []).append(delta.tobytes())
    out: Dict[int, np.ndarray] = {}
    for holder, items in entries.items():
        wire = b"XPU1" + struct.pack("<IIIQ", source, holder, record_bytes, len(items))
        wire += b"".join(struct.pack("<QIBB", *entry) for entry in items) + b"".join(deltas[holder])
        out[holder] = np.frombuffer(wire, np.uint8)
    return out
