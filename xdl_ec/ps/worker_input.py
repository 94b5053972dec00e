"""WorkerInput: a worker's share of the job's input and the batch it trains next.

The batches come from ``input_fn(index, count)`` through an :class:`~xdl_ec.model.input_stream.InputStream`, which
checks and prepares them on a thread of its own (unique keys per table, where each feature's ids' rows are, and
the keys the previous batch did not touch) while the worker's steps train.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from xdl_ec.model.feature_batch import FeatureBatch
from xdl_ec.model.input_stream import InputStream
from xdl_ec.model.job_spec import JobSpec


class WorkerInput:
    """Worker ``index`` of ``count``'s batches of ``job``; ``track_fresh``: mark the keys each batch's predecessor
    did not touch (the part of its rows a pull during the previous step may fetch); ``grouped``: batches in table
    groups (:mod:`xdl_ec.model.table_groups`), for a client that steps them."""

    def __init__(self, job: JobSpec, index: int, count: int, track_fresh: bool, grouped: bool = False) -> None:
        self._stream = InputStream(
            job.input_fn,
            index,
            count,
            job.features,
            track_fresh=track_fresh,
            inputs=job.inputs,
            heads=job.heads,
            grouped=grouped,
        )
        # the batch the next step trains (None: the input is exhausted); the step reads its successor early
        self.current: Optional[FeatureBatch] = self._stream.next()

    def read_next(self) -> Optional[FeatureBatch]:
        """The batch after :attr:`current` (None at the input's end), read while :attr:`current` trains; the step
        makes it :attr:`current` once it is done."""
        return self._stream.next()

    @property
    def position(self) -> int:
        """Batches trained so far (the reader position)."""
        return self._stream.position - (1 if self.current is not None else 0)

    def input_position(self) -> Optional[Any]:
        """The input's own position after the batches trained, for a save; None when the input does not know it
        (then a resume skips batches)."""
        return self._stream.input_position(self.position)

    def seek(self, position: int, state: Optional[Any] = None) -> Optional[FeatureBatch]:
        """Continues from the ``position``-th batch (``state``: the input's own position there, from a save);
        returns the new :attr:`current`."""
        self._stream.seek(position, state)
        self.current = self._stream.next()
        return self.current

    def stats(self) -> Dict[str, Any]:
        """The input's own stats and the seconds its thread spent producing batches."""
        return self._stream.stats()

    def close(self) -> None:
        self._stream.close()
