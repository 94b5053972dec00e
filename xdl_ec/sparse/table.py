"""EmbeddingTable: a named sparse embedding table held in one native shard.

Rows live in stable slot records ``[key | flags | value | optimizer state]`` (see
``cpp/include/xdl_ec/record_layout.h``), which is what parity is computed over.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple, Union, cast

import numpy as np

from xdl_ec import _core
from xdl_ec.settings import checks
from xdl_ec.sparse import init, optim
from xdl_ec.sparse.memory_budget import TIER_COUNTS
from xdl_ec.sparse.row_rules import Admit, Evict
from xdl_ec.sparse.table_config import Table

__all__ = ["EmbeddingTable", "as_keys", "as_rows"]


def _type_name(value: Any) -> str:
    return type(value).__name__


def as_keys(keys: Any, name: str = "keys") -> np.ndarray:
    """Keys as a C-contiguous 1-D int64 array.

    Any integer dtype is converted to int64 (uint64 values wrap bit for bit, as hashed ids do); float,
    bool, object and string inputs raise TypeError naming the argument; scalars and other ranks raise
    ValueError. An int64 contiguous array is used as is (no copy).
    """
    if type(keys) is np.ndarray and keys.dtype == np.int64 and keys.ndim == 1 and keys.flags.c_contiguous:
        return keys  # what every call on the training path passes: nothing to check or convert
    array = np.asarray(keys)
    if array.size == 0 and not isinstance(keys, np.ndarray):
        array = array.astype(np.int64)  # an empty list has dtype float64
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers (int64 feature ids), got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}; use np.ravel for a batch of ids")
    if array.dtype == np.uint64:
        return np.ascontiguousarray(array).view(np.int64)
    return np.ascontiguousarray(array, dtype=np.int64)


def as_rows(rows: Any, n: int, width: int, name: str, width_name: str) -> np.ndarray:
    """Rows as a C-contiguous float32 array of shape (n, width); float16/float64 are converted."""
    array = np.asarray(rows)
    if array.dtype.kind != "f":
        raise TypeError(f"{name} must be floating point (float32 preferred), got dtype {array.dtype}")
    if array.shape != (n, width):
        raise ValueError(f"{name} must have shape (len(keys), {width_name}) = ({n}, {width}), got {array.shape}")
    if array.dtype == np.float32 and array.flags.c_contiguous:
        return array
    with np.errstate(over="ignore"):  # a value beyond float32 becomes Inf, which the core rejects by name
        return np.ascontiguousarray(array, dtype=np.float32)


def as_cells(cells: Any, name: str = "sketch") -> np.ndarray:
    """A sketch counter's cells as a C-contiguous 1-D uint16 array; other integer dtypes are converted when every
    value fits in [0, 65535], anything else raises (TypeError for non-integers, ValueError for shape or range)."""
    array = np.asarray(cells)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers (16-bit sketch cells), got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.dtype != np.uint16 and array.size and (array.min() < 0 or array.max() > 0xFFFF):
        raise ValueError(f"{name}: sketch cells are in [0, 65535], got values in [{array.min()}, {array.max()}]")
    return np.ascontiguousarray(array, dtype=np.uint16)


MAX_REPEATS = 1 << 16  # EmbeddingShard::kMaxRepeats


def as_repeats(repeats: Any, n: int) -> Optional[np.ndarray]:
    """A push's repeat counts as C-contiguous uint32[n], each in [1, MAX_REPEATS] (None stays None)."""
    if repeats is None:
        return None
    array = np.asarray(repeats)
    if array.dtype.kind not in "iu":
        raise TypeError(
            f"repeats must be integers (how many gradients each row of grads sums), got dtype {array.dtype}"
        )
    if array.shape != (n,):
        raise ValueError(f"repeats must have shape (len(keys),) = ({n},), got {array.shape}")
    if n and (array.min() < 1 or array.max() > MAX_REPEATS):
        raise ValueError(f"repeats must each be in [1, {MAX_REPEATS}], got values in [{array.min()}, {array.max()}]")
    return np.ascontiguousarray(array, dtype=np.uint32)


# rows per chunk of a key-order export (EmbeddingTable.key_order_chunks): ~10 MB of d16 Adagrad rows
KEY_ORDER_CHUNK = 65536


