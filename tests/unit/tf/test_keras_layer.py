"""xdl_ec.keras.SparseEmbedding in Keras models: model.fit, custom loops, exactly one table update per step."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from xdl_ec import EmbeddingTable
from xdl_ec.sparse import init, optim  # noqa: E402
from xdl_ec.tf.keras_layer import SparseEmbedding  # noqa: E402

_names = itertools.count()


def make_table(
    optimizer: optim.Optimizer, dim: int = 4, initializer: init.Initializer = init.Zeros()
) -> EmbeddingTable:
    return EmbeddingTable(f"keras{next(_names)}", dim, optimizer=optimizer, initializer=initializer, seed=3)


class SumModel(keras.Model):
    """Prediction = sum of the looked-up rows: every row element gets d(loss)/d(prediction)."""

    def __init__(self, table: EmbeddingTable) -> None:
        super().__init__()
        self.embedding = SparseEmbedding(table)

    def call(self, ids, training=None):
        return keras.ops.sum(self.embedding(ids, training=training), axis=(1, 2))[:, None]


def test_output_shapes_and_only_weight_is_the_zero_trigger():
    table = make_table(optim.SGD(learning_rate=0.1))
    ids = tf.constant([[1, 2, 3], [4, 5, 6]], tf.int64)
    assert SparseEmbedding(table)(ids).shape == (2, 3, 4)
    layer = SparseEmbedding(table, combiner="mean")
    assert layer(ids).shape == (2, 4)
    assert layer(tf.ragged.constant([[1], [2, 3], []], dtype=tf.int64)).shape == (3, 4)
    assert layer(tf.sparse.from_dense(tf.constant([[1, 0], [2, 3]], tf.int64))).shape == (2, 4)
    assert [w.name for w in layer.weights] == ["backward_trigger"]
    assert layer.compute_output_shape((None, 3)) == (None, 4)
    assert SparseEmbedding(table).compute_output_shape((None, 3)) == (None, 3, 4)


@pytest.fixture
def policy(request):
    keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"], indirect=True)
def test_model_fit_updates_the_table_exactly_once_per_step(policy):
    # MAE against a far-off target: d(loss)/d(prediction_i) = 1/B for every sample, so with every sample's
    # id equal to 7 the summed row gradient is exactly 1 per element and each step moves the row by -lr
    # (all of it exact in bfloat16 too).
    table = make_table(optim.SGD(learning_rate=0.5))
    model = SumModel(table)
    assert model.embedding(tf.constant([[7]], tf.int64)).dtype == policy.replace("mixed_", "")
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mean_absolute_error")
    batch, steps = 4, 6
    x = np.full((batch * steps, 1), 7, np.int64)
    y = np.full((batch * steps, 1), -1000.0, np.float32)
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_array_equal(table.pull(np.array([7]))[0], np.full(4, -0.5 * steps, np.float32))
    assert model.embedding.backward_trigger.numpy() == 0.0
    # Inference (training=False) reads unseen ids as zero rows and inserts nothing.
    predictions = model.predict(np.array([[7], [8]], np.int64), verbose=0)
    np.testing.assert_array_equal(predictions[:, 0], [-0.5 * steps * 4, 0.0])
    assert len(table) == 1


@pytest.mark.parametrize("dense_optimizer", ["sgd", "adam", "adagrad", "rmsprop"])
def test_model_fit_trains_the_table_as_eager_execution_does_whatever_the_dense_optimizer(dense_optimizer):
    # Under Keras Adam's fit the table update once had only a control dependency into the trigger's zero gradient,
    # which Grappler folded away: the table never moved. The graph must apply what eager execution applies.
    def train(run_eagerly: bool) -> np.ndarray:
        keras.utils.set_random_seed(5)
        table = make_table(optim.Adagrad(learning_rate=0.1), initializer=init.TruncatedNormal(stddev=0.1))
        ids = keras.Input(shape=(3,), dtype="int64")
        model = keras.Model(ids, keras.layers.Dense(1)(SparseEmbedding(table, combiner="sum")(ids)))
        model.compile(optimizer=dense_optimizer, loss="mse", run_eagerly=run_eagerly)
        x = np.arange(30, dtype=np.int64).reshape(10, 3)
        model.fit(x, np.ones((10, 1), np.float32), batch_size=5, epochs=2, shuffle=False, verbose=0)
        return table.pull(np.arange(30, dtype=np.int64))

    fresh = make_table(optim.Adagrad(learning_rate=0.1), initializer=init.TruncatedNormal(stddev=0.1))
    untrained = fresh.pull(np.arange(30, dtype=np.int64))
    graph = train(run_eagerly=False)
    assert not np.array_equal(graph, untrained)
    np.testing.assert_allclose(graph, train(run_eagerly=True), rtol=1e-5, atol=1e-6)


def test_model_fit_decreases_loss_like_plain_keras_embedding():
    # The same model on keras.layers.Embedding with the same initial rows and dense weights, all trained by SGD
    # (Keras's own sparse Adagrad squares undeduplicated IndexedSlices, so it is no reference for Adagrad).
    rng = np.random.default_rng(0)
    x = rng.integers(0, 40, size=(1024, 3)).astype(np.int64)
    hidden = rng.normal(size=40)
    y = (hidden[x].sum(axis=1) > 0).astype(np.float32)  # needs per-id knowledge: only the rows can learn it
    table = make_table(optim.SGD(learning_rate=0.5), dim=8, initializer=init.TruncatedNormal(stddev=0.05))
    initial_rows = table.pull(np.arange(40, dtype=np.int64))
    kernel = keras.initializers.Constant(rng.normal(scale=0.3, size=(8, 1)).astype(np.float32))
    histories = []
    for sparse in (True, False):
        ids = keras.Input(shape=(3,), dtype="int64")
        if sparse:
            pooled = SparseEmbedding(table, combiner="sum")(ids)
        else:
            embedding = keras.layers.Embedding(40, 8)
            pooled = keras.ops.sum(embedding(ids), axis=1)
            embedding.set_weights([initial_rows])
        model = keras.Model(ids, keras.layers.Dense(1, kernel_initializer=kernel)(pooled))
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=keras.losses.BinaryCrossentropy(from_logits=True))
        histories.append(model.fit(x, y, batch_size=64, epochs=4, shuffle=False, verbose=0).history["loss"])
    ours, plain = histories
    assert ours[-1] < 0.5 * ours[0], ours
    np.testing.assert_allclose(ours, plain, rtol=1e-5)
    assert len(table) == 40


def test_keras_does_not_jit_compile_models_holding_the_layer():
    model = SumModel(make_table(optim.SGD(learning_rate=0.5)))
    model(tf.constant([[1]], tf.int64))
    with pytest.warns(UserWarning, match="jit_compile"):
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    assert model.jit_compile is False
    model.fit(np.array([[1]], np.int64), np.array([[0.0]], np.float32), verbose=0)


def test_custom_loop_in_tf_function_matches_eager_bit_for_bit():
    rng = np.random.default_rng(1)
    batches = [
        (rng.integers(0, 30, size=(16, 2)).astype(np.int64), rng.normal(size=(16, 1)).astype(np.float32))
        for _ in range(4)
    ]

    def run(compiled: bool) -> tuple[dict, list]:
        keras.utils.set_random_seed(5)
        table = make_table(optim.Adam(learning_rate=0.05), initializer=init.RandomUniform(minval=-0.1, maxval=0.1))
        layer = SparseEmbedding(table, combiner="mean")
        dense = keras.layers.Dense(1)
        opt = keras.optimizers.SGD(0.1)

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((dense(layer(x)) - y) ** 2)
            variables = layer.trainable_variables + dense.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss

        step_fn = tf.function(step) if compiled else step
        for x, y in batches:
            step_fn(tf.constant(x), tf.constant(y))
        return table.export(), [w.numpy() for w in dense.weights]

    (eager_rows, eager_dense), (graph_rows, graph_dense) = run(False), run(True)
    for name in ("keys", "values", "state"):
        np.testing.assert_array_equal(eager_rows[name], graph_rows[name])
    for a, b in zip(eager_dense, graph_dense):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("policy", ["mixed_float16"], indirect=True)
def test_loss_scaling_policy_is_refused(policy):
    with pytest.raises(ValueError, match="mixed_float16"):
        SparseEmbedding(make_table(optim.SGD(learning_rate=0.1)))


def test_bad_arguments():
    table = make_table(optim.SGD(learning_rate=0.1))
    with pytest.raises(ValueError, match="combiner"):
        SparseEmbedding(table, combiner="max")
    with pytest.raises(TypeError, match="EmbeddingTable"):
        SparseEmbedding(np.zeros(3))
    layer = SparseEmbedding(table)
    with pytest.raises(TypeError, match="int64"):
        layer(tf.constant([[0.5]]))
    with pytest.raises(ValueError, match="combiner 'none'"):
        layer(tf.ragged.constant([[1], [2, 3]], dtype=tf.int64))
    with pytest.raises(ValueError, match="cannot be rebuilt"):
        SparseEmbedding.from_config(layer.get_config())
    assert len(table) == 0


def test_functional_model_with_sparse_input_trains_in_fit():
    table = make_table(optim.SGD(learning_rate=0.1))
    ids = keras.Input(shape=(5,), sparse=True, dtype="int64")
    model = keras.Model(
        ids, keras.layers.Dense(1, kernel_initializer="ones")(SparseEmbedding(table, combiner="mean")(ids))
    )
    model.compile(optimizer="sgd", loss="mse")
    x = tf.SparseTensor([[0, 0], [0, 3], [1, 1]], tf.constant([1, 2, 3], tf.int64), [2, 5])
    losses = model.fit(x, np.ones((2, 1), np.float32), epochs=3, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    assert len(table) == 3 and np.abs(table.pull(np.array([1, 2, 3]))).min() > 0
