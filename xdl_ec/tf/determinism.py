"""Seeds and TensorFlow's op pools, set the same way in every process of a run.

Under ``deterministic`` each op runs on one thread (a kernel split over threads may sum in another order) and two
inter-op threads run independent ops side by side (the dense branches, the optimizer's per-variable updates): each
op is still computed whole by one thread, so the values, and the digests, do not depend on their order.

Otherwise the same two inter-op threads, and an intra-op pool sized by the step, once the worker has its first
batch (:func:`size_op_pools`): a step of fewer than :data:`LARGE_STEP_SAMPLES` samples gets the cores that remain
beside the step's own thread (its input thread, pulls and pushes and the core's task pool run there), ``cores - 1``
and at least one; a larger step gets TF's default, a thread per core. Why: TF's default splits a small step's
kernels over every core, which then wait for each other while the step's other work waits for a core; a large
step's kernels are worth splitting (the figures: docs/results/step-2026-11-28.md). TF's own
``TF_NUM_INTRAOP_THREADS`` / ``TF_NUM_INTEROP_THREADS``, when set, are kept.

``XDL_EC_SERIAL_STEP=1`` keeps the deterministic pools as they were before #37 (one thread each): the A side of
``bench/bench_step.py``.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

SERIAL_STEP_ENV = "XDL_EC_SERIAL_STEP"
INTER_OP_THREADS = 2
LARGE_STEP_SAMPLES = 2048  # from this batch size on, the fast mode's kernels split over every core


def serial_step() -> bool:
    """Whether ``XDL_EC_SERIAL_STEP=1`` asks for the step before #37 (one inter-op thread when deterministic)."""
    return os.environ.get(SERIAL_STEP_ENV, "") == "1"


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def op_threads(deterministic: bool, batch_size: Optional[int] = None) -> Tuple[Optional[int], Optional[int]]:
    """(intra-op, inter-op) threads of a run whose steps train ``batch_size`` samples (None: not known yet); None:
    TF's default (or the TF_NUM_*_THREADS its user set)."""
    inter = 1 if deterministic and serial_step() else INTER_OP_THREADS
    if deterministic:
        intra: Optional[int] = 1
    elif batch_size is not None and batch_size < LARGE_STEP_SAMPLES:
        intra = max(1, usable_cores() - 1)
    else:
        intra = None
    return (
        None if os.environ.get("TF_NUM_INTRAOP_THREADS") else intra,
        None if os.environ.get("TF_NUM_INTEROP_THREADS") else inter,
    )


def configure_determinism(seed: int, deterministic: bool) -> None:
    """Seed Python, numpy and TF/Keras; with ``deterministic`` also force deterministic TF ops; size TF's op pools
    as far as known before the first batch (:func:`op_threads`; set before TF runs its first op when possible)."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    _set_pools(*op_threads(deterministic))


def size_op_pools(deterministic: bool, batch_size: int) -> None:
    """Sizes TF's op pools for steps of ``batch_size`` samples (:func:`op_threads`), if TF has not run an op yet in
    this process (then its pools stay as they are)."""
    _set_pools(*op_threads(deterministic, batch_size))


def _set_pools(intra: Optional[int], inter: Optional[int]) -> None:
    import tensorflow as tf

    for setter, threads in (
        (tf.config.threading.set_intra_op_parallelism_threads, intra),
        (tf.config.threading.set_inter_op_parallelism_threads, inter),
    ):
        if threads is None:
            continue
        try:
            setter(threads)
        except RuntimeError:  # TF already initialised in this process: keep its pools
            pass
