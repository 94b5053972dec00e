"""The plain-Keras peer (the installed TF, Keras 3): Keras ``Embedding`` tables looked up with
``tf.nn.embedding_lookup``, TF's sparse Adagrad kernel on the batch's deduplicated rows (Keras 3's own Adagrad
densifies the update over the whole table, see bench/keras_peer.py), the DLRM body of tf_dlrm.py, Adam on it.

Tables: ``criteo-shaped`` / ``criteo-sample`` one shared table of 2^20 rows indexed by ``key mod 2^20``;
``fields-100k`` one table of 100k rows per field; ``wide`` one table per field of its vocabulary's rows capped at
2^18 (ids mod the rows; its multi-hot fields summed).

    python3 bench/peers/peer_keras.py --data FILE.npz --batch-size 2048 --steps 300
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run with python -P: the harness beside it
import tensorflow as tf  # noqa: E402
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
from tf_dlrm import DLRMBody  # noqa: E402


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    data = SharedBatches(args.data)
    tf.keras.utils.set_random_seed(0)
    per_field, widths = data.per_field, data.widths
    starts = [sum(widths[:i]) for i in range(len(widths))]
    sizes = field_rows(data.workload, FIELD_ROWS_CAP) if per_field else [SHARED_ROWS]
    init = tf.keras.initializers.RandomUniform(-ROW_INIT, ROW_INIT)
    tables = []
    for i, rows in enumerate(sizes):
        layer = tf.keras.layers.Embedding(rows, EMB_DIM, embeddings_initializer=init, name=f"table_{i}")
        layer.build((None,))
        tables.append(layer.embeddings.value)  # the layer's tf.Variable
    accumulators = [tf.Variable(tf.fill([rows, EMB_DIM], ADAGRAD_START), trainable=False) for rows in sizes]
    body = DLRMBody(EMB_DIM)
    body(tf.zeros([1, len(widths), EMB_DIM]), tf.zeros([1, NUM_DENSE]))
    adam = tf.keras.optimizers.Adam(DENSE_LR)
    adam.build(body.trainable_variables)

    def lookup(sparse: tf.Tensor) -> tf.Tensor:
        if per_field:
            vectors = []
            for table, rows, start, width in zip(tables, sizes, starts, widths):
                ids = tf.math.floormod(sparse[:, start : start + width], rows)
                vectors.append(tf.reduce_sum(tf.nn.embedding_lookup(table, ids), axis=1))
            return tf.stack(vectors, axis=1)
        return tf.nn.embedding_lookup(tables[0], tf.math.floormod(sparse, SHARED_ROWS))

    def sparse_adagrad(table: tf.Variable, accumulator: tf.Variable, grad: tf.IndexedSlices) -> None:
        unique, position = tf.unique(grad.indices)
        summed = tf.math.unsorted_segment_sum(grad.values, position, tf.shape(unique)[0])
        tf.raw_ops.ResourceSparseApplyAdagradV2(
            var=table.handle,
            accum=accumulator.handle,
            lr=tf.constant(SPARSE_LR),
            epsilon=tf.constant(ADAGRAD_EPSILON),
            grad=summed,
            indices=unique,
        )

    spec = (
        tf.TensorSpec([None, NUM_DENSE], tf.float32),
        tf.TensorSpec([None, sum(widths)], tf.int64),
        tf.TensorSpec([None], tf.float32),
    )

    @tf.function(input_signature=spec)
    def step(dense: tf.Tensor, sparse: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
        variables = body.trainable_variables
        with tf.GradientTape() as tape:
            logits = body(lookup(sparse), dense)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logits))
        grads = tape.gradient(loss, [*variables, *tables])
        adam.apply_gradients(zip(grads[: len(variables)], variables))
        for table, accumulator, grad in zip(tables, accumulators, grads[len(variables) :]):
            sparse_adagrad(table, accumulator, grad)
        return loss

    @tf.function(input_signature=spec[:2])
    def predict(dense: tf.Tensor, sparse: tf.Tensor) -> tf.Tensor:
        return tf.sigmoid(body(lookup(sparse), dense))

    run_peer(
        "plain Keras",
        data,
        args,
        stepper(lambda d, s, y: step(d, s, y).numpy(), data.train_batches(args.batch_size, args.steps)),
        lambda d, s: predict(d, s).numpy(),
        {"version": f"TF {tf.__version__}", "tables": f"{len(sizes)} tables, {sum(sizes):,} rows"},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
