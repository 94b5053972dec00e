"""consistent_decode: a C++ Recovery decode served from fragments of the survivors that agree with each other (I7).

Forwarding is asynchronous, so a survivor's data block may be ahead of the parity that encodes it for a moment; a
decode from such fragments would be wrong. The functions here fetch every fragment a decode reads with its version
(a data block with its server's delta seq, a parity block with its applied seq per sender) and read again until the
versions agree. Invariant I7 of docs/design/ec-protocol.md.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Protocol, Sequence, Tuple, TypeVar, Union, cast

import numpy as np

from xdl_ec import _core
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.remote import Remote

# consistent_decode retries at once (each retry behind a flush) until misses come closer together than this
REFLUSH_SECONDS = 0.002

Fragment = Tuple[str, int, int, int, int]  # ("read_data" | "read_parity", server, block, offset, width)
FragmentRead = Callable[[int, int, int, int], np.ndarray]  # (server, block, offset, width) -> bytes
# what a fragment's bytes encode: a data block's delta seq of its server, a parity block's applied seq per sender
Version = Union[int, Dict[int, int]]
VersionedFragment = Tuple[np.ndarray, Version]
Decoded = TypeVar("Decoded")


class DecodeStopped(Exception):
    """The caller stopped a decode whose fragments had not agreed yet (a background rebuild told to stop: fragments
    of a sender that died mid-delivery never agree until the recovery rolls its remnant back)."""


class FragmentSource(Protocol):
    """What a decode asks of a survivor's parity agent (:class:`~xdl_ec.ft.parity_agent.ParityAgent` answers it)."""

    def read_data(self, table: str, block: int, offset: int, width: int) -> np.ndarray: ...

    def read_parity(self, table: str, block: int, offset: int, width: int) -> np.ndarray: ...

    def read_many(self, table: str, reads: Sequence[Tuple[str, int, int, int]]) -> List[VersionedFragment]: ...

    def flush(self) -> None: ...


def _source(handle: Handle) -> Remote:
    """The parity agent of the server behind ``handle``, called beside the server's other calls: fragment reads and
    flushes take their own locks, and a rebuild's reads must not wait behind the steps' pulls and pushes."""
    return Remote(handle, FragmentSource, agent=True, beside=True)


def fragment_readers(
    servers: Sequence[Handle], table: str, timeout: float = 120.0
) -> Tuple[FragmentRead, FragmentRead]:
    """read_data / read_parity callbacks for C++ Recovery: each read is a call to the surviving server."""

    def data(server: int, block: int, offset: int, width: int) -> np.ndarray:
        return _source(servers[server]).read_data(table, block, offset, width).result(timeout)

    def parity(server: int, block: int, offset: int, width: int) -> np.ndarray:
        return _source(servers[server]).read_parity(table, block, offset, width).result(timeout)

    return data, parity


def stripe_reads(
    recovery: _core.Recovery, stripes: Sequence[int], unavailable: Sequence[int], record_bytes: int
) -> List[Fragment]:
    """The fragments decoding ``stripes`` whole reads with ``unavailable`` servers down, as :func:`consistent_decode`
    takes them: (method, server, block, offset 0, width ``record_bytes``), in the order the decodes read them."""
    return [(m, s, b, 0, record_bytes) for stripe in stripes for m, s, b in recovery.stripe_reads(stripe, unavailable)]


def _recorded_reads(decode: Callable[[FragmentRead, FragmentRead], object], block_slots: int) -> List[Fragment]:
    """The fragments ``decode`` reads, found by a pass over zeros: the reads of an erasure decode depend only on the
    pattern of lost servers, not on the bytes."""
    wanted: List[Fragment] = []

    def recorder(method: str) -> FragmentRead:
        def read(server: int, block: int, offset: int, width: int) -> np.ndarray:
            wanted.append((method, server, block, offset, width))
            return np.zeros(block_slots * width, dtype=np.uint8)

        return read

    decode(recorder("read_data"), recorder("read_parity"))
    return wanted


def _fetch(
    servers: Sequence[Handle], table: str, wanted: Sequence[Fragment], timeout: float
) -> List[Tuple[Fragment, VersionedFragment]]:
    """Every fragment of ``wanted`` with its version, in one call per server, all requested before any is awaited:
    [(fragment, (bytes, version))]."""
    by_server: Dict[int, List[Fragment]] = {}
    for w in wanted:
        by_server.setdefault(w[1], []).append(w)
    calls = [
        (ws, _source(servers[server]).read_many(table, [(w[0],) + w[2:] for w in ws]))
        for server, ws in by_server.items()
    ]
    return [(w, answer) for ws, future in calls for w, answer in zip(ws, future.result(timeout))]


