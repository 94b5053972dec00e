"""A table group's part of a push and of a pull on the wire (issue #49): several tables of one dim in ONE array.

A group part is ``(tables, offsets, keys, grads, first_seq)``: table ``tables[t]``'s keys are
``keys[offsets[t]:offsets[t + 1]]`` (their gradients the same rows of ``grads``) and its push seq is
``first_seq + t`` (0 for every table when ``first_seq`` is 0), so each table keeps the seq, the replay check and the
forwarded mutations its own part would have. A group pull is ``(tables, offsets, keys, dim)``, answered with ONE
rows array [len(keys), dim] in the keys' order. A server's core serves both in one native call looping over the
tables (``ShardServer``, push_pull_message.h); its general path (the one-process backend, a pickled request) splits
them into the tables' own parts here. The first item, a tuple of table names where a plain part has one name, tells
them apart.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

import numpy as np

from xdl_ec.settings import checks
from xdl_ec.sparse.table import as_keys


def is_group(item: Sequence[Any]) -> bool:
    """Whether a push part or a pull request is a group's (its first item a tuple of table names)."""
    return len(item) > 0 and isinstance(item[0], tuple)


def _offsets(tables: Any, offsets: Any, size: int, what: str) -> Tuple[Tuple[str, ...], List[int]]:
    """The group's table names and its offsets as ints, checked (ValueError naming what is wrong)."""
    if not tables or not all(isinstance(t, str) for t in tables):
        raise ValueError(f"{what}: tables must be a non-empty tuple of table names, got {tables!r}")
    bounds = np.asarray(offsets)
    if bounds.shape != (len(tables) + 1,) or bounds.dtype.kind not in "iu":
        raise ValueError(
            f"{what} of tables {tables}: offsets must be {len(tables) + 1} ints (one more than its tables), "
            f"got {bounds.dtype} {bounds.shape}"
        )
    ends = bounds.tolist()
    if ends[0] != 0 or ends[-1] != size or any(b < a for a, b in zip(ends, ends[1:])):
        raise ValueError(
            f"{what} of tables {tables}: offsets must rise from 0 to its {size} keys without decreasing, got {ends}"
        )
    return tuple(tables), ends


def split_group_part(part: Sequence[Any]) -> List[tuple]:
    """A group part's tables' own parts ``(table, keys, grads, seq)``, in order (the general path's form)."""
    if len(part) != 5:
        raise ValueError(f"group push part: expected (tables, offsets, keys, grads, first_seq), got {len(part)} items")
    keys = as_keys(part[2])
    grads = np.asarray(part[3])
    if grads.ndim != 2 or grads.shape[0] != keys.size:
        raise ValueError(f"group push part: grads must be [len(keys), dim] = [{keys.size}, dim], got {grads.shape}")
    tables, ends = _offsets(part[0], part[1], keys.size, "group push part")
    first = part[4] if type(part[4]) is int and part[4] >= 0 else checks.non_negative_int("first_seq", part[4])
    return [
        (table, keys[ends[t] : ends[t + 1]], grads[ends[t] : ends[t + 1]], first + t if first else 0)
        for t, table in enumerate(tables)
    ]


def split_group_pull(request: Sequence[Any]) -> Tuple[List[Tuple[str, np.ndarray]], int]:
    """A group pull's tables' own pulls ``(table, keys)``, in order, and its dim."""
    if len(request) != 4:
        raise ValueError(f"group pull: expected (tables, offsets, keys, dim), got {len(request)} items")
    keys = as_keys(request[2])
    tables, ends = _offsets(request[0], request[1], keys.size, "group pull")
    dim = checks.positive_int("group pull: dim", request[3])
    return [(table, keys[ends[t] : ends[t + 1]]) for t, table in enumerate(tables)], dim
