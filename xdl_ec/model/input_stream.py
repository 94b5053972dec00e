"""InputStream: one worker's batches, from the job's ``input_fn(worker, num_workers)``, checked and prepared
(:class:`~xdl_ec.model.feature_batch.FeatureBatch`) on a background thread while the current step trains.

Position: the stream counts the batches it handed out. An arbitrary iterable cannot be rewound, so
:meth:`InputStream.seek` (a restarted worker continuing its predecessor's position, a rollback to a checkpoint, a
resumed run) calls ``input_fn`` again and skips that many batches: exact for any input_fn that yields the same
batches each time it is called with the same arguments (a seeded generator, a file, a ``tf.data`` pipeline
without reshuffling per call), at the cost of reading the skipped batches once more (reading, not training: the
skipped batches are neither checked nor looked up).

An input that knows where it is (an endless stream, :func:`xdl_ec.data.stream`) avoids that re-reading: when the
iterable ``input_fn`` returns has ``position_after(batches)`` (a JSON-able state after its ``batches``-th batch,
asked at a save) and ``resume_at(state)`` (called before iterating), a seek given that state resumes there, and so
does a rollback to a batch the input still knows the position of (a restarted worker, a new process, skips).
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from xdl_ec import _core
from xdl_ec.data.prefetcher import Prefetcher
from xdl_ec.model.feature import Feature
from xdl_ec.model.feature_batch import FeatureBatch, InputError
from xdl_ec.model.side_input import Input
from xdl_ec.model.table_groups import GroupKeys
from xdl_ec.settings import checks

PREFETCH_DEPTH = 2


class InputFnError(RuntimeError):
    """The job's input_fn raised, or returned something that is not iterable."""


class InputStream:
    """Batches of ``input_fn(worker, num_workers)`` for ``features``; iterate with :meth:`next`."""

    def __init__(
        self,
        input_fn: Callable[[int, int], Any],
        worker: int,
        num_workers: int,
        features: Sequence[Feature],
        track_fresh: bool = True,
        inputs: Sequence[Input] = (),
        heads: Optional[Sequence[str]] = None,
        grouped: bool = False,
    ) -> None:
        """``track_fresh``: mark each batch's keys the previous batch did not touch (FeatureBatch.fresh), for a
        worker that prefetches them; ``grouped``: batches in table groups (FeatureBatch.prepare)."""
        self._input_fn, self.worker, self.num_workers = input_fn, worker, num_workers
        self.track_fresh = track_fresh
        self.features = list(features)
        self.inputs, self.heads, self.grouped = list(inputs), heads, grouped
        self.position = 0  # batches handed out so far
        self._prefetch: Optional[Prefetcher] = None
        self._source: Any = None
        # wall seconds the input thread spent producing batches (the user's iterator, checks, unique ids)
        self.input_seconds = 0.0
        self.seek(0)

    def _batches(self, skip: int, state: Optional[Any] = None) -> Iterator[Any]:
        try:
            source = self._input_fn(self.worker, self.num_workers)
            if state is not None:
                if not callable(getattr(source, "resume_at", None)):
                    raise TypeError(
                        "the saved reader position carries the input's own position, but the iterable "
                        "input_fn returned has no resume_at(position)"
                    )
                source.resume_at(state)
            iterator = iter(source)
            self._source = source
        except Exception as err:  # noqa: BLE001 - user code: reported with its cause
            raise InputFnError(
                f"input_fn({self.worker}, {self.num_workers}) failed: {type(err).__name__}: {err}"
            ) from err
        ordinal = skip
        previous: dict = {}
        first: Any = None  # the first batch's heads and side inputs, which every later batch must keep
        began = time.perf_counter()  # reset after each yield: the time the consumer holds a batch is not ours
        for batch in _guarded(itertools.islice(iterator, 0 if state is not None else skip, None), self.worker, skip):
            ordinal += 1
            where = f"worker {self.worker}, step {ordinal}"
            prepared = FeatureBatch.prepare(batch, self.features, where, self.inputs, self.heads, grouped=self.grouped)
            kept = (prepared.heads, {name: a.dtype.name for name, a in prepared.inputs.items()})
            if first is None:
                first = kept
            elif kept != first:
                raise InputError(
                    f"{where}: the batch's heads {kept[0]} and side inputs' dtypes {kept[1]} differ from "
                    f"the first batch's ({first[0]}, {first[1]}); every batch must carry the same"
                )
            for table, keys in prepared.keys.items() if self.track_fresh else ():
                before = previous.get(table)
                if before is None:
                    prepared.fresh[table] = np.ones(keys.size, dtype=bool)
                elif isinstance(keys, GroupKeys):  # per table of the group, in one native pass
                    prepared.fresh[table] = _core.group_fresh(keys.keys, keys.offsets, before.keys, before.offsets)
                else:
                    prepared.fresh[table] = np.isin(keys, before, assume_unique=True, invert=True)
            previous = prepared.keys
            self.input_seconds += time.perf_counter() - began
            yield prepared
            began = time.perf_counter()

    def seek(self, position: int, state: Optional[Any] = None) -> int:
        """Continues after the first ``position`` batches (see the module docstring for the cost); ``state``: the
        input's own position after them (:meth:`input_position`), resumed without re-reading."""
        position = checks.integer("position", position, 0)
        if state is None and position > 0:
            # a rollback within this worker: the input may still know where that batch ended
            state = self._known_position(position)
        if self._prefetch is not None:
            self._prefetch.close()
        self._prefetch = Prefetcher(self._batches(position, state), depth=PREFETCH_DEPTH)
        self.position = position
        return position

    def _known_position(self, batches: int) -> Optional[Any]:
        try:
            return self.input_position(batches)
        except (KeyError, ValueError):  # not among the positions it keeps: skip to it instead
            return None

    def input_position(self, batches: int) -> Optional[Any]:
        """The input's own position after its ``batches``-th batch (None: the input does not know it)."""
        position_after = getattr(self._source, "position_after", None)
        return position_after(batches) if callable(position_after) else None

    def next(self) -> Optional[FeatureBatch]:
        """The next batch, or None once the input is exhausted; an input error is raised here, in order."""
        if self._prefetch is None:  # seek() in __init__ made it; close() keeps it
            return None
        batch = next(self._prefetch, None)
        if batch is not None:
            self.position += 1
        return batch

    def stats(self) -> dict:
        """What the input says of itself: its ``stats()`` when the iterable input_fn returned has one (e.g. the
        built-in Criteo input's bad lines), plus ``seconds``: the wall time the input thread spent producing
        batches (reading and preparing them)."""
        stats = getattr(self._source, "stats", None)
        return {**(dict(stats()) if callable(stats) else {}), "seconds": self.input_seconds}

    def close(self) -> None:
        if self._prefetch is not None:
            self._prefetch.close()


def _guarded(batches: Iterator[Any], worker: int, skip: int) -> Iterator[Any]:
    """``batches`` with a failure of the user's iterator named by worker and step."""
    step = skip
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except InputError:
            raise
        except Exception as err:  # noqa: BLE001
            raise InputFnError(
                f"worker {worker}, step {step + 1}: input_fn's iterator raised {type(err).__name__}: {err}"
            ) from err
        step += 1
        yield batch
