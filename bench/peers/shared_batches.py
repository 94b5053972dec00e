"""The batches every peer trains on, written once to an ``.npz`` file and read by every system's process.

Workloads (``WORKLOADS``):

- ``criteo-shaped``: xdl-ec's built-in synthetic Criteo-shaped rows (:class:`xdl_ec.data.synthetic.SyntheticCriteo`,
  Zipf 1.1, cardinalities capped at 100k, 26 sparse + 13 dense), sparse keys salted per column into one key space
  (one shared table). Writing it needs xdl-ec importable.
- ``fields-100k``: 26 fields of 100k ids each (ids 0..99,999 per field, Zipf 1.1), 13 dense counts, labels from a
  hidden model (per-id weights drawn from the seed, the first 8 fields carrying most of the signal), generated here
  with numpy alone, as a user would write it; one table per field.
- ``wide``: 100 fields over 100 tables (issue #49), vocabularies log-spaced from 10 to 10M ids, ids Zipf 1.1 per
  field; fields 3, 23, 43, 63, 83 are multi-hot (4 ids per example, pooled by sum), the rest one id; 13 dense counts,
  labels from a hidden model over the first 256 ids of each field (the tail carries no signal). Generated with numpy.
- ``criteo-sample``: a real Criteo TSV file (one epoch of its train split, its last 10% held out) read by xdl-ec's
  reader (keys salted as in ``criteo-shaped``).

File layout: ``train_dense`` float32 [N, 13], ``train_sparse`` int64 [N, C] (C = 26 but for ``wide``, whose
columns are its fields' ids in order, ``widths[f]`` columns for field f), ``train_label`` float32 [N], the
same three ``eval_*`` arrays, and ``meta`` (a JSON string: workload, rows, seed, source). Reading needs numpy only,
so the peers' own environments (another TF, torch) read the same file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

WORKLOADS = ("criteo-shaped", "fields-100k", "wide", "criteo-sample")
NUM_DENSE, NUM_SPARSE = 13, 26
EVAL_ROWS = 1 << 16  # hold-out rows of the synthetic workloads
CHUNK = 4096  # rows drawn per generator call: the rows do not depend on the batch size a peer trains with
FIELD_IDS = 100_000
ZIPF = 1.1

WIDE_FIELDS = 100
WIDE_VOCABULARIES = [int(v) for v in np.geomspace(10, 10_000_000, WIDE_FIELDS).round()]
WIDE_MULTI_HOT = {3: 4, 23: 4, 43: 4, 63: 4, 83: 4}  # field -> ids per example
WIDE_WIDTHS = [WIDE_MULTI_HOT.get(f, 1) for f in range(WIDE_FIELDS)]
WIDE_SIGNAL_IDS = 256  # the ids of each field that carry label signal

Arrays = Tuple[np.ndarray, np.ndarray, np.ndarray]


def _zipf_ids(rng: np.random.Generator, shape: Tuple[int, ...], vocabulary: Any) -> np.ndarray:
    """Bounded Zipf ranks in [0, vocabulary): P(k) ~ (k + 1)^-s, by inverting the continuous power law's CDF
    (``vocabulary`` broadcasts against ``shape``)."""
    a = 1.0 - ZIPF
    x = (rng.random(shape) * ((vocabulary + 1.0) ** a - 1.0) + 1.0) ** (1.0 / a)
    return np.minimum(np.floor(x) - 1.0, np.asarray(vocabulary) - 1).clip(0).astype(np.int64)


def _criteo_shaped(rows: int, split: str, seed: int) -> Arrays:
    from xdl_ec.data.synthetic import SyntheticCriteo  # the writer's side only: peers read the file

    gen = SyntheticCriteo(seed, max_cardinality=FIELD_IDS, zipf_exponent=ZIPF)
    parts = [gen.batch(i, CHUNK, split) for i in range(-(-rows // CHUNK))]
    return tuple(np.concatenate([getattr(b, k) for b in parts])[:rows] for k in ("dense", "sparse", "label"))  # type: ignore[return-value]


def _fields_100k(rows: int, split: str, seed: int) -> Arrays:
    hidden = np.random.default_rng([seed, 0x100])
    id_weight = hidden.normal(0.0, 0.5, (NUM_SPARSE, FIELD_IDS))
    id_weight[8:] *= 0.25
    dense_weight = hidden.normal(0.0, 0.3, NUM_DENSE)
    dense_scale = hidden.uniform(0.5, 3.0, NUM_DENSE)
    fields = np.arange(NUM_SPARSE)
    dense_parts, sparse_parts, label_parts = [], [], []
    for chunk in range(-(-rows // CHUNK)):
        rng = np.random.default_rng([seed, 0 if split == "train" else 1, chunk])
        ids = _zipf_ids(rng, (CHUNK, NUM_SPARSE), FIELD_IDS)
        dense = np.log1p(np.floor(rng.exponential(np.expm1(dense_scale), (CHUNK, NUM_DENSE)))).astype(np.float32)
        logit = -1.6 + id_weight[fields, ids].sum(axis=1) + (dense - dense_scale) @ dense_weight
        label = (rng.random(CHUNK) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
        dense_parts.append(dense)
        sparse_parts.append(ids)
        label_parts.append(label)
    return (
        np.concatenate(dense_parts)[:rows],
        np.concatenate(sparse_parts)[:rows],
        np.concatenate(label_parts)[:rows],
    )


def _wide(rows: int, split: str, seed: int) -> Arrays:
    hidden = np.random.default_rng([seed, 0x1D0])
    id_weight = hidden.normal(0.0, 0.5, (WIDE_FIELDS, WIDE_SIGNAL_IDS)) / np.sqrt(WIDE_FIELDS / NUM_SPARSE)
    dense_weight = hidden.normal(0.0, 0.3, NUM_DENSE)
    dense_scale = hidden.uniform(0.5, 3.0, NUM_DENSE)
    columns = np.repeat(np.arange(WIDE_FIELDS), WIDE_WIDTHS)  # the field of each column
    vocabulary = np.asarray(WIDE_VOCABULARIES, dtype=np.float64)[columns]
    scale = 1.0 / np.asarray(WIDE_WIDTHS, dtype=np.float64)[columns]  # a multi-hot field's ids share its weight
    dense_parts, sparse_parts, label_parts = [], [], []
    for chunk in range(-(-rows // CHUNK)):
        rng = np.random.default_rng([seed, 0 if split == "train" else 1, chunk, 0x1D0])
        ids = _zipf_ids(rng, (CHUNK, columns.size), vocabulary)
        dense = np.log1p(np.floor(rng.exponential(np.expm1(dense_scale), (CHUNK, NUM_DENSE)))).astype(np.float32)
        signal = ids < WIDE_SIGNAL_IDS
        weights = np.where(signal, id_weight[columns, np.minimum(ids, WIDE_SIGNAL_IDS - 1)], 0.0) * scale
        logit = -1.6 + weights.sum(axis=1) + (dense - dense_scale) @ dense_weight
        label = (rng.random(CHUNK) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
        dense_parts.append(dense)
        sparse_parts.append(ids)
        label_parts.append(label)
    return (
        np.concatenate(dense_parts)[:rows],
        np.concatenate(sparse_parts)[:rows],
        np.concatenate(label_parts)[:rows],
    )


def field_widths(workload: str) -> List[int]:
    """Columns of ``train_sparse`` per field, in order (one per field but for ``wide``'s multi-hot fields)."""
    return list(WIDE_WIDTHS) if workload == "wide" else [1] * NUM_SPARSE


def field_rows(workload: str, cap: int) -> List[int]:
    """Rows of a fixed-size per-field table (Keras, TorchRec): ``fields-100k``'s 100k ids, ``wide``'s vocabulary
    capped at ``cap`` (ids taken mod the rows)."""
    return [min(v, cap) for v in WIDE_VOCABULARIES] if workload == "wide" else [FIELD_IDS] * NUM_SPARSE


def _criteo_file(path: str) -> Tuple[Arrays, Arrays]:
    from xdl_ec.data.source import TrainingData

    data = TrainingData.from_file(path, eval_fraction=0.1)
    out = []
    for batches in (data.train_batches(CHUNK), data.eval_batches(CHUNK)):
        parts = list(batches)
        out.append(tuple(np.concatenate([getattr(b, k) for b in parts]) for k in ("dense", "sparse", "label")))
    return out[0], out[1]  # type: ignore[return-value]


def write_batches(
    path: str,
    workload: str,
    train_rows: int = 0,
    seed: int = 0,
    criteo: Optional[str] = None,
    eval_rows: int = EVAL_ROWS,
) -> Dict[str, Any]:
    """Writes ``workload``'s train rows (``train_rows``; one epoch of the file for ``criteo-sample``) and
    ``eval_rows`` hold-out rows (the file's last 10% for ``criteo-sample``) to ``path`` (written to a temporary name,
    then renamed: a reader never sees half a file); returns its meta."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload: expected one of {', '.join(WORKLOADS)}, got {workload!r}")
    if workload == "criteo-sample":
        if criteo is None or not os.path.isfile(criteo):
            raise ValueError(f"criteo: the criteo-sample workload needs a Criteo TSV file, got {criteo!r}")
        train, held_out = _criteo_file(criteo)
        meta: Dict[str, Any] = {"workload": workload, "source": os.path.abspath(criteo)}
    else:
        for name, rows in (("train_rows", train_rows), ("eval_rows", eval_rows)):
            if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
                raise ValueError(f"{name}: must be a positive integer, got {rows!r}")
        draw = {"criteo-shaped": _criteo_shaped, "fields-100k": _fields_100k, "wide": _wide}[workload]
        train, held_out = draw(train_rows, "train", seed), draw(eval_rows, "eval", seed)
        meta = {"workload": workload, "seed": seed, "zipf": ZIPF, "ids_per_field": FIELD_IDS}
        if workload == "wide":
            meta.update(ids_per_field=WIDE_VOCABULARIES, widths=WIDE_WIDTHS)
    meta.update(train_rows=int(train[2].shape[0]), eval_rows=int(held_out[2].shape[0]))
    arrays = {
        f"{split}_{k}": a
        for split, part in (("train", train), ("eval", held_out))
        for k, a in zip(("dense", "sparse", "label"), part)
    }
    tmp = f"{path}.tmp{os.getpid()}.npz"
    np.savez(tmp, meta=np.array(json.dumps(meta, sort_keys=True)), **arrays)
    os.replace(tmp, path)
    return meta


class SharedBatches:
    """A file of :func:`write_batches` in memory: train batches in order, hold-out batches."""

    def __init__(self, path: str) -> None:
        with np.load(path) as f:
            self.meta: Dict[str, Any] = json.loads(str(f["meta"]))
            self.train: Arrays = (f["train_dense"], f["train_sparse"], f["train_label"])
            self.held_out: Arrays = (f["eval_dense"], f["eval_sparse"], f["eval_label"])

    @property
    def workload(self) -> str:
        return str(self.meta["workload"])

    @property
    def widths(self) -> List[int]:
        """Columns of ``train_sparse`` per field."""
        return field_widths(self.workload)

    @property
    def per_field(self) -> bool:
        """One table per field (``fields-100k``, ``wide``), not one shared table."""
        return self.workload in ("fields-100k", "wide")

    def train_batches(self, batch_size: int, steps: Optional[int] = None) -> Iterator[Arrays]:
        """``steps`` batches (None: one epoch, the last batch possibly short) in file order, cycling if needed."""
        rows = self.train[2].shape[0]
        if steps is None:
            starts = list(range(0, rows, batch_size))
        else:
            full = rows // batch_size
            if full == 0:
                raise ValueError(f"batch size {batch_size}: larger than the file's {rows} train rows")
            starts = [(i % full) * batch_size for i in range(steps)]
        for s in starts:
            yield tuple(a[s : s + batch_size] for a in self.train)  # type: ignore[misc]

    def eval_batches(self, batch_size: int = 8192) -> Iterator[Arrays]:
        rows = self.held_out[2].shape[0]
        for s in range(0, rows, batch_size):
            yield tuple(a[s : s + batch_size] for a in self.held_out)  # type: ignore[misc]


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description="Write one workload's shared batches (run with xdl-ec importable)")
    parser.add_argument("path")
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--train-rows", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--criteo")
    args = parser.parse_args(argv)
    print(json.dumps(write_batches(args.path, args.workload, args.train_rows, args.seed, args.criteo)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
