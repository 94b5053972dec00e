"""Checkpoints of embedding shards and of the whole job, saved atomically and verified on load.

Two levels:

* :class:`ShardCheckpoint`: the tables of ONE parameter server (every live record's key, values and optimizer
  state per table; optionally only some keys, a CPR partial save). Self-contained, so a single server can reload
  its own part (CPR) without reading anyone else's.
* :class:`CheckpointStore` / :class:`JobCheckpoint`: the job-level checkpoint of the ``ckpt`` strategy: one
  ShardCheckpoint per server plus the dense parameters, the dense optimizer state, the reader position and the
  step, committed together.

The contract: a checkpoint is published by one ``rename`` after every file is fsync'ed, so a crash leaves the
previous one the latest; every file is listed with its size and sha256 in a self-checksummed manifest; loading
verifies everything before it creates anything and raises ValueError naming the file, changing no state. The
caller saves at a quiescent point (between steps, no push in flight), so every table, server and the dense state
belong to one step. The on-disk format (version 1), atomicity, loading and what a restored record keeps:
docs/design/checkpoints.md.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Self, Sequence, Set, Tuple, Union

import numpy as np

from xdl_ec import _core
from xdl_ec.settings import checks
from xdl_ec.sparse.table import EmbeddingTable, as_keys

__all__ = [
    "ShardCheckpoint",
    "JobCheckpoint",
    "PendingCheckpoint",
    "CheckpointStore",
    "Table",
    "fresh_table",
    "FORMAT_VERSION",
]

FORMAT_VERSION = 1
MANIFEST = "MANIFEST.json"
_CHUNK = 1 << 24  # hash and write in 16 MiB pieces: one pass over the bytes, bounded extra memory
# numpy parses a .npy header with ast.literal_eval, and CPython 3.11's AST constructor keeps its recursion depth in
# interpreter-wide state: servers restoring in several threads at once could fail with "SystemError: AST
# constructor recursion depth mismatch" (python/cpython#106905). One header parse at a time.
_HEADER_PARSE = threading.Lock()

#: What a server holds per table: the Python table or the bare native shard.
Table = Union[EmbeddingTable, "_core.EmbeddingShard"]
#: Update counts of keys (e.g. ``AccessCounter.get``): int64[len(keys)] for int64 keys.
UpdateCounts = Callable[[np.ndarray], np.ndarray]


# ---- files --------------------------------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_array(path: Path, array: np.ndarray) -> Dict[str, Any]:
    """Writes ``array`` as a .npy file (fsync'ed); returns its manifest entry (bytes, sha256, dtype, shape)."""
    array = np.ascontiguousarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    digest = hashlib.sha256(header.getvalue())
    data = memoryview(array.reshape(-1).view(np.uint8).data) if array.size else memoryview(b"")
    # sha256 and the write both release the GIL: hash on a second thread while this one writes.
    hasher = threading.Thread(target=digest.update, args=(data,)) if len(data) >= _CHUNK else None
    if hasher is not None:
        hasher.start()
    else:
        digest.update(data)
    try:
        with open(path, "wb") as f:
            f.write(header.getvalue())
            for start in range(0, len(data), _CHUNK):
                f.write(data[start : start + _CHUNK])
            f.flush()
            os.fsync(f.fileno())
    finally:
        if hasher is not None:
            hasher.join()
    return {
        "bytes": len(header.getvalue()) + len(data),
        "sha256": digest.hexdigest(),
        "dtype": array.dtype.str,
        "shape": list(array.shape),
    }


def _read_array(path: Path, entry: Mapping[str, Any]) -> np.ndarray:
    """Reads a .npy file listed in a manifest, checking size, sha256, dtype and shape; ValueError names the file."""
    try:
        expected = int(entry["bytes"])
        want_sha, want_dtype, want_shape = str(entry["sha256"]), np.dtype(entry["dtype"]), tuple(entry["shape"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(
            f"{path}: its manifest entry is malformed ({e!r}); the checkpoint is damaged, load an older one"
        ) from None
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ValueError(f"{path}: file missing from the checkpoint; load an older checkpoint") from None
    if size != expected:
        what = "truncated" if size < expected else "longer than recorded"
        raise ValueError(
            f"{path}: {what} ({size} bytes, manifest says {expected}); the save was interrupted or "
            "the file was damaged, load an older checkpoint"
        )
    buf = np.empty(size, dtype=np.uint8)
    digest = hashlib.sha256()
    view = buf.data  # a writable memoryview of the buffer
    with open(path, "rb") as f:
        got = 0
        while got < size:
            n = f.readinto(view[got : got + _CHUNK])
            if not n:
                raise ValueError(f"{path}: truncated while reading ({got} of {size} bytes); load an older checkpoint")
            digest.update(view[got : got + n])
            got += n
    if digest.hexdigest() != want_sha:
        raise ValueError(
            f"{path}: sha256 mismatch (the bytes changed after the save); the file is corrupt, load an older checkpoint"
        )
    header = io.BytesIO(buf[: min(size, 4096)].tobytes())
    try:
        version = np.lib.format.read_magic(header)
        if version != (1, 0):
            raise ValueError(f"unsupported .npy version {version}")
        with _HEADER_PARSE:
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(header)
    except ValueError as e:
        raise ValueError(f"{path}: not a valid .npy array ({e}); load an older checkpoint") from None
    if fortran or dtype != want_dtype or tuple(shape) != want_shape or dtype.hasobject:
        raise ValueError(
            f"{path}: array header says dtype {dtype} shape {shape}, manifest says {want_dtype} "
            f"{want_shape}; the checkpoint is inconsistent, load an older one"
        )
    offset = header.tell()
    if size - offset != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise ValueError(
            f"{path}: data holds {size - offset} bytes, dtype {dtype} shape {shape} needs "
            f"{dtype.itemsize * int(np.prod(shape, dtype=np.int64))}; load an older checkpoint"
        )
    return buf[offset:].view(dtype).reshape(shape)


def _canonical(manifest: Mapping[str, Any]) -> bytes:
    return json.dumps(
        {k: v for k, v in manifest.items() if k != "checksum"}, sort_keys=True, separators=(",", ":")
    ).encode()


def _write_manifest(directory: Path, manifest: Dict[str, Any]) -> str:
    """Writes MANIFEST.json with its own checksum (fsync'ed); returns the file's sha256."""
    manifest = dict(manifest, checksum=hashlib.sha256(_canonical(manifest)).hexdigest())
    data = json.dumps(manifest, sort_keys=True, indent=1).encode()
    with open(directory / MANIFEST, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return hashlib.sha256(data).hexdigest()


def _read_manifest(directory: Path, kind: str) -> Dict[str, Any]:
    path = directory / MANIFEST
    if not directory.is_dir():
        raise ValueError(f"{directory}: checkpoint directory does not exist; check the path or save a checkpoint first")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(
            f"{path}: manifest missing (an incomplete or foreign directory); load another checkpoint"
        ) from None
    try:
        manifest = json.loads(data)
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: corrupt manifest ({e}); load an older checkpoint") from None
    if manifest.get("checksum") != hashlib.sha256(_canonical(manifest)).hexdigest():
        raise ValueError(
            f"{path}: manifest checksum mismatch (the manifest was modified or damaged); load an older checkpoint"
        )
    if manifest.get("format") != "xdl-ec-checkpoint" or manifest.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: not an xdl-ec checkpoint of format version {FORMAT_VERSION} (format "
            f"{manifest.get('format')!r}, version {manifest.get('version')!r})"
        )
    if manifest.get("kind") != kind:
        raise ValueError(f"{path}: a {manifest.get('kind')!r} checkpoint, expected a {kind!r} one")
    manifest["_sha256"] = hashlib.sha256(data).hexdigest()
    return manifest


def _publish(tmp: Path, final: Path) -> None:
    """The atomic step: fsync the finished temp dir, rename it into place, fsync the parent."""
    _fsync_dir(tmp)
    os.rename(tmp, final)
    _fsync_dir(final.parent)


def _json_checked(name: str, value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"{name} must be JSON-serialisable (ints, floats, strings, lists, dicts), got {type(value).__name__}: {e}"
        ) from None


# ---- tables ---------------------------------------------------------------------------------------
def _shard_of(table: Any, name: str) -> "_core.EmbeddingShard":
    if isinstance(table, EmbeddingTable):
        return table.shard
    if isinstance(table, _core.EmbeddingShard):
        return table
    raise TypeError(
        f"tables[{name!r}] must be an EmbeddingTable or an xdl_ec._core.EmbeddingShard, got {type(table).__name__}"
    )


def _config_record(shard: "_core.EmbeddingShard") -> Dict[str, Any]:
    config = shard.config
    return {
        "dim": int(shard.dim),
        "state_floats": int(shard.state_floats),
        "record_bytes": int(shard.record_bytes),
        "optimizer": config.optimizer.kind.name,
        "initializer": config.initializer.kind.name,
        "seed": int(config.seed),
        "block_slots": int(config.block_slots),
    }


def fresh_table(template: Table) -> Table:
    """An empty table configured like ``template`` (same kind of object), for a restore to load into: with its
    memory budget and spill dir too, so a restore into a budgeted server keeps its rows beyond the budget on disk."""
    if isinstance(template, EmbeddingTable):  # its rules and server share too (a bounded table)
        config = template.shard.config
        return EmbeddingTable.from_config(
            template.config, template.servers, memory_budget=config.memory_budget, spill_dir=config.spill_dir
        )
    if isinstance(template, _core.EmbeddingShard):
        return _core.EmbeddingShard(template.config)  # the shard's config holds its budget and spill dir
    raise TypeError(
        f"a restore template must be an EmbeddingTable or an xdl_ec._core.EmbeddingShard, got {type(template).__name__}"
    )


class _SavedCheckpoint:
    """A checkpoint directory whose manifest (of kind ``_kind``) was read and checked."""

    _kind = ""

    def __init__(self, directory: Path, manifest: Dict[str, Any]) -> None:
        self._dir = directory
        self._manifest = manifest

    @classmethod
    def open(cls, directory: Union[str, os.PathLike]) -> Self:
        """Opens a saved checkpoint (manifest checked; the array files are checked when read)."""
        directory = Path(directory)
        return cls(directory, _read_manifest(directory, cls._kind))

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def step(self) -> int:
        return int(self._manifest["step"])

    @property
    def extra(self) -> Dict[str, Any]:
        return dict(self._manifest.get("extra", {}))

    @property
    def manifest_sha256(self) -> str:
        """sha256 of MANIFEST.json (what a job manifest records of each server's part)."""
        return self._manifest["_sha256"]


class ShardCheckpoint(_SavedCheckpoint):
    """The saved tables of one parameter server (full, or a CPR partial save of some keys).

    Create with :meth:`write`, open with :meth:`open` (which checks the manifest); :meth:`read` verifies and
    returns one table's arrays, :meth:`restore` verifies every file, then builds fresh tables.
    """

    _kind = "shard"

    # ---- save -----------------------------------------------------------------------------------
    @classmethod
    def write(
        cls,
        directory: Union[str, os.PathLike],
        tables: Mapping[str, Table],
        *,
        step: int = 0,
        keys: Optional[Mapping[str, Any]] = None,
        update_counts: Optional[Mapping[str, UpdateCounts]] = None,
        atomic: bool = True,
        extra: Optional[Mapping[str, Any]] = None,
        rows: Optional[Mapping[str, Mapping[str, np.ndarray]]] = None,
    ) -> "ShardCheckpoint":
        """Saves ``tables`` into ``directory`` (which must not exist yet).

        Args:
          tables: name -> EmbeddingTable or _core.EmbeddingShard.
          step: the training step the state belongs to (after that step's pushes).
          keys: a partial save (CPR): name -> keys to save; tables absent from it are not saved, keys that are
            not in the table are skipped. None saves every row of every table.
          update_counts: name -> function giving int64 update counts of keys (e.g. ``AccessCounter.get``), saved
            beside the rows so a partial restore can count the updates it lost.
          atomic: write into a temporary sibling and rename (False when a job checkpoint's commit provides the
            atomicity, see :class:`PendingCheckpoint`).
          rows: name -> (keys, values, state) to save instead of the table's rows (a snapshot taken earlier, e.g.
            an incremental backstop's changed rows); ``tables`` then only gives each table's configuration, and
            tables absent from ``rows`` are not saved.
        """
        directory = Path(directory)
        if not isinstance(tables, Mapping) or not tables:
            raise ValueError("tables must be a non-empty mapping of table name -> EmbeddingTable/EmbeddingShard")
        step = checks.integer("step", step, 0)
        shards = {str(name): _shard_of(t, name) for name, t in tables.items()}
        if keys is not None:
            unknown = sorted(set(map(str, keys)) - set(shards))
            if unknown:
                raise ValueError(f"keys names tables {unknown} that are not in tables {sorted(shards)}")
            wanted = {str(name): as_keys(k, f"keys[{name!r}]") for name, k in keys.items()}
        if update_counts is not None:
            unknown = sorted(set(map(str, update_counts)) - set(shards))
            if unknown:
                raise ValueError(f"update_counts names tables {unknown} that are not in tables {sorted(shards)}")
        if directory.exists():
            raise ValueError(
                f"{directory}: already exists; a checkpoint is never written over another, choose a new directory"
            )
        target = directory
        if atomic:
            directory.parent.mkdir(parents=True, exist_ok=True)
            target = directory.parent / f".tmp-{directory.name}-{secrets.token_hex(4)}"
        target.mkdir(parents=True)
        try:
            manifest_tables: Dict[str, Any] = {}
            for i, (name, shard) in enumerate(shards.items()):
                if (keys is not None and name not in wanted) or (rows is not None and name not in rows):
                    continue
                if rows is not None:
                    k = as_keys(rows[name]["keys"], f"rows[{name!r}]['keys']")
                    values = np.ascontiguousarray(rows[name]["values"], dtype=np.float32).reshape(k.size, shard.dim)
                    state = np.ascontiguousarray(rows[name]["state"], dtype=np.float32).reshape(
                        k.size, shard.state_floats
                    )
                    given = rows[name]  # a bounded table's words and pending ids come with its rows, if at all
                    words: List[Any] = [given["uses"], given["last_step"]] if "uses" in given else []
                else:
                    k, values, state, *words = shard.export(with_words=bool(shard.config.row_policy.active))
                if keys is not None:
                    mask = np.isin(k, wanted[name])
                    k, values, state = k[mask], values[mask], state[mask]
                    words = [w[mask] for w in words]
                arrays = {"keys": k, "values": values, "state": state}
                if words:  # a bounded table (xdl_ec.sparse.row_rules): what its eviction and admission decide on
                    arrays["uses"] = np.ascontiguousarray(words[0], dtype=np.uint32)
                    arrays["last_step"] = np.ascontiguousarray(words[1], dtype=np.int64)
                    fields = ("pending_keys", "pending_uses", "pending_last_step")
                    if rows is not None:
                        pending = {f: rows[name][f] for f in fields} if fields[0] in rows[name] else {}
                    else:
                        pending = dict(zip(fields, shard.export_pending()))
                    if keys is not None:
                        held = np.isin(pending["pending_keys"], wanted[name])
                        pending = {field: array[held] for field, array in pending.items()}
                    dtypes = {"pending_keys": np.int64, "pending_uses": np.uint32, "pending_last_step": np.int64}
                    arrays.update({f: np.ascontiguousarray(a, dtype=dtypes[f]) for f, a in pending.items()})
                    # a sketch counter's cells (whole: a sketch cannot be split by key)
                    sketch = rows[name].get("sketch") if rows is not None else shard.export_sketch()
                    if sketch is not None and np.size(sketch):
                        arrays["sketch"] = np.ascontiguousarray(sketch, dtype=np.uint16)
                if update_counts is not None and name in update_counts:
                    counts = np.asarray(update_counts[name](k))
                    if counts.shape != k.shape or counts.dtype.kind not in "iu":
                        raise ValueError(
                            f"update_counts[{name!r}] must return an integer array of shape "
                            f"{k.shape}, got {counts.dtype} {counts.shape}"
                        )
                    arrays["updates"] = counts.astype(np.int64, copy=False)
                files = {}
                for field, array in arrays.items():
                    fname = f"table-{i:04d}.{field}.npy"
                    files[field] = dict(_write_array(target / fname, array), file=fname)
                table = tables[name]
                manifest_tables[name] = dict(
                    _config_record(shard),
                    rows=int(k.size),
                    files=files,
                    table_step=table.step if isinstance(table, EmbeddingTable) else None,
                )
                if "pending_keys" in arrays:
                    manifest_tables[name]["pending"] = int(arrays["pending_keys"].size)
                if "sketch" in arrays:
                    manifest_tables[name]["sketch_cells"] = int(arrays["sketch"].size)
            manifest = {
                "format": "xdl-ec-checkpoint",
                "version": FORMAT_VERSION,
                "kind": "shard",
                "step": step,
                "partial": keys is not None,
                "tables": manifest_tables,
                "extra": _json_checked("extra", dict(extra or {})),
            }
            _write_manifest(target, manifest)
            if atomic:
                _publish(target, directory)
            else:
                _fsync_dir(target)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return cls.open(directory)

    # ---- load -----------------------------------------------------------------------------------
    @property
    def partial(self) -> bool:
        return bool(self._manifest["partial"])

    @property
    def tables(self) -> List[str]:
        """Names of the saved tables."""
        return list(self._manifest["tables"])

    def rows(self, name: str) -> int:
        return int(self._table_entry(name)["rows"])

    def table_step(self, name: str) -> Optional[int]:
        """The EmbeddingTable's own push counter when saved (None for a bare shard)."""
        return self._table_entry(name).get("table_step")

    def nbytes(self) -> int:
        """Bytes of all array files."""
        return sum(int(f["bytes"]) for t in self._manifest["tables"].values() for f in t["files"].values())

    def _table_entry(self, name: str) -> Dict[str, Any]:
        try:
            return self._manifest["tables"][name]
        except KeyError:
            raise ValueError(
                f"{self._dir / MANIFEST}: no table {name!r} in this checkpoint (it holds {self.tables})"
            ) from None

    def read(self, name: str, template: Optional[Table] = None) -> Dict[str, np.ndarray]:
        """Verified arrays of one table: dict(keys, values, state[, updates]).

        With ``template`` also checks that the saved dim, state_floats and optimizer match it.
        """
        entry = self._table_entry(name)
        path = self._dir / MANIFEST
        try:
            dim, state_floats, rows = int(entry["dim"]), int(entry["state_floats"]), int(entry["rows"])
            files = dict(entry["files"])
            pending = int(entry.get("pending", 0))
            sketch_cells = int(entry.get("sketch_cells", 0))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: table {name!r} entry is malformed ({e!r}); load an older checkpoint") from None
        if template is not None:
            shard = _shard_of(template, name)
            want = _config_record(shard)
            for field in ("dim", "state_floats", "optimizer"):
                if entry.get(field) != want[field]:
                    raise ValueError(
                        f"{path}: table {name!r} was saved with {field}={entry.get(field)!r} but the "
                        f"target table has {field}={want[field]!r}; restore into a table configured "
                        "like the saved one"
                    )
        expected = {
            "keys": (np.dtype("<i8"), (rows,)),
            "values": (np.dtype("<f4"), (rows, dim)),
            "state": (np.dtype("<f4"), (rows, state_floats)),
            "updates": (np.dtype("<i8"), (rows,)),
            # bounded tables: eviction words of the rows, and the ids still counting toward admission
            "uses": (np.dtype("<u4"), (rows,)),
            "last_step": (np.dtype("<i8"), (rows,)),
            "pending_keys": (np.dtype("<i8"), (pending,)),
            "pending_uses": (np.dtype("<u4"), (pending,)),
            "pending_last_step": (np.dtype("<i8"), (pending,)),
            "sketch": (np.dtype("<u2"), (sketch_cells,)),  # a sketch counter's cells (row_policy.h)
        }
        missing = [f for f in ("keys", "values", "state") if f not in files]
        if missing:
            raise ValueError(f"{path}: table {name!r} lists no {missing} file; load an older checkpoint")
        out = {}
        for field, file_entry in files.items():
            if field not in expected:
                raise ValueError(f"{path}: table {name!r} lists an unknown file field {field!r}")
            dtype, shape = expected[field]
            file_path = self._dir / str(file_entry.get("file", ""))
            if np.dtype(file_entry.get("dtype", "V")) != dtype or tuple(file_entry.get("shape", ())) != shape:
                raise ValueError(
                    f"{file_path}: holds {file_entry.get('dtype')} {file_entry.get('shape')}, table "
                    f"{name!r} needs {dtype} {list(shape)} (dim {dim}, state_floats {state_floats}, "
                    f"{rows} rows); the checkpoint is inconsistent, load an older one"
                )
            out[field] = _read_array(file_path, file_entry)
        return out

    def restore(self, templates: Mapping[str, Table]) -> Dict[str, Table]:
        """Fresh tables (like each template) holding the saved rows; the caller swaps them in.

        Every saved table needs a template. All files are verified before any table is created, so a bad
        checkpoint raises ValueError and nothing is half-loaded. An EmbeddingTable also gets its step back.
        """
        arrays = self.verify(templates)
        out = {}
        for name, template in templates.items():
            if name not in arrays:
                continue
            table = fresh_table(template)
            self.load_rows(table, name, arrays[name])
            out[name] = table
        return out

    def verify(self, templates: Mapping[str, Table]) -> Dict[str, Dict[str, np.ndarray]]:
        """Reads and checks every saved table against its template: name -> arrays (see :meth:`read`)."""
        missing = [n for n in self.tables if n not in templates]
        if missing:
            raise ValueError(
                f"{self._dir / MANIFEST}: holds tables {missing} with no template among "
                f"{sorted(templates)}; pass a template for every saved table"
            )
        unsaved = [n for n in templates if n not in self.tables]
        if unsaved and not self.partial:
            raise ValueError(
                f"{self._dir / MANIFEST}: a full save without tables {unsaved} (it holds "
                f"{self.tables}); restore with the templates of the saved tables only"
            )
        return {name: self.read(name, templates[name]) for name in self.tables}

    def load_rows(self, table: Table, name: str, arrays: Mapping[str, np.ndarray]) -> None:
        """Loads verified arrays of table ``name`` into ``table`` (rows overwritten or inserted) and its step."""
        shard = _shard_of(table, name)
        shard.load(arrays["keys"], arrays["values"], arrays["state"])
        if "uses" in arrays and shard.config.row_policy.active:  # a bounded table's words and pending ids
            shard.load_policy_words(arrays["keys"], arrays["uses"], arrays["last_step"])
            if arrays["pending_keys"].size:
                shard.load_pending(arrays["pending_keys"], arrays["pending_uses"], arrays["pending_last_step"])
            if "sketch" in arrays:
                shard.load_sketch(arrays["sketch"])
        step = self.table_step(name)
        if isinstance(table, EmbeddingTable) and step is not None:
            table.step = int(step)

    def __repr__(self) -> str:
        kind = "partial" if self.partial else "full"
        return f"ShardCheckpoint({str(self._dir)!r}, step={self.step}, {kind}, tables={self.tables})"


# ---- the job-level checkpoint ---------------------------------------------------------------------
def _as_numpy(value: Any, name: str) -> np.ndarray:
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if array.dtype.hasobject or array.dtype.kind not in "biufc":
        raise TypeError(f"{name} must be a numeric array (or a variable with .numpy()), got dtype {array.dtype}")
    return array


class PendingCheckpoint:
    """A job checkpoint being written: servers save into :meth:`server_dir`, then :meth:`commit` publishes it.

    Transport-free: a server in another process only needs the directory path (a shared filesystem) and
    :meth:`ShardCheckpoint.write` with ``atomic=False``; the commit checks every part before the rename.
    """

    def __init__(self, store: "CheckpointStore", seq: int, step: int, tmp: Path) -> None:
        self._store, self._seq, self._step, self._tmp = store, seq, step, tmp
        self._done = False
        self._asked: Set[int] = set()  # servers handed a directory: the commit checks that each wrote its part

    @property
    def step(self) -> int:
        return self._step

    def server_dir(self, server: int) -> Path:
        """Where server ``server`` writes its ShardCheckpoint (``atomic=False``)."""
        server = checks.integer("server", server, 0)
        self._asked.add(server)
        return self._tmp / f"server-{server:04d}"

    def save_server(self, server: int, tables: Mapping[str, Table]) -> ShardCheckpoint:
        """Saves one server's tables into this checkpoint (in-process convenience)."""
        self._check_open()
        return ShardCheckpoint.write(self.server_dir(server), tables, step=self._step, atomic=False)

    def commit(
        self,
        *,
        dense_weights: Sequence[Any] = (),
        dense_optimizer: Sequence[Any] = (),
        reader_position: Optional[Mapping[str, Any]] = None,
        extra: Optional[Mapping[str, Any]] = None,
    ) -> "JobCheckpoint":
        """Writes the dense state and the manifest, then atomically publishes the checkpoint.

        Args:
          dense_weights: the dense parameters in order (arrays or anything with ``.numpy()``).
          dense_optimizer: the dense optimizer's variables in order.
          reader_position: where the data reader resumes (JSON: e.g. ``{"epoch": 1, "batch": 420}``).
        """
        self._check_open()
        try:
            servers = {}
            for entry in sorted(self._tmp.iterdir()):
                m = re.fullmatch(r"server-(\d{4})", entry.name)
                if m:
                    part = ShardCheckpoint.open(entry)
                    if part.step != self._step:
                        raise ValueError(f"{entry}: saved for step {part.step}, this checkpoint is step {self._step}")
                    servers[str(int(m.group(1)))] = {"dir": entry.name, "manifest_sha256": part.manifest_sha256}
            missing = sorted(s for s in self._asked if str(s) not in servers)
            if missing:
                raise ValueError(
                    f"{self._tmp}: servers {missing} were given a directory here and wrote nothing (a server that "
                    "sees another filesystem, or a relative path resolved elsewhere): not publishing this checkpoint"
                )
            (self._tmp / "dense").mkdir()
            files = {}
            for prefix, arrays in (("weight", dense_weights), ("optimizer", dense_optimizer)):
                for i, value in enumerate(arrays):
                    rel = f"dense/{prefix}-{i:04d}.npy"
                    array = _as_numpy(value, f"{'dense_weights' if prefix == 'weight' else 'dense_optimizer'}[{i}]")
                    files[rel] = dict(_write_array(self._tmp / rel, array), file=rel)
            _fsync_dir(self._tmp / "dense")
            manifest = {
                "format": "xdl-ec-checkpoint",
                "version": FORMAT_VERSION,
                "kind": "job",
                "seq": self._seq,
                "step": self._step,
                "servers": servers,
                "files": files,
                "num_weights": len(dense_weights),
                "num_optimizer": len(dense_optimizer),
                "reader_position": _json_checked("reader_position", dict(reader_position or {})),
                "extra": _json_checked("extra", dict(extra or {})),
            }
            _write_manifest(self._tmp, manifest)
            final = self._store.root / _job_name(self._seq, self._step)
            _publish(self._tmp, final)
        except BaseException:
            self.abort()
            raise
        self._done = True
        self._store._prune()
        return JobCheckpoint.open(final)

    def abort(self) -> None:
        """Discards the partial save (the previous checkpoint stays the latest)."""
        self._done = True
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _check_open(self) -> None:
        if self._done:
            raise ValueError(f"checkpoint of step {self._step} is already committed or aborted; begin a new one")


def _job_name(seq: int, step: int) -> str:
    return f"ckpt-{seq:06d}-step-{step:012d}"


_JOB_NAME = re.compile(r"ckpt-(\d{6,})-step-(\d{12,})")


class JobCheckpoint(_SavedCheckpoint):
    """A committed job checkpoint: step, reader position, dense state and one ShardCheckpoint per server."""

    _kind = "job"

    @property
    def seq(self) -> int:
        return int(self._manifest["seq"])

    @property
    def reader_position(self) -> Dict[str, Any]:
        return dict(self._manifest["reader_position"])

    @property
    def servers(self) -> List[int]:
        return sorted(int(s) for s in self._manifest["servers"])

    def server(self, server: int) -> ShardCheckpoint:
        """Server ``server``'s part, checked against the sha256 the job manifest recorded."""
        entry = self._manifest["servers"].get(str(server))
        if entry is None:
            raise ValueError(f"{self._dir / MANIFEST}: no server {server} in this checkpoint (it holds {self.servers})")
        part = ShardCheckpoint.open(self._dir / entry["dir"])
        if part.manifest_sha256 != entry["manifest_sha256"]:
            raise ValueError(
                f"{part.directory / MANIFEST}: sha256 differs from the one the job manifest "
                f"{self._dir / MANIFEST} recorded; the checkpoint is corrupt, load an older one"
            )
        return part

    def _dense(self, prefix: str, count: int) -> List[np.ndarray]:
        out = []
        for i in range(count):
            rel = f"dense/{prefix}-{i:04d}.npy"
            entry = self._manifest["files"].get(rel)
            if entry is None:
                raise ValueError(f"{self._dir / MANIFEST}: lists no {rel}; the checkpoint is damaged")
            out.append(_read_array(self._dir / rel, entry))
        return out

    def dense_weights(self) -> List[np.ndarray]:
        """The dense parameters, verified, in the saved order."""
        return self._dense("weight", int(self._manifest["num_weights"]))

    def dense_optimizer(self) -> List[np.ndarray]:
        """The dense optimizer variables, verified, in the saved order."""
        return self._dense("optimizer", int(self._manifest["num_optimizer"]))

    def restore(self, servers: Mapping[int, Mapping[str, Table]]) -> Dict[int, Dict[str, Table]]:
        """Fresh tables for every server (server id -> name -> template); verifies ALL parts first."""
        missing = [s for s in self.servers if s not in servers]
        if missing:
            raise ValueError(
                f"{self._dir / MANIFEST}: holds servers {missing} with no templates; pass templates for "
                f"every saved server ({self.servers})"
            )
        parts = {s: self.server(s) for s in self.servers}
        verified = {s: (part, part.verify(servers[s])) for s, part in parts.items()}
        out: Dict[int, Dict[str, Any]] = {}
        for s, (part, arrays) in verified.items():
            out[s] = {}
            for name, template in servers[s].items():
                if name in arrays:
                    table = fresh_table(template)
                    part.load_rows(table, name, arrays[name])
                    out[s][name] = table
        return out

    def __repr__(self) -> str:
        return f"JobCheckpoint({str(self._dir)!r}, seq={self.seq}, step={self.step}, servers={self.servers})"


class CheckpointStore:
    """A directory of job checkpoints: begin/commit saves, find the latest, load it, keep the last ``keep``.

    One writer at a time per root (the job's coordinator); readers may run at any time.
    """

    def __init__(self, root: Union[str, os.PathLike], keep: int = 2) -> None:
        keep = checks.integer("keep", keep, 1)
        # absolute: servers in other processes (Ray actors, whose working directory is not the driver's) write
        # into server_dir()'s paths
        self.root = Path(os.path.abspath(root))
        self.keep = keep

    def _committed(self) -> List[Path]:
        if not self.root.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.root.iterdir() if (m := _JOB_NAME.fullmatch(p.name))]
        return [p for _, p in sorted(found)]

    @staticmethod
    def _seq_and_step(path: Path) -> Tuple[int, int]:
        """(seq, step) of a committed checkpoint's directory (named as _JOB_NAME)."""
        match = _JOB_NAME.fullmatch(path.name)
        if match is None:
            raise ValueError(f"{path}: not a job checkpoint's directory (ckpt-SEQ-step-STEP)")
        return int(match.group(1)), int(match.group(2))

    def steps(self) -> List[int]:
        """Steps of the committed checkpoints, oldest first."""
        return [self._seq_and_step(p)[1] for p in self._committed()]

    def begin(self, step: int) -> PendingCheckpoint:
        """Starts the checkpoint of ``step``: removes leftovers of crashed saves, makes the temp dir."""
        step = checks.integer("step", step, 0)
        self.root.mkdir(parents=True, exist_ok=True)
        for leftover in self.root.glob(".tmp-ckpt-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        committed = self._committed()
        seq = self._seq_and_step(committed[-1])[0] + 1 if committed else 1
        tmp = self.root / f".tmp-ckpt-{seq:06d}-{secrets.token_hex(4)}"
        tmp.mkdir()
        return PendingCheckpoint(self, seq, step, tmp)

    def save(
        self,
        step: int,
        servers: Mapping[int, Mapping[str, Table]],
        *,
        dense_weights: Sequence[Any] = (),
        dense_optimizer: Sequence[Any] = (),
        reader_position: Optional[Mapping[str, Any]] = None,
        extra: Optional[Mapping[str, Any]] = None,
    ) -> JobCheckpoint:
        """The whole save in one process: every server's tables, the dense state, the reader position."""
        pending = self.begin(step)
        try:
            for server, tables in servers.items():
                pending.save_server(server, tables)
        except BaseException:
            pending.abort()
            raise
        return pending.commit(
            dense_weights=dense_weights, dense_optimizer=dense_optimizer, reader_position=reader_position, extra=extra
        )

    def latest(self) -> Optional[JobCheckpoint]:
        """The newest committed checkpoint (manifest checked), or None when there is none."""
        committed = self._committed()
        return JobCheckpoint.open(committed[-1]) if committed else None

    def load(self, step: Optional[int] = None) -> JobCheckpoint:
        """The newest checkpoint (of ``step`` when given); ValueError when there is none."""
        for path in reversed(self._committed()):
            if step is None or self._seq_and_step(path)[1] == step:
                return JobCheckpoint.open(path)
        what = "any step" if step is None else f"step {step}"
        raise ValueError(
            f"{self.root}: no committed checkpoint of {what} (found steps {self.steps()}); save one "
            "first or check the directory"
        )

    def _prune(self) -> None:
        for old in self._committed()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    def __repr__(self) -> str:
        return f"CheckpointStore({str(self.root)!r}, keep={self.keep}, steps={self.steps()})"
