"""The ceiling of a step whose model body is TensorFlow's: the DLRM body of tf_dlrm.py alone on the shared batches'
dense features and labels, with no tables at all. Each step runs what every TF-bodied system (xdl-ec, plain Keras,
TFRA) must run for this model: the body forward, its backward to its weights and to the embedded vectors (which a
system's sparse update needs), and Adam on the body; the vectors are one fixed tensor, so no lookup, no sparse
update and no id handling is timed. Its samples/s is the most any such system reaches on these cores, so its ratio to
the best peer bounds what "x times the best peer" can mean here. The hold-out AUC is the body's on zero vectors
(dense features only): it is not comparable to the systems' AUC.

    python3 bench/peers/ceiling_tf_body.py --data FILE.npz --batch-size 2048 --steps 300
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run with python -P: the harness beside it
import tensorflow as tf  # noqa: E402
from hyperparameters import DENSE_LR, EMB_DIM, ROW_INIT
from peer_harness import parse_args, run_peer, stepper  # noqa: E402
from shared_batches import NUM_DENSE, SharedBatches  # noqa: E402
from tf_dlrm import DLRMBody  # noqa: E402


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    data = SharedBatches(args.data)
    tf.keras.utils.set_random_seed(0)
    fields = len(data.widths)  # one vector per field (a multi-hot field's pooled)
    body = DLRMBody(EMB_DIM)
    body(tf.zeros([1, fields, EMB_DIM]), tf.zeros([1, NUM_DENSE]))
    adam = tf.keras.optimizers.Adam(DENSE_LR)
    adam.build(body.trainable_variables)
    vectors = tf.Variable(tf.random.uniform([args.batch_size, fields, EMB_DIM], -ROW_INIT, ROW_INIT))
    spec = (tf.TensorSpec([None, NUM_DENSE], tf.float32), tf.TensorSpec([None], tf.float32))

    @tf.function(input_signature=spec)
    def step(dense: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
        variables = body.trainable_variables
        embedded = vectors[: tf.shape(dense)[0]]  # a short last batch takes the first rows
        with tf.GradientTape() as tape:
            tape.watch(embedded)
            logits = body(embedded, dense)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logits))
        grads = tape.gradient(loss, [*variables, embedded])
        adam.apply_gradients(zip(grads[:-1], variables))
        # the vectors' gradient is what a system's sparse update consumes: computed, then only summed so that TF
        # cannot prune it
        return loss + 0.0 * tf.reduce_sum(grads[-1])

    @tf.function(input_signature=spec[:1])
    def predict(dense: tf.Tensor) -> tf.Tensor:
        return tf.sigmoid(body(tf.zeros([tf.shape(dense)[0], fields, EMB_DIM]), dense))

    run_peer(
        "TF DLRM body alone (ceiling)",
        data,
        args,
        stepper(lambda d, s, y: step(d, y).numpy(), data.train_batches(args.batch_size, args.steps)),
        lambda d, s: predict(d).numpy(),
        {"version": f"TF {tf.__version__}, no tables"},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
