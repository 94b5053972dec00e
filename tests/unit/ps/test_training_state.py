"""TrainingState: a step's answers move each worker's reader, push seqs and the samples on; a rollback rewinds
the readers (and, in sync mode, the losses) but keeps the samples trained; a non-finite loss stops the run naming
the step and the worker."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xdl_ec.ps.training_state import TrainingState
from xdl_ec.ps.worker import StepResult
from xdl_ec.sparse.table_config import Table

TABLES = [Table("ads", dim=4)]


def answer(worker: int, samples: int, loss: float = 0.5, has_next: bool = True) -> StepResult:
    return StepResult(
        worker=worker,
        loss=loss,
        samples=samples,
        dense_grads=[],
        push_seqs=[worker + 1, worker + 2],
        has_next=has_next,
        pending_updates=3,
        labels=[np.array([1.0, 0.0], dtype=np.float32)],
        probabilities=[np.array([0.9, 0.2], dtype=np.float32)],
    )


def test_answers_move_each_worker_on() -> None:
    state = TrainingState(TABLES, workers=2)
    assert state.finished  # nobody has a batch until the workers tell
    state.has_next = [True, True]
    state.note_result(0, answer(0, 32))
    state.note_result(1, answer(1, 16, has_next=False))
    state.note_result(0, answer(0, 32))
    assert state.worker_batches == [2, 1]
    assert state.worker_samples == [64, 16]
    assert state.samples == 80
    assert state.push_seqs == [[1, 2], [2, 3]]
    assert state.pending_updates == [3, 3]
    assert state.has_next == [True, False] and not state.finished
    assert state.progressive.report()["samples"] == 6


def test_a_rollback_rewinds_the_readers_not_the_samples() -> None:
    state = TrainingState(TABLES, workers=2)
    for _ in range(3):
        for i in range(2):
            state.note_result(i, answer(i, 10))
        state.step += 1
        state.losses.append(float(state.step))
    position = {"worker_batches": [1, 1], "worker_samples": [10, 10]}
    assert state.samples_since(position) == 40
    assert state.samples_since([10, 10]) == 40  # the bare list of samples
    state.rewind(1, position, drop_losses=True)
    assert (state.step, state.worker_batches, state.worker_samples) == (1, [1, 1], [10, 10])
    assert state.losses == [1.0]
    assert state.samples == 60  # re-trained samples stay counted
    kept = TrainingState(TABLES, workers=1)
    kept.losses = [0.3, 0.2]
    kept.rewind(0, {"worker_batches": [0]}, drop_losses=False)  # async mode: loss i is not step i's
    assert kept.losses == [0.3, 0.2] and kept.worker_samples == [0]


def test_a_non_finite_loss_names_the_step_and_the_worker() -> None:
    state = TrainingState(TABLES, workers=2)
    state.step = 6
    state.check_finite(answer(1, 8, loss=0.1))
    with pytest.raises(FloatingPointError, match=r"step 7 \(worker 1\): loss is nan"):
        state.check_finite(answer(1, 8, loss=math.nan))
