"""``model_digest``: one sha256 over the whole trained state, so two runs can be compared for bit-identity.

The bytes hashed, in this order:

1. Every table in the job's declared order, and within a table every embedding record, merged over its shards and
   sorted by key (int64, ascending): for each record the key as int64 little-endian, then its ``dim`` values as
   float32 little-endian, then its optimizer state floats as float32 little-endian (the layout of
   ``EmbeddingTable.export()``: ``keys``, ``values``, ``state``). Where the
   records live (which table object, shard, server or slot) does not enter the digest.
2. Every dense weight in ``model.weights`` order, each as its raw little-endian bytes in its own dtype.
3. Every dense optimizer variable in ``optimizer.variables`` order (Keras 3: the iteration counter and learning
   rate first, then the slots), likewise.

Each array is hashed as bytes only: shapes are fixed by the model configuration, which the report records next
to the digest.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping

import numpy as np


def _records(exports: Iterable[Mapping[str, np.ndarray]]) -> bytes:
    keys, values, state = [], [], []
    for export in exports:
        k = np.asarray(export["keys"], dtype=np.int64).reshape(-1)
        if k.size == 0:
            continue  # an empty shard (e.g. a server restored before any row reached it) adds no record
        keys.append(k)
        values.append(np.asarray(export["values"], dtype=np.float32).reshape(k.size, -1))
        state.append(np.asarray(export["state"], dtype=np.float32).reshape(k.size, -1))
    if not keys:
        return b""
    k = np.concatenate(keys)
    if np.unique(k).size != k.size:
        raise ValueError("exports: a key appears twice across the embedding exports; a digest needs each record once")
    v = np.concatenate(values)
    s = np.concatenate(state)
    order = np.argsort(k, kind="stable")
    record = np.dtype([("key", "<i8"), ("value", "<f4", (v.shape[1],)), ("state", "<f4", (s.shape[1],))])
    out = np.empty(k.size, dtype=record)
    out["key"] = k[order]
    out["value"] = v[order]
    out["state"] = s[order]
    return out.tobytes()


def _little_endian_bytes(array: Any) -> bytes:
    a = np.asarray(array.numpy() if hasattr(array, "numpy") else array)
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


def model_digest(
    tables: Iterable[Iterable[Mapping[str, np.ndarray]]],
    dense_weights: Iterable[Any],
    optimizer_variables: Iterable[Any],
) -> str:
    """Hex sha256 of the trained state in the documented order (see the module docstring).

    Args:
      tables: per table (in the job's order), its ``export()`` dicts (``keys``, ``values``, ``state``), e.g. one
        per shard.
      dense_weights: ``model.weights`` (Keras variables or arrays), in order.
      optimizer_variables: the dense optimizer's ``variables``, in order.
    """
    h = hashlib.sha256()
    for exports in tables:
        h.update(_records(exports))
    for w in dense_weights:
        h.update(_little_endian_bytes(w))
    for v in optimizer_variables:
        h.update(_little_endian_bytes(v))
    return h.hexdigest()