class EmbeddingTable:
    """A sparse embedding table: int64 keys -> ``dim`` float32 values plus optimizer state.

    A row is created on its first pull (or push), initialised from (seed, key) alone. ``push`` sums
    duplicate keys' gradients, then applies one optimizer step per unique key, as TensorFlow does.
    All batch calls run in C++ with the GIL released and are atomic with respect to each other.

    Input policy: keys as in :func:`as_keys`; grads/values/state floating point of shape
    (len(keys), dim or state_floats), converted to float32 and copied when non-contiguous; NaN or
    Inf gradients raise ValueError. Any rejected call leaves the table byte for byte unchanged.

    The table registers its shard in the process-wide registry (``handle``) for the TF ops, and
    unregisters it on :meth:`close` or garbage collection.
    """

    def __init__(
        self,
        name: str,
        dim: int,
        optimizer: Union[str, optim.Optimizer] = "adagrad",
        initializer: Union[str, init.Initializer] = "truncated_normal",
        seed: int = 0,
        block_slots: int = 1024,
        admit: Optional[Admit] = None,
        evict: Optional[Evict] = None,
        servers: int = 1,
        memory_budget: int = 0,
        spill_dir: Optional[str] = None,
    ) -> None:
        self._config = Table(
            name,
            dim,
            optimizer=optimizer,
            initializer=initializer,
            seed=seed,
            block_slots=block_slots,
            admit=admit,
            evict=evict,
        )
        self._name, self._dim, self._seed = name, int(dim), int(seed)
        # Table made both objects (a name is looked up there)
        self._optimizer = cast(optim.Optimizer, self._config.optimizer)
        self._initializer = cast(init.Initializer, self._config.initializer)
        self._servers = checks.positive_int("servers", servers)
        config = self._config.shard_config(servers)  # servers: the even share of an Evict's max_rows
        if memory_budget:  # the disk tier (xdl_ec.sparse.memory_budget): rows beyond the budget in spill_dir
            config.memory_budget = checks.positive_int("memory_budget", memory_budget)
            config.spill_dir = checks.non_empty_str("spill_dir", spill_dir)
        self._shard = _core.EmbeddingShard(config)
        self._step = 0
        self._step_lock = threading.Lock()
        self._handle: Optional[int] = _core.register_shard(self._shard)
        self._unregister = weakref.finalize(self, _core.unregister_shard, self._handle)

    @classmethod
    def from_config(
        cls, table: Table, servers: int = 1, memory_budget: int = 0, spill_dir: Optional[str] = None
    ) -> "EmbeddingTable":
        """An empty table built as ``table`` describes (as one of ``servers`` shards of it), with at most
        ``memory_budget`` bytes in RAM and the rest of its rows under ``spill_dir`` when the budget is not 0."""
        return cls(
            table.name,
            table.dim,
            optimizer=table.optimizer,
            initializer=table.initializer,
            seed=table.seed,
            block_slots=table.block_slots,
            admit=table.admit,
            evict=table.evict,
            servers=servers,
            memory_budget=memory_budget,
            spill_dir=spill_dir,
        )

    # ---- properties ----------------------------------------------------------------------------
    @property
    def config(self) -> Table:
        """The :class:`~xdl_ec.sparse.table_config.Table` this table was built from."""
        return self._config

    @property
    def name(self) -> str:
        return self._name

    @property
    def servers(self) -> int:
        """The servers this table is one shard of (an Evict's max_rows is shared evenly over them)."""
        return self._servers

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def optimizer(self) -> optim.Optimizer:
        return self._optimizer

    @property
    def initializer(self) -> init.Initializer:
        return self._initializer

    @property
    def record_bytes(self) -> int:
        """Bytes of one slot record: 12 + 4 * (dim + state_floats)."""
        return self._shard.record_bytes

    @property
    def state_floats(self) -> int:
        return self._shard.state_floats

    @property
    def shard(self) -> "_core.EmbeddingShard":
        return self._shard

    @property
    def handle(self) -> int:
        """The ShardRegistry handle of this table's shard (for the TF ops)."""
        if self._handle is None:
            raise ValueError(f"EmbeddingTable {self._name!r} is closed: it has no registry handle")
        return self._handle

    @property
    def step(self) -> int:
        """Pushes made with ``step=None`` so far: the next such push uses ``step + 1``."""
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        with self._step_lock:
            self._step = checks.non_negative_int("step", value)

    # ---- training path -------------------------------------------------------------------------
    def pull(self, keys: Any) -> np.ndarray:
        """Rows of ``keys`` as float32[len(keys), dim], inserting missing keys with their initial rows."""
        return self._shard.pull(as_keys(keys))

    def find(self, keys: Any) -> Tuple[np.ndarray, np.ndarray]:
        """(rows, found) without inserting: rows of missing keys are zeros and found is False there."""
        return self._shard.find(as_keys(keys))

    def push(self, keys: Any, grads: Any, step: Optional[int] = None, repeats: Any = None, ttl_before: int = 0) -> None:
        """Applies gradients: duplicate keys summed, then one optimizer step per unique key.

        ``step`` is the 1-based global step (Adam's bias correction); None uses the table's own counter,
        advanced by one per successful push. ``repeats`` (ints, one per row): grads[i] sums repeats[i]
        gradients (a worker cache's write-back), and each key takes as many steps of its mean gradient.
        ``ttl_before`` (in [0, step]): when the push ends with an eviction pass, the rows last updated before that
        step go too (an ``Evict(ttl_seconds)`` cutoff, :mod:`xdl_ec.ps.step_times`); 0: none."""
        keys = as_keys(keys)
        grads = as_rows(grads, len(keys), self._dim, "grads", "dim")
        repeats = as_repeats(repeats, len(keys))
        if type(ttl_before) is not int:
            ttl_before = checks.non_negative_int("ttl_before", ttl_before)
        if step is not None:
            self._shard.push(keys, grads, checks.positive_int("step", step), repeats=repeats, ttl_before=ttl_before)
            return
        with self._step_lock:
            self._shard.push(keys, grads, self._step + 1, repeats=repeats, ttl_before=ttl_before)
            self._step += 1

    def erase(self, keys: Any) -> int:
        """Removes the rows of ``keys`` that exist (their slots become free); returns how many."""
        return self._shard.erase(as_keys(keys))

    def __len__(self) -> int:
        return len(self._shard)

    # ---- bounded tables (xdl_ec.sparse.row_rules) ------------------------------------------------------
    def evict(self, step: int) -> Dict[str, Any]:
        """One eviction pass at ``step`` now (besides the ones pushes run every ``Evict.every_steps``):
        {"ttl", "l2", "cap": rows freed for each reason, "keys": int64 keys freed, in slot order}."""
        return dict(self._shard.evict(checks.positive_int("step", step)))

    def bounded_report(self) -> Dict[str, Any]:
        """The report's entry of this table: {"rows", "admitted", "not_admitted_lookups", "evicted": {"ttl", "l2",
        "cap"}, "bytes"}; "rows" are rows (ids still counting toward admission are not), "bytes" what the shard
        holds (slots, index, free list). Counters are this shard's since it was made."""
        p = self._shard.policy_stats()
        m = self._shard.memory()
        return {
            "rows": int(p["rows"]),
            "admitted": int(p["admitted"]),
            "not_admitted_lookups": int(p["not_admitted_lookups"]),
            "evicted": {"ttl": int(p["evicted_ttl"]), "l2": int(p["evicted_l2"]), "cap": int(p["evicted_cap"])},
            "bytes": int(m["slot_bytes"] + m["index_bytes"] + m["free_list_bytes"]),
        }

    def tier_counts(self) -> Dict[str, int]:
        """The disk tier's counts of a budgeted table (:mod:`xdl_ec.sparse.memory_budget`): rows in RAM and on
        disk, the spill file's bytes, the bytes read and written, and the rows the operations' fetch steps found in
        RAM (memory_hits) or read (memory_misses). Counts of this shard since it was made."""
        m = self._shard.memory()
        return {key: int(m[key]) for key in TIER_COUNTS}

    @property
    def tiered(self) -> bool:
        """Whether this table has a memory budget (rows beyond it on disk)."""
        return bool(self._shard.config.memory_budget)

    # ---- export / import -----------------------------------------------------------------------
    def export(self, with_words: bool = False) -> Dict[str, np.ndarray]:
        """Every live row: dict(keys=int64[n], values=float32[n, dim], state=float32[n, state_floats]); with
        ``with_words`` (a table with admit/evict rules) also uses=uint32[n] and last_step=int64[n], what eviction
        decides on (:meth:`load_words` puts them back)."""
        if with_words:
            keys, values, state, uses, last_step = self._shard.export(with_words=True)
            return {"keys": keys, "values": values, "state": state, "uses": uses, "last_step": last_step}
        keys, values, state = self._shard.export()
        return {"keys": keys, "values": values, "state": state}

    def sorted_keys(self) -> np.ndarray:
        """The keys of every row (int64, ascending; a table with admission's pending ids left out): the index of a
        key-order export, 8 bytes a row (tiered: read a block at a time, never every row at once)."""
        return self._shard.sorted_keys()

    def export_keys(self, keys: Any) -> Dict[str, np.ndarray]:
        """The rows of ``keys`` in their order as :meth:`export` gives rows, keys that are no row left out: one chunk
        of a key-order export (tiered: read in one fetch step)."""
        keys, values, state = self._shard.export_keys(as_keys(keys))
        return {"keys": keys, "values": values, "state": state}

    def key_order_chunks(self, chunk_rows: int = KEY_ORDER_CHUNK) -> Iterator[Dict[str, np.ndarray]]:
        """Every row as :meth:`export`'s, but in ascending key order, ``chunk_rows`` at a time: what a digest or a
        copy of a table larger than RAM reads (its keys once, then one chunk of rows in RAM at a time)."""
        chunk_rows = checks.positive_int("chunk_rows", chunk_rows)
        keys = self.sorted_keys()
        for start in range(0, keys.size, chunk_rows):
            yield self.export_keys(keys[start : start + chunk_rows])

    def slot_rows(self, slots: Any) -> Dict[str, np.ndarray]:
        """The live rows in the slot records ``slots`` (slot numbers, ascending; free slots and those past
        the end are left out): dict(keys, values, state, clocks=int32 row clocks, slots). Rows keep their slot
        until erased and a clock changes with every mutation (record_layout.h), so (slot, clock) tells a reader
        whether a row it read has changed since (a resize's background copy, :mod:`xdl_ec.ps.background_move`)."""
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        if slots.size and (slots[0] < 0 or np.any(np.diff(slots) <= 0)):
            raise ValueError(f"table {self._name!r}: slots must be ascending and >= 0")
        width, dim = self._shard.record_bytes, self._dim
        records = np.empty((slots.size, width), np.uint8)
        # one read per run of nearby slots (a gap under 64 slots is read through): few calls for scattered rows
        breaks = np.flatnonzero(np.diff(slots) > 64) + 1 if slots.size else np.zeros(0, np.int64)
        for lo, hi in zip(np.r_[0, breaks], np.r_[breaks, slots.size]):
            if hi <= lo:
                continue
            first = int(slots[lo])
            run = self._shard.read_slots(first, int(slots[hi - 1]) - first + 1)
            records[lo:hi] = run[slots[lo:hi] - first]
        flags = np.ascontiguousarray(records[:, 8:12]).view(np.uint32).ravel()
        live = (flags & 1) == 1
        records = records[live]
        floats = np.ascontiguousarray(records[:, 12:]).view(np.float32)
        return {
            "keys": np.ascontiguousarray(records[:, :8]).view(np.int64).ravel(),
            "values": np.ascontiguousarray(floats[:, :dim]),
            "state": np.ascontiguousarray(floats[:, dim:]),
            "clocks": (flags[live] >> 1).astype(np.int32),
            "slots": slots[live],
        }

    @property
    def slot_end(self) -> int:
        """One past the last slot that may hold a row (the blocks covering the slot array's high-water mark)."""
        return int(self._shard.num_blocks) * int(self._shard.block_slots)

    def cut(self, whole: bool) -> Dict[str, np.ndarray]:
        """The rows an incremental reader (a backstop's cut, an export's delta) takes: with ``whole`` every row (and
        change tracking starts from here), else the rows changed since the previous cut. A bounded table's whole
        cut adds its rows' eviction words and its pending ids (pending_keys / pending_uses / pending_last_step), which
        :meth:`load_rows` takes back."""
        if not whole:
            return dict(zip(("keys", "values", "state"), self._shard.take_dirty()))
        self._shard.track_dirty(True)
        if not self._config.bounded:
            return self.export()
        out = self.export(with_words=True)
        out.update(zip(("pending_keys", "pending_uses", "pending_last_step"), self._shard.export_pending()))
        if self._shard.sketch_slots:  # a sketch counter's cells (uint16), whole
            out["sketch"] = self._shard.export_sketch()
        return out

    def load_rows(self, rows: Mapping[str, np.ndarray]) -> None:
        """Loads a save's rows of this table (dict keys, values, state, and for a bounded table possibly uses,
        last_step and pending_keys / pending_uses / pending_last_step, as a checkpoint holds them)."""
        self.load(rows["keys"], rows["values"], rows["state"])
        if "uses" in rows and self._config.bounded:
            self.load_words(rows["keys"], rows["uses"], rows["last_step"])
            if "pending_keys" in rows and len(rows["pending_keys"]):
                self._shard.load_pending(
                    as_keys(rows["pending_keys"], "pending_keys"),
                    np.ascontiguousarray(rows["pending_uses"], dtype=np.uint32),
                    as_keys(rows["pending_last_step"], "pending_last_step"),
                )
            if "sketch" in rows and self._shard.sketch_slots:  # added to the cells: several saves' parts sum
                self._shard.load_sketch(as_cells(rows["sketch"]))

    def load_words(self, keys: Any, uses: Any, last_step: Any) -> None:
        """Sets the eviction words (uses, last_step) of rows that exist, e.g. after :meth:`load` of an export
        taken ``with_words``; a key without a row or a negative step raises ValueError, changing nothing."""
        keys = as_keys(keys)
        counts = np.asarray(uses)
        if counts.dtype.kind not in "iu" or (counts.size and (counts.min() < 0 or counts.max() > 0xFFFFFFFF)):
            raise ValueError(f"table {self._name!r}: uses must be integers in [0, 2^32 - 1], got dtype {counts.dtype}")
        uses = np.ascontiguousarray(counts, dtype=np.uint32)
        last_step = as_keys(last_step, "last_step")  # int64, the same checks as keys
        self._shard.load_policy_words(keys, uses, last_step)

    def load(self, keys: Any, values: Any, state: Any = None) -> None:
        """Inserts or overwrites rows (keys unique); ``state=None`` gives them fresh optimizer state."""
        keys = as_keys(keys)
        values = as_rows(values, len(keys), self._dim, "values", "dim")
        if state is not None:
            state = as_rows(state, len(keys), self.state_floats, "state", "state_floats")
        self._shard.load(keys, values, state)

    def replace(self, keys: Any, values: Any, state: Any) -> None:
        """Makes the table hold exactly these rows (a checkpoint restore): rows of other keys are erased, these
        are loaded with their values and optimizer state.

        Validated before anything changes (keys unique, shapes, finite floats), so a rejected call leaves the
        table as it was. Other threads' pulls and pushes may interleave with the erase and the load: replace at
        a quiescent point."""
        keys = as_keys(keys)
        values = as_rows(values, len(keys), self._dim, "values", "dim")
        state = as_rows(state, len(keys), self.state_floats, "state", "state_floats")
        duplicates = len(keys) - len(np.unique(keys))
        if duplicates:
            raise ValueError(f"table {self._name!r}: replace needs unique keys, got {duplicates} duplicate(s)")
        for what, rows in (("values", values), ("state", state)):
            if not np.isfinite(rows).all():
                raise ValueError(f"table {self._name!r}: replace got non-finite {what} (NaN or Inf)")
        stale = np.setdiff1d(self._shard.export()[0], keys, assume_unique=True)
        self._shard.erase(stale)
        self._shard.load(keys, values, state)

    def memory_stats(self) -> Dict[str, Any]:
        """Rows, slots and bytes held; ``index_overhead`` = index bytes / raw record bytes of live rows."""
        stats = dict(self._shard.memory())
        rows = stats["live_rows"]
        raw = rows * stats["record_bytes"]
        held = stats["slot_bytes"] + stats["index_bytes"] + stats["free_list_bytes"]
        stats["raw_bytes"] = raw
        stats["held_bytes"] = held
        stats["bytes_per_row"] = held / rows if rows else 0.0
        stats["index_bytes_per_row"] = stats["index_bytes"] / rows if rows else 0.0
        stats["index_overhead"] = stats["index_bytes"] / raw if raw else 0.0
        return stats

    # ---- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """Unregisters the shard from the registry (the TF ops can no longer reach it). Idempotent."""
        self._unregister()
        self._handle = None

    def __enter__(self) -> "EmbeddingTable":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"EmbeddingTable(name={self._name!r}, dim={self._dim}, rows={len(self)}, "
            f"optimizer={self._optimizer!r}, initializer={self._initializer!r})"
        )
