"""Seeds and TensorFlow's op pools, set the same way in every process of a run.

TF's pools are sized to leave the step's other work a core: the input thread (reading, unique ids) and the
tables' pulls and pushes run beside TF's ops (see :mod:`xdl_ec.job.local_run`). Intra-op threads: one per core
but one (one under ``deterministic``: a kernel split over threads may sum in another order); inter-op threads:
two, in both modes: independent ops (the dense branches, the optimizer's per-variable updates) run side by side,
each computed whole by one thread, so a deterministic run's values do not depend on their order.

``XDL_EC_SERIAL_STEP=1`` keeps the pools as they were before (deterministic: one thread each; otherwise TF's
defaults), with the serial step: the A side of ``bench/bench_step.py``.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

SERIAL_STEP_ENV = "XDL_EC_SERIAL_STEP"
INTER_OP_THREADS = 2


def serial_step() -> bool:
    """Whether ``XDL_EC_SERIAL_STEP=1`` asks for the serial step (the path before the pipelined one)."""
    return os.environ.get(SERIAL_STEP_ENV, "") == "1"


def op_threads(deterministic: bool, cores: Optional[int] = None) -> Tuple[Optional[int], Optional[int]]:
    """(intra-op, inter-op) threads of a run on ``cores`` cores (None: this process's); None: TF's default."""
    if serial_step():
        return (1, 1) if deterministic else (None, None)
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return (1 if deterministic else max(cores - 1, 1)), INTER_OP_THREADS


def configure_determinism(seed: int, deterministic: bool) -> None:
    """Seed Python, numpy and TF/Keras; with ``deterministic`` also force deterministic TF ops; size TF's op pools
    (:func:`op_threads`; set before TF runs its first op when possible)."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    intra, inter = op_threads(deterministic)
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
