"""Seeds and TensorFlow's determinism switches, set the same way in every process of a run."""

from __future__ import annotations


def configure_determinism(seed: int, deterministic: bool) -> None:
    """Seed Python, numpy and TF/Keras; with ``deterministic`` also force deterministic TF ops and one thread
    per op pool (set before TF runs its first op when possible)."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
        for setter in (
            tf.config.threading.set_intra_op_parallelism_threads,
            tf.config.threading.set_inter_op_parallelism_threads,
        ):
            try:
                setter(1)
            except RuntimeError:  # TF already initialised in this process: keep its pools
                pass
