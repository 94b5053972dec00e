"""A background thread that produces the next batches while the current step trains (the step runs in TF with
the GIL released, so the producer's numpy work overlaps it). Exceptions of the producer are re-raised in the
consumer, unchanged, at the position where they occurred."""

from __future__ import annotations

import queue
import threading
from typing import Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


class Prefetcher(Generic[T]):
    """Iterates ``source`` in a daemon thread, keeping up to ``depth`` items ready. Use as an iterator; call
    :meth:`close` (or exhaust it) to stop the thread early."""

    def __init__(self, source: Iterable[T], depth: int = 4) -> None:
        if depth < 1:
            raise ValueError(f"depth: must be >= 1, got {depth}")
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(iter(source),), name="xdl-ec-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, source: Iterator[T]) -> None:
        try:
            for item in source:
                if not self._put((item, None)):
                    return
        except BaseException as err:  # noqa: BLE001 - handed to the consumer as is
            self._put((_DONE, err))
            return
        self._put((_DONE, None))

    def __iter__(self) -> "Prefetcher[T]":
        return self

    def __next__(self) -> T:
        item, err = self._queue.get()
        if item is _DONE:
            self._stop.set()
            if err is not None:
                raise err
            raise StopIteration
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
