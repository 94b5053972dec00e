"""merge_key_order: one table's rows in ascending key order from the sources that hold its parts (its servers, its
shards), each yielding its own rows in ascending key order a chunk at a time (``export()``'s dicts: ``keys``,
``values``, ``state``).

A k-way merge by chunks: each round takes from every source's current chunk the rows up to the smallest of their
last keys (so the source whose chunk ends there is used up) and yields them sorted, so at most about one chunk per
source is held at once, whatever the table's size (:mod:`xdl_ec.model.digest` hashes a table larger than RAM this
way). Keys are disjoint across sources: a key given twice is an error, as in :func:`xdl_ec.model.digest.model_digest`.
"""

from __future__ import annotations

from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import numpy as np

ROW_FIELDS = ("keys", "values", "state")
DUPLICATE_KEY = "exports: a key appears twice across the embedding exports; a digest needs each record once"


def rows_of(chunk: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """``chunk``'s keys (int64 [n]), values and state (float32 [n, -1]; [0, 0] when it has no row)."""
    keys = np.asarray(chunk["keys"], dtype=np.int64).reshape(-1)
    if keys.size == 0:
        return {"keys": keys, "values": np.zeros((0, 0), np.float32), "state": np.zeros((0, 0), np.float32)}
    return {
        "keys": keys,
        "values": np.asarray(chunk["values"], dtype=np.float32).reshape(keys.size, -1),
        "state": np.asarray(chunk["state"], dtype=np.float32).reshape(keys.size, -1),
    }


class _Source:
    """One source's chunks, the rest of its current one in ``head`` (None once it has no more)."""

    def __init__(self, index: int, chunks: Iterable[Mapping[str, np.ndarray]]) -> None:
        self.index, self._chunks = index, iter(chunks)
        self._last: Optional[int] = None  # the last key given, so its next chunk must start above it
        self.head: Optional[Dict[str, np.ndarray]] = None
        self.next_chunk()

    def next_chunk(self) -> None:
        self.head = None
        for chunk in self._chunks:
            rows = rows_of(chunk)
            keys = rows["keys"]
            if keys.size == 0:
                continue  # an empty shard (or chunk) adds no record
            if np.any(np.diff(keys) <= 0) or (self._last is not None and keys[0] <= self._last):
                out_of_order = np.any(np.diff(keys) == 0) or (self._last is not None and keys[0] == self._last)
                if out_of_order:
                    raise ValueError(DUPLICATE_KEY)
                raise ValueError(
                    f"key-order merge: source {self.index} gave keys out of ascending order (each source must yield "
                    f"its rows sorted by key, e.g. EmbeddingTable.key_order_chunks)"
                )
            self._last = int(keys[-1])
            self.head = rows
            return

    def take_through(self, bound: int) -> Dict[str, np.ndarray]:
        """The head's rows with keys <= ``bound`` (moving on to the next chunk when that is all of them)."""
        assert self.head is not None
        n = int(np.searchsorted(self.head["keys"], bound, side="right"))
        taken = {f: self.head[f][:n] for f in ROW_FIELDS}
        if n == self.head["keys"].size:
            self.next_chunk()
        else:
            self.head = {f: self.head[f][n:] for f in ROW_FIELDS}
        return taken


def merge_key_order(sources: Sequence[Iterable[Mapping[str, np.ndarray]]]) -> Iterator[Dict[str, np.ndarray]]:
    """The rows of every source in ascending key order, in chunks (none empty): see the module docstring.
    ValueError when a key appears twice or a source's keys are not ascending."""
    live: List[_Source] = [s for s in (_Source(i, chunks) for i, chunks in enumerate(sources)) if s.head is not None]
    while live:
        bound = min(int(s.head["keys"][-1]) for s in live if s.head is not None)
        parts = [s.take_through(bound) for s in live]
        live = [s for s in live if s.head is not None]
        parts = [p for p in parts if p["keys"].size]
        if len(parts) == 1:
            yield parts[0]
            continue
        keys = np.concatenate([p["keys"] for p in parts])
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        if np.any(keys[1:] == keys[:-1]):
            raise ValueError(DUPLICATE_KEY)
        yield {
            "keys": keys,
            "values": np.concatenate([p["values"] for p in parts])[order],
            "state": np.concatenate([p["state"] for p in parts])[order],
        }
