"""SavedRun: a committed save of a run (``job.save``, ``--save-dir``), opened and checked for resuming or loading.

A save is a job checkpoint of :mod:`xdl_ec.keep.checkpoint` (one directory per save under the save root, the newest
``keep`` kept) whose manifest ``extra`` records what the save belongs to:

- ``job``: the job's tables and features (:meth:`~xdl_ec.model.job_spec.JobSpec.describe`): a resume or a load checks
  the job it is given against it, so rows never land in a table of another dim, optimizer or meaning;
- ``source``: how to rebuild the job without being given it (``{"script": path}`` for ``xdl-ec train --script``,
  ``{"builtin": config}`` for the built-in model, else None: then :func:`xdl_ec.load` needs ``job=``);
- ``seed``, ``deterministic``, ``workers``: a resume keeps them (the run's randomness and input split);
- ``samples``: samples trained up to the save (the report of a resumed run counts the whole run);
- ``signature``: the features' shapes the dense model was built for, so a load builds it without reading input.

The rows of every table are saved per server of the run that saved them; a resume on another number of servers
routes every row to its new server (:meth:`rows`), so a save is independent of the cluster's shape.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union

import numpy as np

from xdl_ec.keep.checkpoint import CheckpointStore, JobCheckpoint
from xdl_ec.model.job_spec import JobSpec

SAVE_FORMAT = "xdl-ec-save"


class SaveMismatch(ValueError):
    """A save that does not belong to the job (or the run settings) it is resumed or loaded with."""


class SavedRun:
    """The newest committed save under ``root`` (or the save directory itself); everything verified on read."""

    def __init__(self, checkpoint: JobCheckpoint) -> None:
        self.checkpoint = checkpoint
        extra = checkpoint.extra
        if extra.get("format") != SAVE_FORMAT:
            raise ValueError(
                f"{checkpoint.directory}: is a checkpoint but not a save of a run (no {SAVE_FORMAT!r} "
                f"record); --resume takes a --save-dir / job.save directory"
            )
        self._extra = extra

    @classmethod
    def open(cls, path: Union[str, os.PathLike]) -> "SavedRun":
        """``path``: a save root (its newest save is taken) or one save's directory."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such save directory (give the --save-dir of an earlier run)")
        if not path.is_dir():
            raise ValueError(f"{path}: is not a directory; a save is the directory --save-dir / job.save wrote")
        if (path / "MANIFEST.json").exists():
            return cls(JobCheckpoint.open(path))
        latest = CheckpointStore(path).latest()
        if latest is None:
            raise FileNotFoundError(
                f"{path}: holds no committed save (an interrupted save leaves only a hidden "
                f".tmp- directory); resume from another directory"
            )
        return cls(latest)

    # ---- what was saved ---------------------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        return self.checkpoint.directory

    @property
    def step(self) -> int:
        return self.checkpoint.step

    @property
    def job(self) -> Dict[str, Any]:
        return dict(self._extra["job"])

    @property
    def source(self) -> Optional[Dict[str, Any]]:
        return self._extra.get("source")

    @property
    def seed(self) -> int:
        return int(self._extra["seed"])

    @property
    def deterministic(self) -> bool:
        return bool(self._extra["deterministic"])

    @property
    def workers(self) -> int:
        return int(self._extra["workers"])

    @property
    def samples(self) -> int:
        return int(self._extra["samples"])

    @property
    def worker_batches(self) -> List[int]:
        return [int(n) for n in self.checkpoint.reader_position["worker_batches"]]

    @property
    def worker_inputs(self) -> List[Any]:
        """Each worker's input's own position (None where its input does not know one: it is skipped to)."""
        inputs = self.checkpoint.reader_position.get("worker_inputs")
        return list(inputs) if inputs is not None else [None] * len(self.worker_batches)

    @property
    def worker_samples(self) -> List[int]:
        return [int(n) for n in self.checkpoint.reader_position["worker_samples"]]

    @property
    def signature(self) -> Any:
        """The batch signature the dense model was built for (as :meth:`FeatureBatch.signature` gives it)."""
        return _tuples(self._extra["signature"])  # JSON gave lists

    def stopped_run(self) -> Optional[Dict[str, Any]]:
        """What the run that stopped after this save recorded (``STOPPED.json`` of :mod:`xdl_ec.keep.backstop`: its
        step,
        samples and cause), or None."""
        import json

        path = self.directory.parent / "STOPPED.json"
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text())
            return record if int(record["step"]) >= self.step else None  # an older run's record
        except (ValueError, KeyError, TypeError):
            return None

    def dense_state(self) -> tuple:
        """(dense weights, dense optimizer variables), verified."""
        return self.checkpoint.dense_weights(), self.checkpoint.dense_optimizer()

    # ---- checks -----------------------------------------------------------------------------------------
    def check_job(self, job: JobSpec) -> None:
        """SaveMismatch naming the first difference between the saved job's tables/features and ``job``'s."""
        saved, given = self.job, job.describe()
        where = self.directory / "MANIFEST.json"
        saved_tables = {t["name"]: t for t in saved["tables"]}
        given_tables = {t["name"]: t for t in given["tables"]}
        if set(saved_tables) != set(given_tables):
            raise SaveMismatch(
                f"{where}: saved by a job with tables {sorted(saved_tables)}, this job has "
                f"{sorted(given_tables)}: it is another job's save"
            )
        for name, table in given_tables.items():
            for key in sorted(set(table) | set(saved_tables[name])):
                if table.get(key) != saved_tables[name].get(key):
                    raise SaveMismatch(
                        f"{where}: table {name!r} was saved with {key}={saved_tables[name].get(key)!r}, "
                        f"this job declares {key}={table.get(key)!r}; resume with the job that saved it"
                    )
        if saved["features"] != given["features"]:
            raise SaveMismatch(
                f"{where}: saved by a job with features {saved['features']}, this job declares "
                f"{given['features']}; resume with the job that saved it"
            )

    def check_run(self, workers: int) -> None:
        """A resume splits the input over as many workers as the saved run did (each has its reader position)."""
        if workers != self.workers:
            raise SaveMismatch(
                f"{self.directory / 'MANIFEST.json'}: saved by a run of {self.workers} worker(s), "
                f"resumed with {workers}: each worker continues its own input, so resume with "
                f"--workers {self.workers}"
            )

    def verify(self) -> None:
        """Reads and checks every file of the save (and of the saves its rows build on) without loading anything."""
        for checkpoint in self._chain():
            for server in checkpoint.servers:
                part = checkpoint.server(server)
                for name in part.tables:
                    part.read(name)
        self.dense_state()

    # ---- rows -------------------------------------------------------------------------------------------
    def _chain(self) -> List[JobCheckpoint]:
        """The saves whose rows make this one's, oldest first: itself, or for an incremental backstop save the
        full save and the increments it builds on (see :mod:`xdl_ec.keep.backstop`)."""
        names = self._extra.get("backstop", {}).get("chain", [])
        chain = []
        for name in names:
            path = self.directory.parent / name
            if not path.is_dir():
                raise ValueError(
                    f"{self.directory}: an incremental save that builds on {path}, which is missing; "
                    f"resume from an older complete save"
                )
            chain.append(JobCheckpoint.open(path))
        return chain + [self.checkpoint]

    def rows(self, table: str) -> Iterator[Dict[str, np.ndarray]]:
        """The saved rows of ``table`` (keys, values, state), verified: one dict per saved server, or for an
        incremental save one dict merged over its chain (a key's newest row wins)."""
        chain = self._chain()
        parts = [c.server(s).read(table) for c in chain for s in c.servers if table in c.server(s).tables]
        if len(chain) == 1:
            yield from parts
            return
        if not parts:
            return
        merged = {field: np.concatenate([p[field] for p in parts]) for field in ("keys", "values", "state")}
        keys = merged["keys"]
        _, last = np.unique(keys[::-1], return_index=True)  # the first in reverse: each key's newest row
        newest = np.sort(keys.size - 1 - last)
        yield {field: array[newest] for field, array in merged.items()}

    def routed_rows(self, table: str, num_servers: int) -> Dict[int, Dict[str, np.ndarray]]:
        """The saved rows of ``table`` per server of a cluster of ``num_servers`` ({server: rows}, servers that get
        no row left out), routed as the workers route keys (``KeyRouter::ServerOf``)."""
        from xdl_ec import _core

        parts = list(self.rows(table))
        if not parts:
            return {}
        fields = ["keys", "values", "state"]
        if all("uses" in p for p in parts):  # a bounded table's eviction words travel with its rows
            fields += ["uses", "last_step"]
        rows = {field: np.concatenate([p[field] for p in parts]) for field in fields}
        owner = np.asarray(_core.server_of(rows["keys"], num_servers))
        pending: Dict[str, np.ndarray] = {}
        if all("pending_keys" in p for p in parts):  # and its ids still counting, routed by their own keys
            pending = {
                field: np.concatenate([p[field] for p in parts])
                for field in ("pending_keys", "pending_uses", "pending_last_step")
            }
        pending_owner = np.asarray(_core.server_of(pending["pending_keys"], num_servers)) if pending else None
        sketches = self._sketches(parts, num_servers)
        out = {}
        for server in range(num_servers):
            mine = owner == server
            theirs = pending_owner == server if pending_owner is not None else None
            if mine.any() or (theirs is not None and theirs.any()) or sketches:
                out[server] = {field: array[mine] for field, array in rows.items()}
                if theirs is not None:
                    out[server].update({field: array[theirs] for field, array in pending.items()})
                if sketches:
                    out[server]["sketch"] = sketches[server]
        return out

    def _sketches(self, parts: List[Dict[str, np.ndarray]], num_servers: int) -> List[np.ndarray]:
        """A sketch counter's cells per server of the new cluster (row_policy.h; [] when the table has none): at
        the saved server count each server its own saved cells, else each the cell-wise sum of all of them
        (sketches cannot be split by key; the sum over-estimates every id's count, never under-counts it)."""
        if not parts or not all("sketch" in p for p in parts):
            return []
        if self.checkpoint.servers == list(range(num_servers)) and len(parts) == num_servers:
            return [np.asarray(p["sketch"], np.uint16) for p in parts]
        total = np.sum([np.asarray(p["sketch"], np.int64) for p in parts], axis=0)
        return [np.minimum(total, 0xFFFF).astype(np.uint16)] * num_servers

    def __repr__(self) -> str:
        return f"SavedRun({str(self.directory)!r}, step={self.step}, servers={self.checkpoint.servers})"


def _tuples(value: Any) -> Any:
    """``value`` read from JSON with every list made a tuple again, as FeatureBatch.signature builds it."""
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value
