"""Table groups: the tables of one dim whose features a step looks up together (issue #49).

A wide model (tens to hundreds of tables) paid per table on every step: a unique, a pull and a push call, a TF
lookup op and its gradient each. A group turns those into one of each per dim: one unique pass over the group's
ids (``_core.group_sorted_unique``), one native pull and push carrying every table's keys (``_core.ShardGroup``),
one TF op gathering every feature and one gradient scatter (``xdl_ec.tf.tf_ops.group_gather``).

A group has two tables or more (a table alone in its dim steps on its own: one call either way). Exactness: a
table joins a group only when ONE feature looks it up and that feature's ids are one per example or a
fixed [B, n] (the features whose arithmetic the group's op repeats as is); each table keeps its own optimizer,
rules and seed, and its rows and row gradients are those of the ungrouped step bit for bit. Tables of several
features, sequences, ragged ids and ids of rank 3 keep their own entries.

A batch's group entry (:class:`GroupKeys`) stands where a table's unique keys stand in the step's dicts (keys,
rows, gradients) under the group's :attr:`TableGroup.name`.
"""

from __future__ import annotations

from typing import Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.model.feature import Feature

SINGLE, FIXED = "single", "fixed"  # FeatureIds kinds a group takes (feature_batch.py's names)
GROUP_PREFIX = "\x00group:d"  # a group's entry name: no table name starts so (checked at planning)


class TableGroup(NamedTuple):
    """The tables of one dim that go through one unique, pull, push and TF op per step: ``tables`` (job order),
    ``features`` (the one feature of each, same order), their ``widths`` (ids per example) and ``modes``
    ("single", or the feature's combiner: "none", "sum", "mean", "sqrtn"). A tuple: part of a batch's signature,
    which a save writes as JSON and reads back as plain tuples (equal to these)."""

    name: str
    dim: int
    tables: Tuple[str, ...]
    features: Tuple[str, ...]
    widths: Tuple[int, ...]
    modes: Tuple[str, ...]


class GroupKeys:
    """A batch's unique keys of a group: every table's, ascending within each, tables in group order;
    ``offsets`` int64 [tables + 1] where each table's part starts and ends."""

    __slots__ = ("keys", "offsets", "group")

    def __init__(self, keys: np.ndarray, offsets: np.ndarray, group: TableGroup) -> None:
        self.keys, self.offsets, self.group = keys, offsets, group

    @property
    def size(self) -> int:
        return int(self.keys.size)

    def __len__(self) -> int:
        return int(self.keys.size)

    def select(self, mask: np.ndarray) -> "GroupKeys":
        """The keys where ``mask`` (bool [size]) holds, with their tables' offsets."""
        kept = np.concatenate([[0], np.cumsum(mask, dtype=np.int64)])[self.offsets]
        return GroupKeys(self.keys[mask], kept, self.group)


def plan_groups(
    features: Sequence[Feature], kinds: Mapping[str, Tuple[str, Optional[int]]], reserved: Sequence[str]
) -> Tuple[TableGroup, ...]:
    """The groups of ``features`` given each feature's (kind, width) in a batch (width: ids per example, None where
    a group cannot take the feature), one per dim with at least one
    table that qualifies (see the module docstring), tables in the order their features are declared; ``reserved``:
    the job's table names, which a group's name must not take. A dim with one such table forms no group."""
    served: Dict[str, int] = {}
    for f in features:
        served[f.table.name] = served.get(f.table.name, 0) + 1
    members: Dict[int, list] = {}
    for f in features:
        kind, width = kinds[f.name]
        if served[f.table.name] != 1 or f.sequence or kind not in (SINGLE, FIXED) or not isinstance(width, int):
            continue
        mode = "single" if kind == SINGLE else (f.combiner or "none")
        members.setdefault(f.table.dim, []).append((f.table.name, f.name, width, mode))
    taken = set(reserved)
    groups = []
    for dim, parts in members.items():
        if len(parts) < 2:
            continue
        name = f"{GROUP_PREFIX}{dim}"
        while name in taken:
            name += "'"
        taken.add(name)
        tables, names, widths, modes = zip(*parts)
        groups.append(TableGroup(name, dim, tables, names, widths, modes))
    return tuple(groups)
