"""Seeds and TensorFlow's op pools, set the same way in every process of a run.

Under ``deterministic`` each op runs on one thread (a kernel split over threads may sum in another order) and two
inter-op threads run independent ops side by side (the dense branches, the optimizer's per-variable updates): each
op is still computed whole by one thread, so the values, and the digests, do not depend on their order.

Otherwise TF's intra-op pool gets the cores that remain beside the step's own thread (its input thread, pulls and
pushes and the core's task pool run there): ``cores - 1``, at least one, and the same two inter-op threads. TF's
default (a thread per core) made a small step's kernels split over both cores of this 2-core machine and wait for
each other, while the step's other work waited for a core: on a quiet machine (docs/results/step-2026-11-28.md) one
intra-op thread took 0.8-0.9x the CPU per sample at batch 256 to 2048 and gave ~1.16x the samples/s at batch 256.
TF's own ``TF_NUM_INTRAOP_THREADS`` / ``TF_NUM_INTEROP_THREADS``, when set, are kept.

``XDL_EC_SERIAL_STEP=1`` keeps the deterministic pools as they were before #37 (one thread each): the A side of
``bench/bench_step.py``.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

SERIAL_STEP_ENV = "XDL_EC_SERIAL_STEP"
INTER_OP_THREADS = 2


def serial_step() -> bool:
    """Whether ``XDL_EC_SERIAL_STEP=1`` asks for the step before #37 (one inter-op thread when deterministic)."""
    return os.environ.get(SERIAL_STEP_ENV, "") == "1"


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def op_threads(deterministic: bool) -> Tuple[Optional[int], Optional[int]]:
    """(intra-op, inter-op) threads of a run; None: TF's default (or the TF_NUM_*_THREADS its user set)."""
    inter = 1 if deterministic and serial_step() else INTER_OP_THREADS
    intra = 1 if deterministic else max(1, usable_cores() - 1)
    return (
        None if os.environ.get("TF_NUM_INTRAOP_THREADS") else intra,
        None if os.environ.get("TF_NUM_INTEROP_THREADS") else inter,
    )


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
