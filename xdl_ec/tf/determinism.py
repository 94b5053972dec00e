"""Seeds and TensorFlow's op pools, set the same way in every process of a run.

Under ``deterministic`` each op runs on one thread (a kernel split over threads may sum in another order) and two
inter-op threads run independent ops side by side (the dense branches, the optimizer's per-variable updates): each
op is still computed whole by one thread, so the values, and the digests, do not depend on their order. Otherwise
TF's own pools (a thread per core each). Measured on 2 shared cores (docs/results/step-2026-11-28.md): one intra-op
thread in the fast mode, to leave a core to the input and push threads, cost no less CPU per sample and lost half
its throughput under load (one runnable thread gets one share of a busy machine), so the fast mode keeps TF's.

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


def op_threads(deterministic: bool) -> Tuple[Optional[int], Optional[int]]:
    """(intra-op, inter-op) threads of a run; None: TF's default."""
    if not deterministic:
        return None, None
    return 1, (1 if serial_step() else INTER_OP_THREADS)


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
