"""The batches every peer trains on, written once to an ``.npz`` file and read by every system's process.

Workloads (``WORKLOADS``):

- ``criteo-shaped``: xdl-ec's built-in synthetic Criteo-shaped rows (:class:`xdl_ec.data.synthetic.SyntheticCriteo`,
  Zipf 1.1, cardinalities capped at 100k, 26 sparse + 13 dense), sparse keys salted per column into one key space
  (one shared table). Writing it needs xdl-ec importable.
- ``fields-100k``: 26 fields of 100k ids each (ids 0..99,999 per field, Zipf 1.1), 13 dense counts, labels from a
  hidden model (per-id weights drawn from the seed, the first 8 fields carrying most of the signal), generated here
  with numpy alone, as a user would write it; one table per field.
- ``criteo-sample``: a real Criteo TSV file (one epoch of its train split, its last 10% held out) read by xdl-ec's
  reader (keys salted as in ``criteo-shaped``).

File layout: ``train_dense`` float32 [N, 13], ``train_sparse`` int64 [N, 26], ``train_label`` float32 [N], the
same three ``eval_*`` arrays, and ``meta`` (a JSON string: workload, rows, seed, source). Reading needs numpy only,
so the peers' own environments (another TF, torch) read the same file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np

WORKLOADS = ("criteo-shaped", "fields-100k", "criteo-sample")
NUM_DENSE, NUM_SPARSE = 13, 26
EVAL_ROWS = 1 << 16  # hold-out rows of the synthetic workloads
CHUNK = 4096  # rows drawn per generator call: the rows do not depend on the batch size a peer trains with
FIELD_IDS = 100_000
ZIPF = 1.1

Arrays = Tuple[np.ndarray, np.ndarray, np.ndarray]


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
        # bounded Zipf ranks in [0, FIELD_IDS): P(k) ~ (k + 1)^-s, by inverting the continuous power law's CDF
        a = 1.0 - ZIPF
        x = (rng.random((CHUNK, NUM_SPARSE)) * ((FIELD_IDS + 1.0) ** a - 1.0) + 1.0) ** (1.0 / a)
        ids = np.minimum(np.floor(x) - 1.0, FIELD_IDS - 1).clip(0).astype(np.int64)
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
        draw = _criteo_shaped if workload == "criteo-shaped" else _fields_100k
        train, held_out = draw(train_rows, "train", seed), draw(eval_rows, "eval", seed)
        meta = {"workload": workload, "seed": seed, "zipf": ZIPF, "ids_per_field": FIELD_IDS}
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
