"""TableTrackable: an :class:`~xdl_ec.sparse.table.EmbeddingTable` as a TensorFlow ``Trackable``, so TensorFlow's own
checkpoints (``tf.train.Checkpoint``, ``tf.train.CheckpointManager``) carry the table with no extra call.

One snapshot of the table, saved as these entries (``SparseEmbedding.save_own_variables`` writes the same ones
into Keras weight files)::

    keys       int64[n]                   every live row's key (EmbeddingTable.export order)
    values     float32[n, dim]
    state      float32[n, state_floats]   optimizer state
    step       int64 scalar               EmbeddingTable.step (pushes made with step=None)
    auto_step  int64 scalar               the TF ops' automatic step counter of the table's handle (lookups with
                                          step=0, as SparseEmbedding in model.fit); it lives in the op library
                                          and a new table would start it again at 1, changing Adam's updates
    spec       uint8[k]                   JSON text: format, table name, dim, state_floats, optimizer class
                                          (bytes, not a string tensor: Keras weight stores take numbers only)

Restore checks the spec, dtypes and shapes against the target table BEFORE anything changes (a mismatch raises
ValueError naming the table and what differs), then the table holds exactly the saved rows (rows created since
the save are erased), byte-identical values and state, and both step counters, so training continues as if the
save had never happened. Save and restore at a quiescent point (no lookup or update of the table in flight).

A table shared by several layers has ONE TableTrackable (:meth:`TableTrackable.of`), so a TF checkpoint holds it
once. The snapshot is built in Python from the live table: checkpoints are written and read eagerly, and SavedModels
(which trace saving into graphs) leave the table out.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any, Dict, Mapping

import numpy as np
import tensorflow as tf

from xdl_ec.sparse.table import EmbeddingTable
from xdl_ec.tf import tf_ops

__all__ = ["FORMAT", "ENTRIES", "TableTrackable"]

FORMAT = 1
ENTRIES = ("keys", "values", "state", "step", "auto_step", "spec")

# id(table) -> its TableTrackable. Values are weak and each holds its table, so an id cannot be reused while its
# entry lives.
_instances: "weakref.WeakValueDictionary[int, TableTrackable]" = weakref.WeakValueDictionary()
_instances_lock = threading.Lock()


class TableTrackable(tf.__internal__.tracking.Trackable):
    """The checkpointable state of one :class:`~xdl_ec.sparse.table.EmbeddingTable`: rows, optimizer state, step
    counters.

    Track it as an attribute of a TF/Keras object (``SparseEmbedding`` does) and ``tf.train.Checkpoint`` saves
    and restores the table with the rest of the model.
    """

    def __init__(self, table: EmbeddingTable) -> None:
        if not isinstance(table, EmbeddingTable):
            raise TypeError(f"TableTrackable needs an xdl_ec.EmbeddingTable, got {type(table).__name__}")
        self._table = table

    @classmethod
    def of(cls, table: EmbeddingTable) -> "TableTrackable":
        """The one TableTrackable of ``table`` (created on first use): layers sharing a table share it."""
        with _instances_lock:
            trackable = _instances.get(id(table))
            if trackable is None or trackable.table is not table:
                trackable = cls(table)
                _instances[id(table)] = trackable
            return trackable

    @property
    def table(self) -> EmbeddingTable:
        return self._table

    # ---- snapshot / restore (numpy; shared by TF checkpoints and Keras weight files) --------------------------
    def snapshot(self) -> Dict[str, np.ndarray]:
        """The entries of :data:`ENTRIES` for the table as it is now."""
        table = self._table
        rows = table.export()
        spec = {
            "format": FORMAT,
            "table": table.name,
            "dim": table.dim,
            "state_floats": table.state_floats,
            "optimizer": type(table.optimizer).__name__,
        }
        return {
            "keys": rows["keys"],
            "values": rows["values"],
            "state": rows["state"],
            "step": np.asarray(table.step, np.int64),
            "auto_step": np.asarray(self._auto_step(), np.int64),
            "spec": np.frombuffer(json.dumps(spec, sort_keys=True).encode(), np.uint8).copy(),
        }

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Makes the table what :meth:`snapshot` saw. Everything is checked first; on ValueError nothing changed."""
        table = self._table
        where = f"restoring embedding table {table.name!r}"
        missing = [name for name in ENTRIES if name not in saved]
        if missing:
            raise ValueError(
                f"{where}: the checkpoint lacks {missing} (saved entries: {sorted(saved)}); it was not "
                f"written from an xdl_ec table"
            )
        spec = _parse_spec(saved["spec"], where)
        where = f"{where} from the checkpoint of table {spec.get('table')!r}"
        if spec.get("format") != FORMAT:
            raise ValueError(f"{where}: unknown format {spec.get('format')!r} (this xdl_ec reads format {FORMAT})")
        optimizer = type(table.optimizer).__name__
        for what, have, want in (
            ("dim", table.dim, spec.get("dim")),
            ("optimizer", optimizer, spec.get("optimizer")),
            ("state_floats", table.state_floats, spec.get("state_floats")),
        ):
            if have != want:
                raise ValueError(
                    f"{where}: the checkpoint has {what} {want!r} but the table has {what} {have!r}; "
                    f"build the table with {what} {want!r} to restore it"
                )
        keys, values, state = (np.asarray(saved[name]) for name in ("keys", "values", "state"))
        if keys.dtype != np.int64 or keys.ndim != 1:
            raise ValueError(f"{where}: keys must be int64[n], got {keys.dtype}{list(keys.shape)}")
        n = len(keys)
        for name, array, width in (("values", values, table.dim), ("state", state, table.state_floats)):
            if array.dtype != np.float32 or array.shape != (n, width):
                raise ValueError(f"{where}: {name} must be float32{[n, width]}, got {array.dtype}{list(array.shape)}")
        step, auto_step = (_count(saved[name], name, where) for name in ("step", "auto_step"))
        handle = table.handle  # a closed table fails here, before anything changes
        try:
            table.replace(keys, values, state)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from None
        table.step = step
        tf_ops._ops.xdl_ec_set_auto_step(handle=tf.constant(handle, tf.int64), latest=tf.constant(auto_step, tf.int64))

    def _auto_step(self) -> int:
        return int(tf_ops._ops.xdl_ec_auto_step(handle=tf.constant(self._table.handle, tf.int64)))

    # ---- TensorFlow's Trackable saving API -------------------------------------------------------------------
    def _serialize_to_tensors(self) -> Dict[str, tf.Tensor]:
        # TF also calls this when restoring, for the entries' names and dtypes.
        _require_eager(self._table, "save")
        return {name: tf.constant(value) for name, value in self.snapshot().items()}

    def _restore_from_tensors(self, restored_tensors: Mapping[str, tf.Tensor]) -> None:
        # The restored tensors have the saved shapes (the row count is the saved table's).
        _require_eager(self._table, "restore")
        self.restore({name: tensor.numpy() for name, tensor in restored_tensors.items()})

    def __repr__(self) -> str:
        return f"TableTrackable({self._table!r})"


def _require_eager(table: EmbeddingTable, what: str) -> None:
    if not tf.executing_eagerly():
        raise RuntimeError(
            f"embedding table {table.name!r}: TF checkpoints {what} xdl_ec tables eagerly only (the "
            f"rows live outside TF); call Checkpoint.write/read outside tf.function"
        )


def _parse_spec(value: Any, where: str) -> Dict[str, Any]:
    raw = np.asarray(value)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise ValueError(
            f"{where}: the checkpoint's table spec must be uint8[k] (JSON text), got {raw.dtype}{list(raw.shape)}"
        )
    try:
        spec = json.loads(raw.tobytes())
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{where}: the checkpoint's table spec is not valid JSON ({err})") from None
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: the checkpoint's table spec must be a JSON object, got {spec!r}")
    return spec


def _count(value: Any, name: str, where: str) -> int:
    array = np.asarray(value)
    if array.shape != () or array.dtype.kind not in "iu" or int(array) < 0:
        raise ValueError(
            f"{where}: {name} must be an integer scalar >= 0, got {array.dtype}{list(array.shape)} {array!r}"
        )
    return int(array)
