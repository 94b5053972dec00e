"""The TFRA peer: TensorFlow Recommenders-Addons ``dynamic_embedding`` (hash-table embeddings that grow with the
ids, no modulo) in TFRA's own environment (TF 2.16 with tf-keras; see setup_envs.sh), Adagrad(0.02) on the rows
through ``DynamicEmbeddingOptimizer``, the DLRM body of tf_dlrm.py, Adam on it.

Tables: ``criteo-shaped`` / ``criteo-sample`` one dynamic table for the 26 salted keys; ``fields-100k`` one per
field.

    ~/.cache/xdl-ec-peers/tfra/bin/python bench/peers/peer_tfra.py --data FILE.npz --batch-size 2048 --steps 300
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_USE_LEGACY_KERAS"] = "1"  # TFRA 0.8's layers and optimizer wrapper are written for Keras 2
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run with python -P: the harness beside it
import tensorflow as tf  # noqa: E402
import tensorflow_recommenders_addons as tfra  # noqa: E402
from hyperparameters import (
    ADAGRAD_EPSILON,
    ADAGRAD_START,
    DENSE_LR,
    EMB_DIM,
    FIELD_ROWS_CAP,
    ROW_INIT,
    SHARED_ROWS,
    SPARSE_LR,
)
from peer_harness import parse_args, run_peer, stepper  # noqa: E402
from shared_batches import NUM_DENSE, SharedBatches, field_rows  # noqa: E402
from tensorflow_recommenders_addons import dynamic_embedding as de  # noqa: E402
from tf_dlrm import DLRMBody  # noqa: E402


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    data = SharedBatches(args.data)
    tf.keras.utils.set_random_seed(0)
    per_field, widths = data.per_field, data.widths
    starts = [sum(widths[:i]) for i in range(len(widths))]
    # TF's own initializer, not a Keras one: an unseeded tf-keras initializer is stateless and would give every
    # batch's new rows the same values (it warns so); this one draws fresh values at each call
    init = tf.random_uniform_initializer(-ROW_INIT, ROW_INIT)
    capacities = field_rows(data.workload, FIELD_ROWS_CAP) if per_field else [SHARED_ROWS]
    count = len(capacities)
    tables = [
        de.keras.layers.Embedding(EMB_DIM, initializer=init, name=f"table_{i}", init_capacity=capacity)
        for i, capacity in enumerate(capacities)
    ]
    body = DLRMBody(EMB_DIM)
    body(tf.zeros([1, len(widths), EMB_DIM]), tf.zeros([1, NUM_DENSE]))
    adam = tf.keras.optimizers.Adam(DENSE_LR)
    adagrad = de.DynamicEmbeddingOptimizer(
        tf.keras.optimizers.Adagrad(SPARSE_LR, initial_accumulator_value=ADAGRAD_START, epsilon=ADAGRAD_EPSILON)
    )

    def lookup(sparse: tf.Tensor) -> tf.Tensor:
        if per_field:
            return tf.stack(
                [
                    t(sparse[:, s]) if w == 1 else tf.reduce_sum(t(sparse[:, s : s + w]), axis=1)
                    for t, s, w in zip(tables, starts, widths)
                ],
                axis=1,
            )
        return tables[0](sparse)

    spec = (
        tf.TensorSpec([None, NUM_DENSE], tf.float32),
        tf.TensorSpec([None, sum(widths)], tf.int64),
        tf.TensorSpec([None], tf.float32),
    )

    @tf.function(input_signature=spec)
    def step(dense: tf.Tensor, sparse: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = body(lookup(sparse), dense)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logits))
        dense_vars = body.trainable_variables
        table_vars = [v for t in tables for v in t.trainable_variables]
        grads = tape.gradient(loss, [*dense_vars, *table_vars])
        adam.apply_gradients(zip(grads[: len(dense_vars)], dense_vars))
        adagrad.apply_gradients(zip(grads[len(dense_vars) :], table_vars))
        return loss

    @tf.function(input_signature=spec[:2])
    def predict(dense: tf.Tensor, sparse: tf.Tensor) -> tf.Tensor:
        return tf.sigmoid(body(lookup(sparse), dense))

    run_peer(
        "TFRA dynamic_embedding",
        data,
        args,
        stepper(lambda d, s, y: step(d, s, y).numpy(), data.train_batches(args.batch_size, args.steps)),
        lambda d, s: predict(d, s).numpy(),
        {"version": f"TFRA {tfra.__version__}, TF {tf.__version__}", "tables": f"{count} dynamic"},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
