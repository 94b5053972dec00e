"""TF's op pools of a run: one intra-op thread when deterministic; otherwise the cores beside the step's thread for a
small step and TF's default for a large one; two inter-op threads; TF's own environment variables kept when set."""

from __future__ import annotations

import pytest

from xdl_ec.tf import determinism
from xdl_ec.tf.determinism import INTER_OP_THREADS, LARGE_STEP_SAMPLES, op_threads


@pytest.fixture(autouse=True)
def _no_tf_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", determinism.SERIAL_STEP_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("cores, intra", [(1, 1), (2, 1), (8, 7)])
def test_the_fast_mode_leaves_a_core_to_the_steps_thread(
    monkeypatch: pytest.MonkeyPatch, cores: int, intra: int
) -> None:
    monkeypatch.setattr(determinism, "usable_cores", lambda: cores)
    assert op_threads(False, 256) == (intra, INTER_OP_THREADS)
    assert op_threads(False, LARGE_STEP_SAMPLES - 1) == (intra, INTER_OP_THREADS)
    assert op_threads(False, LARGE_STEP_SAMPLES) == (None, INTER_OP_THREADS)  # large kernels: a thread per core
    assert op_threads(False) == (None, INTER_OP_THREADS)  # the batch not known yet: nothing set
    for batch in (None, 256, LARGE_STEP_SAMPLES):  # one thread per op whatever the cores: the same sums
        assert op_threads(True, batch) == (1, INTER_OP_THREADS)


def test_the_serial_step_keeps_one_inter_op_thread_when_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(determinism.SERIAL_STEP_ENV, "1")
    assert op_threads(True) == (1, 1)


def test_tfs_own_variables_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(determinism, "usable_cores", lambda: 8)
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "3")
    assert op_threads(False, 256) == (None, INTER_OP_THREADS)
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "4")
    assert op_threads(True) == (None, None)


def test_usable_cores_is_at_least_one() -> None:
    assert determinism.usable_cores() >= 1
