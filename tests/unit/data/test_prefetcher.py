"""Prefetcher: order kept, producer exceptions re-raised in place, early close stops the thread."""

from __future__ import annotations

import threading
from typing import Iterator

import pytest

from xdl_ec.data import Prefetcher


def test_yields_every_item_in_order() -> None:
    assert list(Prefetcher(range(100), depth=3)) == list(range(100))
    assert list(Prefetcher([], depth=1)) == []


def test_producer_exception_is_raised_after_the_items_before_it() -> None:
    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise KeyError("boom")

    got = []
    with pytest.raises(KeyError, match="boom"):
        for item in Prefetcher(source()):
            got.append(item)
    assert got == [1, 2]


def test_close_stops_an_endless_producer() -> None:
    def endless() -> Iterator[int]:
        i = 0
        while True:
            yield i
            i += 1

    before = threading.active_count()
    prefetcher = Prefetcher(endless(), depth=2)
    assert [next(prefetcher) for _ in range(5)] == [0, 1, 2, 3, 4]
    prefetcher.close()
    assert not prefetcher._thread.is_alive()
    assert threading.active_count() == before


def test_bad_depth() -> None:
    with pytest.raises(ValueError, match="depth"):
        Prefetcher(range(3), depth=0)