def consistent_decode(
    servers: Sequence[Handle],
    table: str,
    block_slots: int,
    decode: Callable[[FragmentRead, FragmentRead], Decoded],
    timeout: float = 60.0,
    reads: Optional[Sequence[Fragment]] = None,
    stopped: Optional[Callable[[], bool]] = None,
) -> Tuple[Decoded, Dict[int, int]]:
    """Runs ``decode(read_data, read_parity)`` (a C++ Recovery call that reads fragments through callbacks, one at a
    time) on fragments that are mutually consistent, all fetched at once: ``reads`` lists the fragments ``decode``
    reads, (method, server, block, offset, width) (:func:`stripe_reads` for whole stripes); without it a first pass
    over zeros records them. The fetch is repeated (the survivors' links flushed first) until each survivor's blocks
    were read at one delta seq, every parity block read has applied exactly that seq of each survivor read, and the
    parity blocks agree on every other sender; then ``decode`` is served from them. Returns (result, versions
    {sender: seq} the result reflects); TimeoutError when the fragments never agree within ``timeout`` seconds,
    DecodeStopped when ``stopped()`` turns true while they disagree."""
    wanted = _recorded_reads(decode, block_slots) if reads is None else [_fragment(*r) for r in reads]
    wanted = list(dict.fromkeys(wanted))
    deadline = time.monotonic() + timeout
    missed_at: Optional[float] = None  # when the fragments last disagreed (retries flush first)
    readers = sorted({w[1] for w in wanted if w[0] == "read_data"})
    while True:
        if missed_at is not None:
            # a retry: the survivors' parity was behind their data, e.g. training goes on beside a rebuild and the
            # forwarders hold a range back (or their background thread is starved). Each survivor routes and
            # delivers what it recorded, and only then are the fragments read again: reads right behind a flush
            # find parity and data at one seq unless a mutation slips in between
            for flush in [_source(servers[server]).flush() for server in readers]:
                flush.result(timeout)
        fetched: Dict[Fragment, np.ndarray] = {}
        fetched_versions: Dict[Fragment, Version] = {}
        data_seqs: Dict[int, int] = {}
        others: Dict[int, int] = {}
        consistent = True
        for w, (block, version) in _fetch(servers, table, wanted, timeout):
            fetched[w], fetched_versions[w] = block, version
            if w[0] == "read_data":
                seq = int(cast(int, version))
                consistent &= data_seqs.setdefault(w[1], seq) == seq
            else:
                for sender, seq in cast(Dict[int, int], version).items():
                    sender, seq = int(sender), int(seq)
                    consistent &= (data_seqs[sender] if sender in data_seqs else others.setdefault(sender, seq)) == seq
        # a parity block read before a data block of the same sender was checked against others: re-check
        consistent &= all(data_seqs.get(sender, seq) == seq for sender, seq in others.items())
        if consistent:
            break
        if stopped is not None and stopped():
            raise DecodeStopped(f"decode of table {table!r}: stopped before its fragments agreed")
        now = time.monotonic()
        if missed_at is not None and now - missed_at < REFLUSH_SECONDS:
            time.sleep(0.0005)  # several misses in a row: a mutation keeps slipping in, back off a little
        missed_at = now
        if now > deadline:
            parity_seqs = {(w[1], w[2]): fetched_versions[w] for w in wanted if w[0] == "read_parity"}
            raise TimeoutError(
                f"decode of table {table!r}: the fragments never agreed within {timeout:g} s (data "
                f"read at seqs {data_seqs}, parity blocks (server, block) with their applied seqs "
                f"{parity_seqs}); the survivors' parity did not catch up with their data"
            )

    def reader(method: str) -> FragmentRead:
        def read(server: int, block: int, offset: int, width: int) -> np.ndarray:
            return fetched[(method, server, block, offset, width)]  # the pass reads what the first one did

        return read

    return decode(reader("read_data"), reader("read_parity")), {**others, **data_seqs}


def _fragment(method: str, server: int, block: int, offset: int, width: int) -> Fragment:
    return str(method), int(server), int(block), int(offset), int(width)
