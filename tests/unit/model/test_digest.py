"""model_digest: the documented byte order, independence from record placement, sensitivity to every part."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from xdl_ec.model.digest import model_digest


def export(keys: list[int], dim: int = 2, state_floats: int = 2, offset: float = 0.0) -> dict:
    k = np.array(keys, dtype=np.int64)
    return {
        "keys": k,
        "values": (k[:, None] + offset + np.arange(dim)).astype(np.float32),
        "state": (k[:, None] * 0.5 + np.arange(state_floats)).astype(np.float32),
    }


def test_documented_byte_order() -> None:
    e = export([7, -3])
    weights = [np.arange(3, dtype=np.float32)]
    opt = [np.array(4, dtype=np.int64)]
    expected = hashlib.sha256()
    for key in (-3, 7):  # sorted by key
        i = list(e["keys"]).index(key)
        expected.update(np.int64(key).astype("<i8").tobytes())
        expected.update(e["values"][i].astype("<f4").tobytes())
        expected.update(e["state"][i].astype("<f4").tobytes())
    expected.update(weights[0].astype("<f4").tobytes())
    expected.update(opt[0].astype("<i8").tobytes())
    assert model_digest([[e]], weights, opt) == expected.hexdigest()


def test_placement_does_not_matter_but_content_does() -> None:
    whole = export([1, 2, 3, 4])
    split = [export([4, 2]), export([3, 1])]
    weights, opt = [np.ones((2, 2), np.float32)], [np.zeros(2, np.float32)]
    base = model_digest([[whole]], weights, opt)
    assert model_digest([split], weights, opt) == base
    assert model_digest([[export([1, 2, 3, 4], offset=1e-7)]], weights, opt) != base
    flipped = export([1, 2, 3, 4])
    flipped["state"][2, 1] = np.nextafter(flipped["state"][2, 1], np.float32(1e9))
    assert model_digest([[flipped]], weights, opt) != base
    assert model_digest([[whole]], [np.ones((2, 2), np.float32) * 2], opt) != base
    assert model_digest([[whole]], weights, [np.ones(2, np.float32)]) != base
    with pytest.raises(ValueError, match="twice"):
        model_digest([[export([1, 2]), export([2])]], weights, opt)


def test_tables_are_hashed_in_order_and_one_table_keeps_its_bytes() -> None:
    a, b = export([1, 2]), export([3])
    weights, opt = [np.ones(2, np.float32)], [np.zeros(1, np.float32)]
    assert model_digest([[a], [b]], weights, opt) != model_digest([[b], [a]], weights, opt)
    # one table split over shards: the same bytes as the table whole
    assert model_digest([[export([1, 2, 3])]], weights, opt) == model_digest([[a, b]], weights, opt)


def test_an_empty_shard_adds_nothing() -> None:
    empty = {
        "keys": np.zeros(0, np.int64),
        "values": np.zeros((0, 2), np.float32),
        "state": np.zeros((0, 2), np.float32),
    }
    weights, opt = [np.ones(2, np.float32)], [np.zeros(1, np.float32)]
    assert model_digest([[export([5, 1]), empty]], weights, opt) == model_digest([[export([5, 1])]], weights, opt)
    assert model_digest([[empty]], weights, opt) == model_digest([[]], weights, opt)
