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
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from xdl_ec.model.key_order_merge import DUPLICATE_KEY, rows_of


def _record_bytes(keys: np.ndarray, values: np.ndarray, state: np.ndarray) -> np.ndarray:
    """The records of rows already in key order, as bytes (uint8; hashed where they are, not copied)."""
    record = np.dtype([("key", "<i8"), ("value", "<f4", (values.shape[1],)), ("state", "<f4", (state.shape[1],))])
    out = np.empty(keys.size, dtype=record)
    out["key"] = keys
    out["value"] = values
    out["state"] = state
    return out.view(np.uint8)


def _records(exports: Iterable[Mapping[str, np.ndarray]]) -> bytes:
    keys, values, state = [], [], []
    for export in exports:
        rows = rows_of(export)
        if rows["keys"].size == 0:
            continue  # an empty shard (e.g. a server restored before any row reached it) adds no record
        keys.append(rows["keys"])
        values.append(rows["values"])
        state.append(rows["state"])
    if not keys:
        return b""
    k = np.concatenate(keys)
    if np.unique(k).size != k.size:
        raise ValueError(DUPLICATE_KEY)
    order = np.argsort(k, kind="stable")
    return _record_bytes(k[order], np.concatenate(values)[order], np.concatenate(state)[order]).tobytes()


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
    return _with_dense(h, dense_weights, optimizer_variables)


def streamed_model_digest(
    tables: Iterable[Iterable[Mapping[str, np.ndarray]]],
    dense_weights: Iterable[Any],
    optimizer_variables: Iterable[Any],
) -> str:
    """:func:`model_digest`, the same bytes, of tables given in key order a chunk at a time: per table (in the job's
    order) its rows in ascending key order over all its shards, as chunks of ``export()`` dicts (what
    :func:`~xdl_ec.model.key_order_merge.merge_key_order` yields), hashed as they pass, so only a chunk is held.
    ValueError when a table's keys do not ascend (a key given twice included)."""
    h = hashlib.sha256()
    for chunks in tables:
        last: Optional[int] = None
        for chunk in chunks:
            rows = rows_of(chunk)
            keys = rows["keys"]
            if keys.size == 0:
                continue
            if np.any(np.diff(keys) <= 0) or (last is not None and keys[0] <= last):
                raise ValueError(
                    "streamed digest: a table's chunks must give its keys in ascending order, each once "
                    "(merge its shards' key-order exports with merge_key_order)"
                )
            last = int(keys[-1])
            h.update(_record_bytes(keys, rows["values"], rows["state"]).data)
    return _with_dense(h, dense_weights, optimizer_variables)


def _with_dense(h: Any, dense_weights: Iterable[Any], optimizer_variables: Iterable[Any]) -> str:
    """The hex digest of ``h`` once the dense weights and the optimizer's variables follow the tables."""
    for w in dense_weights:
        h.update(_little_endian_bytes(w))
    for v in optimizer_variables:
        h.update(_little_endian_bytes(v))
    return h.hexdigest()
