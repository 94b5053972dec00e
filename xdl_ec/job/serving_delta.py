"""Serving delta: what changed in a model since its previous export, as files plain TensorFlow reads in-graph.

A delta is a directory ``delta-NNNNNN`` (its sequence number, from 1; names sort in apply order) beside the base
SavedModel (``base``) it applies to (:mod:`xdl_ec.job.serving_export`: ``m.apply_delta(tf.constant(dir))``).
Every tensor file is one ``tf.io.serialize_tensor`` (a TensorProto; ``tf.io.parse_tensor`` reads it back):

- ``head.tensor``: string [3], the base id, the sequence number and the training step (decimal);
- per table ``i`` (the job's table order): ``table-<i>.keys.tensor`` int64 [n] (the rows changed or added),
  ``table-<i>.rows.tensor`` float32 [n, dim] (their values), ``table-<i>.removed.tensor`` int64 [m] (keys no
  longer in the table: evicted; they serve as unknown ids), ``table-<i>.reset.tensor`` bool [] (true: the keys are
  every row of the table and the served ones not among them go: after a failure, or when a cut read the table
  whole);
- ``dense-<j>.tensor``: every dense weight, in :attr:`xdl_ec.model.dense_model.DenseModel.variables` order;
- ``manifest.json``: the same in words, for people and tools (base id, sequence, step, counts, bytes).

A delta is written under a temporary name beside its final one, then renamed: a reader never sees a partial one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

BASE = "base"
PREFIX = "delta-"
HEAD = "head.tensor"
MANIFEST = "manifest.json"


def delta_name(sequence: int) -> str:
    """The directory name of delta number ``sequence`` (from 1)."""
    return f"{PREFIX}{sequence:06d}"


def table_file(index: int, part: str) -> str:
    """A table's file in a delta; ``part``: keys, rows or removed."""
    return f"table-{index}.{part}.tensor"


def dense_file(index: int) -> str:
    return f"dense-{index}.tensor"


def write_delta(
    root: Path,
    base_id: str,
    sequence: int,
    step: int,
    tables: Sequence[Tuple[str, np.ndarray, np.ndarray, np.ndarray, bool]],
    dense: Sequence[np.ndarray],
) -> Tuple[Path, int]:
    """Writes delta ``sequence`` of base ``base_id`` into ``root``: ``tables`` as (name, keys int64 [n], values
    float32 [n, dim], removed int64 [m], reset) in the job's table order, ``dense`` every dense weight. Returns (its
    path, the bytes of its tensor files)."""
    import tensorflow as tf

    out = root / delta_name(sequence)
    staging = root / f".{out.name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)  # left by a writer that died mid-way
    staging.mkdir(parents=True)
    nbytes = 0

    def put(name: str, value: Any) -> None:
        nonlocal nbytes
        data = tf.io.serialize_tensor(tf.convert_to_tensor(value)).numpy()
        (staging / name).write_bytes(data)
        nbytes += len(data)

    try:
        put(HEAD, np.array([base_id, str(sequence), str(step)], dtype=object).astype(bytes))
        described: List[Dict[str, Any]] = []
        for i, (name, keys, values, removed, reset) in enumerate(tables):
            put(table_file(i, "keys"), np.ascontiguousarray(keys, np.int64))
            put(table_file(i, "rows"), np.ascontiguousarray(values, np.float32))
            put(table_file(i, "removed"), np.ascontiguousarray(removed, np.int64))
            put(table_file(i, "reset"), np.array(bool(reset)))
            described.append({"name": name, "rows": int(len(keys)), "removed": int(len(removed)), "reset": bool(reset)})
        for j, weight in enumerate(dense):
            put(dense_file(j), np.asarray(weight))
        manifest = {
            "base_id": base_id,
            "sequence": sequence,
            "step": step,
            "tables": described,
            "dense_weights": len(dense),
            "bytes": nbytes,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out, nbytes


def payload_bytes(rows: int, dim: int) -> int:
    """The bytes ``rows`` rows of width ``dim`` take in a delta's tensor files (key and values), without headers:
    what a delta holding every row costs, against which a delta's size is reported."""
    return rows * (8 + 4 * dim)
