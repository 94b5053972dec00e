"""merge_key_order and streamed_model_digest: a table's rows merged from its sources in key order a chunk at a time
hash to model_digest's bytes over the whole exports, whatever the split and the chunk size; a key given twice or a
source out of order is an error."""

from __future__ import annotations

from typing import Dict, Iterator, List

import numpy as np
import pytest

from xdl_ec.model.digest import model_digest, streamed_model_digest
from xdl_ec.model.key_order_merge import merge_key_order


def rows(keys: np.ndarray, dim: int = 3, state_floats: int = 2) -> Dict[str, np.ndarray]:
    k = np.asarray(keys, dtype=np.int64)
    return {
        "keys": k,
        "values": (k[:, None] * 0.25 + np.arange(dim)).astype(np.float32),
        "state": (k[:, None] * -0.5 + np.arange(state_floats)).astype(np.float32),
    }


def chunks_of(export: Dict[str, np.ndarray], size: int) -> Iterator[Dict[str, np.ndarray]]:
    """``export``'s rows in ascending key order, ``size`` at a time (what a server's key-order export gives)."""
    order = np.argsort(export["keys"])
    for start in range(0, order.size, size):
        part = order[start : start + size]
        yield {f: a[part] for f, a in export.items()}


def split(keys: np.ndarray, parts: int, rng: np.random.Generator) -> List[np.ndarray]:
    owner = rng.integers(0, parts, keys.size)
    return [rng.permutation(keys[owner == p]) for p in range(parts)]


@pytest.mark.parametrize("sources,chunk", [(1, 7), (3, 1), (3, 5), (4, 64), (5, 1000)])
def test_the_streamed_digest_is_model_digest(sources: int, chunk: int) -> None:
    rng = np.random.default_rng(sources * 31 + chunk)
    tables = []
    for size in (200, 0, 57):  # a table with no row among them
        keys = rng.permutation(np.unique(rng.integers(-(2**62), 2**62, size, dtype=np.int64)))
        tables.append([rows(part) for part in split(keys, sources, rng)])
    weights, opt = [rng.standard_normal((4, 3)).astype(np.float32)], [np.array(9, np.int64)]
    whole = model_digest(tables, weights, opt)
    streams = [merge_key_order([chunks_of(e, chunk) for e in exports]) for exports in tables]
    assert streamed_model_digest(streams, weights, opt) == whole
    merged = list(merge_key_order([chunks_of(e, chunk) for e in tables[0]]))
    keys = np.concatenate([m["keys"] for m in merged])
    assert np.array_equal(keys, np.sort(np.concatenate([e["keys"] for e in tables[0]])))
    # a chunk per source at most, whatever the table's size
    assert max(m["keys"].size for m in merged) <= chunk * sources


def test_a_key_on_two_sources_is_an_error() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        list(merge_key_order([chunks_of(rows(np.array([1, 5, 9])), 2), chunks_of(rows(np.array([2, 5])), 2)]))
    with pytest.raises(ValueError, match="appears twice"):
        list(merge_key_order([iter([rows(np.array([1, 3])), rows(np.array([3, 4]))])]))


def test_a_source_out_of_key_order_is_an_error() -> None:
    with pytest.raises(ValueError, match="source 1 gave keys out of ascending order"):
        list(merge_key_order([iter([rows(np.array([1]))]), iter([rows(np.array([4, 2]))])]))
    with pytest.raises(ValueError, match="ascending order"):
        streamed_model_digest([[rows(np.array([5, 6])), rows(np.array([2]))]], [], [])


def test_empty_sources_and_chunks_add_nothing() -> None:
    e = rows(np.array([3, -1, 8]))
    empty = rows(np.zeros(0, np.int64))
    merged = list(merge_key_order([iter([empty]), iter([]), chunks_of(e, 2), iter([empty, empty])]))
    assert [m["keys"].tolist() for m in merged] == [[-1, 3], [8]]
    assert streamed_model_digest([merged, []], [], []) == model_digest([[e], []], [], [])
