"""The TF lookup op and its gradient against numpy and against TF's own dense-table path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from xdl_ec import EmbeddingTable
from xdl_ec.sparse import init, optim  # noqa: E402
from xdl_ec.tf import tf_ops  # noqa: E402

DIM = 4
_names = itertools.count()


def make_table(
    optimizer: optim.Optimizer = optim.SGD(learning_rate=0.1),
    dim: int = DIM,
    initializer: init.Initializer = init.RandomUniform(minval=-1.0, maxval=1.0),
) -> EmbeddingTable:
    return EmbeddingTable(f"t{next(_names)}", dim, optimizer=optimizer, initializer=initializer, seed=7)


def snapshot(table: EmbeddingTable) -> dict:
    exported = table.export()
    order = np.argsort(exported["keys"], kind="stable")
    return {name: np.asarray(values)[order].copy() for name, values in exported.items()}


def assert_unchanged(table: EmbeddingTable, before: dict) -> None:
    after = snapshot(table)
    assert before.keys() == after.keys()
    for name in before:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)


# Ragged rows as python lists: duplicates within and across rows, and an empty row.
RAGGED = [[5, 9, 5], [], [9], [1 << 40, -3, 5, 5]]
DENSE = [[5, 9, 5], [9, 9, 9], [-3, 1 << 40, 5]]


def pool(rows: list[np.ndarray], combiner: str, dim: int = DIM) -> np.ndarray:
    if not rows:
        return np.zeros(dim, np.float32)
    total = np.zeros(dim, np.float32)
    for row in rows:
        total = total + row
    if combiner == "mean":
        return total / np.float32(len(rows))
    if combiner == "sqrtn":
        return total / np.sqrt(np.float32(len(rows)))
    return total


def as_sparse(rows: list[list[int]]) -> tf.SparseTensor:
    # Columns with gaps (not "right-ragged") and unsorted indices: only the row of an index matters.
    indices = [[b, 2 * j + 1] for b, row in enumerate(rows) for j in range(len(row))]
    values = [v for row in rows for v in row]
    width = 2 * max(len(row) for row in rows) + 1
    perm = np.random.default_rng(0).permutation(len(values))
    return tf.SparseTensor(np.array(indices, np.int64)[perm], np.array(values, np.int64)[perm], [len(rows), width])


# ---- forward --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("combiner", [None, "sum", "mean", "sqrtn"])
def test_dense_forward_matches_numpy(combiner):
    table = make_table()
    out = tf_ops.lookup(table, tf.constant(DENSE, tf.int64), combiner=combiner).numpy()
    keys = np.array(DENSE, np.int64)
    rows = table.pull(keys.ravel()).reshape(keys.shape + (DIM,))
    if combiner is None:
        assert out.shape == (3, 3, DIM)
        np.testing.assert_array_equal(out, rows)
    else:
        expected = np.stack([pool(list(r), combiner) for r in rows])
        assert out.shape == (3, DIM)
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    assert len(table) == len(set(keys.ravel().tolist()))  # each distinct key inserted once


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("kind", ["ragged", "sparse"])
def test_multi_hot_forward_matches_numpy(combiner, kind):
    table = make_table()
    ids = tf.ragged.constant(RAGGED, dtype=tf.int64) if kind == "ragged" else as_sparse(RAGGED)
    out = tf_ops.lookup(table, ids, combiner=combiner).numpy()
    expected = np.stack([pool([table.pull(np.array([k]))[0] for k in row], combiner) for row in RAGGED])
    assert out.shape == (len(RAGGED), DIM)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(out[1], np.zeros(DIM, np.float32))  # empty row pools to zeros


def test_lookup_without_insert_reads_unseen_ids_as_zero_rows():
    table = make_table()
    known = table.pull(np.array([5], np.int64))[0]
    ids = tf.ragged.constant([[5, 6], [6]], dtype=tf.int64)
    out = tf_ops.lookup(table, ids, combiner="sum", insert_missing=False).numpy()
    np.testing.assert_array_equal(out, [known, np.zeros(DIM, np.float32)])
    assert len(table) == 1
    tf_ops.lookup(table, ids, combiner="sum")  # the default inserts
    assert len(table) == 2


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_sparse_forward_matches_tf_embedding_lookup_sparse(combiner):
    table = make_table()
    unique, index_rows, variable = dense_reference(table, RAGGED)
    sparse = as_sparse(RAGGED)
    position = {k: i for i, k in enumerate(unique)}
    as_index = tf.SparseTensor(
        sparse.indices, tf.constant([position[int(v)] for v in sparse.values.numpy()], tf.int64), sparse.dense_shape
    )
    expected = tf.nn.embedding_lookup_sparse(variable, tf.sparse.reorder(as_index), None, combiner=combiner)
    ours = tf_ops.lookup(table, sparse, combiner=combiner)
    np.testing.assert_allclose(ours.numpy(), expected.numpy(), rtol=1e-6, atol=1e-7)  # TF sums in another order


def test_int32_ids_are_accepted_and_trailing_empty_sparse_rows_kept():
    table = make_table()
    out = tf_ops.lookup(table, tf.constant([[1, 2]], tf.int32), combiner="sum").numpy()
    np.testing.assert_allclose(out[0], table.pull(np.array([1]))[0] + table.pull(np.array([2]))[0], rtol=1e-6)
    sparse = tf.SparseTensor([[0, 0]], tf.constant([3], tf.int64), [3, 2])  # rows 1 and 2 empty
    out = tf_ops.lookup(table, sparse, combiner="mean").numpy()
    assert out.shape == (3, DIM)
    np.testing.assert_array_equal(out[1:], np.zeros((2, DIM), np.float32))


@pytest.mark.parametrize("combiner", [None, "sum"])
def test_empty_batches(combiner):
    table = make_table(initializer=init.Zeros())
    trigger = tf.Variable(0.0)
    cases = [(tf.zeros([0, 3], tf.int64), (0, 3, DIM) if combiner is None else (0, DIM))]
    if combiner:
        cases.append((tf.ragged.constant([[], []], dtype=tf.int64), (2, DIM)))
    for ids, shape in cases:
        with tf.GradientTape() as tape:
            out = tf_ops.lookup(table, ids, combiner=combiner, trigger=trigger)
            loss = tf.reduce_sum(out)
        assert out.shape == shape
        assert tape.gradient(loss, trigger).numpy() == 0.0
    assert len(table) == 0


def test_static_shapes_in_graph():
    table = make_table()

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.int64)])
    def f(ids):
        none = tf_ops.lookup(table, ids)
        pooled = tf_ops.lookup(table, ids, combiner="sum")
        assert none.shape.as_list() == [None, 3, DIM]
        assert pooled.shape.as_list() == [None, DIM]
        return pooled

    assert f(tf.constant(DENSE, tf.int64)).shape == (3, DIM)


# ---- gradients against a dense tf.Variable table ---------------------------------------------------------
def reference_layout(kind: str) -> tuple[list[list[int]], object]:
    if kind == "dense":
        return DENSE, tf.constant(DENSE, tf.int64)
    if kind == "ragged":
        return RAGGED, tf.ragged.constant(RAGGED, dtype=tf.int64)
    return RAGGED, as_sparse(RAGGED)


def reference_lookup(variable: tf.Variable, index_rows: list[list[int]], combiner: str | None) -> tf.Tensor:
    """The same lookup written with plain TF ops on a dense [unique, dim] variable."""
    flat = tf.constant([i for row in index_rows for i in row], tf.int64)
    gathered = tf.gather(variable, flat)
    if combiner is None:
        return tf.reshape(gathered, [len(index_rows), -1, DIM])
    segment_ids = tf.constant([b for b, row in enumerate(index_rows) for _ in row], tf.int64)
    pooled = tf.math.unsorted_segment_sum(gathered, segment_ids, len(index_rows))
    counts = tf.constant([[max(len(row), 1)] for row in index_rows], tf.float32)
    if combiner == "mean":
        return pooled / counts
    if combiner == "sqrtn":
        return pooled / tf.sqrt(counts)
    return pooled


def model_loss(embeddings: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    # Nonlinear in the embeddings, so the row gradients depend on the row values.
    return tf.reduce_sum(tf.sigmoid(embeddings * weights) ** 2)


CASES = [
    ("dense", None),
    ("dense", "sum"),
    ("dense", "mean"),
    ("dense", "sqrtn"),
    ("ragged", "sum"),
    ("ragged", "mean"),
    ("ragged", "sqrtn"),
    ("sparse", "sum"),
    ("sparse", "mean"),
]


def dense_reference(table: EmbeddingTable, rows: list[list[int]]):
    unique = list(dict.fromkeys(k for row in rows for k in row))
    position = {k: i for i, k in enumerate(unique)}
    index_rows = [[position[k] for k in row] for row in rows]
    variable = tf.Variable(table.pull(np.array(unique, np.int64)))
    return unique, index_rows, variable


@pytest.mark.parametrize("kind,combiner", CASES)
def test_gradient_equals_gradient_tape_on_dense_variable(kind, combiner):
    # SGD with learning rate 1: the table's change is minus the per-key summed gradient the op applied.
    table = make_table(optim.SGD(learning_rate=1.0))
    rows, ids = reference_layout(kind)
    unique, index_rows, variable = dense_reference(table, rows)
    before = table.pull(np.array(unique, np.int64))
    out_shape = [len(rows), DIM] if combiner else [len(rows), 3, DIM]
    weights = tf.constant(np.random.default_rng(1).normal(size=out_shape).astype(np.float32))

    with tf.GradientTape() as tape:
        reference = model_loss(reference_lookup(variable, index_rows, combiner), weights)
    expected = tf.convert_to_tensor(tape.gradient(reference, variable)).numpy()  # IndexedSlices summed per key

    trigger = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        loss = model_loss(tf_ops.lookup(table, ids, combiner=combiner, trigger=trigger), weights)
    (trigger_grad,) = tape.gradient(loss, [trigger])
    assert trigger_grad.numpy() == 0.0
    np.testing.assert_allclose(loss.numpy(), reference.numpy(), rtol=1e-6)
    applied = before - table.pull(np.array(unique, np.int64))
    assert np.abs(expected).min() > 0  # every key got a gradient: the comparison is not vacuous
    np.testing.assert_allclose(applied, expected, rtol=1e-5, atol=1e-6)


def tf_sparse_step(
    name: str, variable: tf.Variable, slots: list, grad: tf.Tensor, indices: tf.Tensor, opt: optim.Optimizer
) -> None:
    if name == "sgd":
        # What TF's SGD does with IndexedSlices: scatter_sub of lr * grad.
        variable.scatter_sub(tf.IndexedSlices(grad * opt.learning_rate, indices))
    else:
        tf.raw_ops.ResourceSparseApplyAdagradV2(
            var=variable.handle,
            accum=slots[0].handle,
            lr=opt.learning_rate,
            epsilon=opt.epsilon,
            grad=grad,
            indices=indices,
        )


@pytest.mark.parametrize("name", ["sgd", "adagrad"])
@pytest.mark.parametrize("kind,combiner", [("dense", None), ("dense", "mean"), ("ragged", "sqrtn")])
def test_training_steps_match_tf_sparse_optimizer(name, kind, combiner):
    opt = optim.SGD(learning_rate=0.3) if name == "sgd" else optim.Adagrad(learning_rate=0.3)
    table = make_table(opt)
    rows, ids = reference_layout(kind)
    unique, index_rows, variable = dense_reference(table, rows)
    slots = [tf.Variable(tf.fill(variable.shape, np.float32(0.1)))] if name == "adagrad" else []
    out_shape = [len(rows), DIM] if combiner else [len(rows), 3, DIM]
    weights = tf.constant(np.random.default_rng(2).normal(size=out_shape).astype(np.float32))
    trigger = tf.Variable(0.0)
    for _ in range(3):
        with tf.GradientTape() as tape:
            reference = model_loss(reference_lookup(variable, index_rows, combiner), weights)
        slices = tape.gradient(reference, variable)
        # TF's optimizers deduplicate IndexedSlices (sum per index) before the sparse kernel.
        dedup, positions = tf.unique(slices.indices)
        grad = tf.math.unsorted_segment_sum(slices.values, positions, tf.shape(dedup)[0])
        tf_sparse_step(name, variable, slots, grad, dedup, opt)

        with tf.GradientTape() as tape:
            loss = model_loss(tf_ops.lookup(table, ids, combiner=combiner, trigger=trigger), weights)
        tape.gradient(loss, trigger)
    ours = table.pull(np.array(unique, np.int64))
    np.testing.assert_array_equal(ours, variable.numpy())
    if name == "adagrad":
        exported = table.export()
        order = {int(k): i for i, k in enumerate(exported["keys"])}
        accum = np.stack([exported["state"][order[k]] for k in unique])
        np.testing.assert_array_equal(accum, slots[0].numpy())


# ---- eager vs tf.function, exactly one update per gradient ---------------------------------------------
def constant_gradient_step(table: EmbeddingTable, trigger: tf.Variable, ids: tf.Tensor) -> None:
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf_ops.lookup(table, ids, combiner=None, trigger=trigger))
    tape.gradient(loss, [trigger])


def test_update_applied_exactly_once_per_step_eager_and_tf_function():
    ids = tf.constant([[3, 3], [4, 3]], tf.int64)  # key 3 three times, key 4 once: grad 3 and 1 per element
    eager = make_table(optim.SGD(learning_rate=0.5), initializer=init.Zeros())
    graph = make_table(optim.SGD(learning_rate=0.5), initializer=init.Zeros())
    trigger = tf.Variable(0.0)
    compiled = tf.function(lambda: constant_gradient_step(graph, trigger, ids))
    for _ in range(4):
        constant_gradient_step(eager, trigger, ids)
        compiled()
    for table in (eager, graph):
        np.testing.assert_array_equal(table.pull(np.array([3, 4]))[:, 0], [-4 * 0.5 * 3, -4 * 0.5 * 1])
    assert trigger.numpy() == 0.0


def test_tf_function_matches_eager_bit_for_bit_with_adam():
    rng = np.random.default_rng(3)
    batches = [tf.constant(rng.integers(0, 20, size=(8, 3)), tf.int64) for _ in range(5)]
    weights = tf.constant(rng.normal(size=(8, DIM)).astype(np.float32))
    tables = [make_table(optim.Adam(learning_rate=0.05)) for _ in range(2)]
    trigger = tf.Variable(0.0)

    def step(table, ids):
        with tf.GradientTape() as tape:
            loss = model_loss(tf_ops.lookup(table, ids, combiner="mean", trigger=trigger), weights)
        tape.gradient(loss, trigger)
        return loss

    compiled = tf.function(step)
    for ids in batches:
        step(tables[0], ids)
        compiled(tables[1], ids)
    keys = np.arange(20, dtype=np.int64)
    np.testing.assert_array_equal(tables[0].pull(keys), tables[1].pull(keys))
    a, b = snapshot(tables[0]), snapshot(tables[1])
    np.testing.assert_array_equal(a["state"], b["state"])


def test_each_gradient_call_applies_one_update_and_two_lookups_apply_two():
    ids = tf.constant([[1]], tf.int64)
    trigger = tf.Variable(0.0)
    persistent = make_table(optim.SGD(learning_rate=1.0), initializer=init.Zeros())
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(tf_ops.lookup(persistent, ids, trigger=trigger))
    tape.gradient(loss, trigger)
    tape.gradient(loss, trigger)  # documented: a second backward pass is a second update
    del tape
    np.testing.assert_array_equal(persistent.pull(np.array([1]))[0], np.full(DIM, -2.0, np.float32))

    twice = make_table(optim.SGD(learning_rate=1.0), initializer=init.Zeros())

    @tf.function
    def two_lookups():
        with tf.GradientTape() as tape:
            first = tf.reduce_sum(tf_ops.lookup(twice, ids, trigger=trigger))
            second = tf.reduce_sum(tf_ops.lookup(twice, tf.constant([[1, 2]], tf.int64), trigger=trigger))
            loss = first + 3.0 * second
        return tape.gradient(loss, trigger)

    two_lookups()
    np.testing.assert_array_equal(twice.pull(np.array([1, 2])), [[-4.0] * DIM, [-3.0] * DIM])


def test_indexed_slices_gradient_from_a_downstream_gather():
    table = make_table(optim.SGD(learning_rate=1.0), initializer=init.Zeros())
    trigger = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        rows = tf_ops.lookup(table, tf.constant([[1], [2], [3]], tf.int64), trigger=trigger)
        loss = tf.reduce_sum(tf.gather(rows, [0, 0, 2]))  # the lookup receives tf.IndexedSlices
    tape.gradient(loss, trigger)
    np.testing.assert_array_equal(table.pull(np.array([1, 2, 3]))[:, 0], [-2.0, 0.0, -1.0])


def test_update_runs_even_when_only_dense_variables_are_requested():
    # The tape backpropagates through every recorded op reaching the target, so asking only for the dense
    # weights still trains the table (in graph mode as eagerly).
    table = make_table(optim.SGD(learning_rate=1.0), initializer=init.Zeros())
    trigger, dense = tf.Variable(0.0), tf.Variable(2.0)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf_ops.lookup(table, tf.constant([[1]], tf.int64), trigger=trigger)) * dense
        return tape.gradient(loss, [dense])

    step()
    np.testing.assert_array_equal(table.pull(np.array([1]))[0], np.full(DIM, -2.0, np.float32))


def test_explicit_step_is_used_and_auto_step_counts_per_table():
    # Adam's first step moves every touched element by ~lr whatever the gradient; a far-off step (large
    # t: bias corrections ~1) moves it by lr * (1 - beta1) / sqrt(1 - beta2) instead.
    trigger = tf.Variable(0.0)
    ids = tf.constant([[1]], tf.int64)
    auto = make_table(optim.Adam(learning_rate=0.01), initializer=init.Zeros())
    late = make_table(optim.Adam(learning_rate=0.01), initializer=init.Zeros())
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf_ops.lookup(auto, ids, trigger=trigger))
    tape.gradient(loss, trigger)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf_ops.lookup(late, ids, trigger=trigger, step=10**6))
    tape.gradient(loss, trigger)
    np.testing.assert_allclose(auto.pull(np.array([1]))[0], -0.01, rtol=1e-4)
    np.testing.assert_allclose(late.pull(np.array([1]))[0], -0.01 * 0.1 / np.sqrt(0.001), rtol=1e-3)


def test_no_trigger_means_no_update():
    table = make_table(initializer=init.Zeros())
    variable = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf_ops.lookup(table, tf.constant([[1]], tf.int64))) * variable
    tape.gradient(loss, variable)
    np.testing.assert_array_equal(table.pull(np.array([1]))[0], np.zeros(DIM, np.float32))


# ---- bad input -----------------------------------------------------------------------------------------
def test_bad_python_inputs_are_clear_errors_and_change_nothing():
    table = make_table()
    tf_ops.lookup(table, tf.constant([[1, 2]], tf.int64))
    before = snapshot(table)
    with pytest.raises(TypeError, match="int64"):
        tf_ops.lookup(table, tf.constant([[1.0, 2.0]]))
    with pytest.raises(TypeError, match="int64"):
        tf_ops.lookup(table, tf.constant([["a"]]))
    with pytest.raises(ValueError, match=r"\[batch, n\]"):
        tf_ops.lookup(table, tf.constant([1, 2], tf.int64))
    with pytest.raises(ValueError, match=r"\[batch, n\]"):
        tf_ops.lookup(table, tf.zeros([1, 2, 3], tf.int64))
    with pytest.raises(ValueError, match="combiner"):
        tf_ops.lookup(table, tf.constant([[1]], tf.int64), combiner="max")
    with pytest.raises(ValueError, match="combiner 'none'"):
        tf_ops.lookup(table, tf.ragged.constant([[1], [2, 3]], dtype=tf.int64))
    with pytest.raises(ValueError, match="one ragged dimension"):
        tf_ops.lookup(table, tf.ragged.constant([[[1], [2, 3]]], dtype=tf.int64), combiner="sum")
    with pytest.raises(TypeError, match="ragged ids"):
        tf_ops.lookup(table, tf.ragged.constant([[1.0]]), combiner="sum")
    with pytest.raises(ValueError, match="step"):
        tf_ops.lookup(table, tf.constant([[1]], tf.int64), step=-1)
    with pytest.raises(TypeError, match="step"):
        tf_ops.lookup(table, tf.constant([[1]], tf.int64), step=1.5)
    with pytest.raises(TypeError, match="EmbeddingTable"):
        tf_ops.lookup(object(), tf.constant([[1]], tf.int64))
    assert_unchanged(table, before)


def test_closed_table_is_an_invalid_argument_error():
    table = make_table()

    class Stale:  # what a graph holding an old handle sees after the table is gone
        handle, dim = table.handle, table.dim

    table.close()
    with pytest.raises(tf.errors.InvalidArgumentError, match="unknown shard handle"):
        tf_ops.lookup(Stale(), tf.constant([[1]], tf.int64))
    with pytest.raises(ValueError, match="closed"):
        tf_ops.lookup(table, tf.constant([[1]], tf.int64))


def test_kernel_validates_raw_inputs():
    table = make_table()
    raw = tf_ops._ops.xdl_ec_lookup
    handle = tf.constant(table.handle, tf.int64)
    zero, trigger = tf.constant(0, tf.int64), tf.constant(0.0)
    values = tf.constant([1, 2, 3], tf.int64)
    before = snapshot(table)
    bad = [
        (dict(ids=values, row_splits=tf.constant([0, 2, 1, 3], tf.int64), combiner="sum"), "non-decreasing"),
        (dict(ids=values, row_splits=tf.constant([0, 2], tf.int64), combiner="sum"), "must equal the number"),
        (dict(ids=values, row_splits=tf.constant([1, 3], tf.int64), combiner="sum"), r"row_splits\[0\]"),
        (
            dict(ids=tf.constant([[1]], tf.int64), row_splits=tf.constant([0, 1], tf.int64), combiner="sum"),
            "must be empty",
        ),
    ]
    for kwargs, message in bad:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            raw(handle=handle, step=zero, trigger=trigger, dim=DIM, **kwargs)
    with pytest.raises(tf.errors.InvalidArgumentError, match="dim"):
        raw(
            handle=handle,
            ids=tf.constant([[1]], tf.int64),
            row_splits=tf.zeros([0], tf.int64),
            step=zero,
            trigger=trigger,
            combiner="sum",
            dim=DIM + 1,
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="step"):
        raw(
            handle=handle,
            ids=tf.constant([[1]], tf.int64),
            row_splits=tf.zeros([0], tf.int64),
            step=tf.constant(-2, tf.int64),
            trigger=trigger,
            combiner="sum",
            dim=DIM,
        )
    assert_unchanged(table, before)


def test_gradient_kernel_rejects_bad_gradients_without_touching_the_table():
    table = make_table()
    ids = tf.constant([[1, 2, 1]], tf.int64)
    splits = tf.zeros([0], tf.int64)
    out, keys, inverse = tf_ops._ops.xdl_ec_lookup(
        handle=table.handle, ids=ids, row_splits=splits, step=0, trigger=0.0, combiner="sum", dim=DIM
    )
    before = snapshot(table)
    scatter = tf_ops._ops.xdl_ec_scatter_gradient
    common = dict(handle=table.handle, ids=ids, row_splits=splits, unique_keys=keys, step=0, combiner="sum")
    with pytest.raises(tf.errors.InvalidArgumentError, match="shape"):
        scatter(grad=tf.ones([1, DIM + 1]), inverse=inverse, **common)
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside"):
        scatter(grad=tf.ones([1, DIM]), inverse=tf.constant([0, 5, 0], tf.int32), **common)
    with pytest.raises(tf.errors.InvalidArgumentError, match="table unchanged"):
        scatter(grad=tf.constant([[np.nan] * DIM]), inverse=inverse, **common)
    assert_unchanged(table, before)
    step = scatter(grad=tf.ones([1, DIM]), inverse=inverse, **common)
    assert int(step) >= 1


# ---- build/runtime version check --------------------------------------------------------------------------
def test_version_check_names_both_versions():
    tf_ops.check_tf_version("2.21.0", "2.21.0")
    tf_ops.check_tf_version("2.21.3", "2.21.0")  # same release: same op ABI
    with pytest.raises(tf_ops.TFVersionMismatchError, match=r"built against TensorFlow 2\.21\.0.*2\.22\.1") as err:
        tf_ops.check_tf_version("2.22.1", "2.21.0")
    assert "tensorflow-cpu==2.21" in str(err.value)
    assert isinstance(err.value, ImportError)


def test_loading_fails_clearly_when_the_build_record_names_another_tf(tmp_path, monkeypatch):
    # The same function runs at import; point it at a build record from another TF release.
    record = tmp_path / "_tf_build_version.txt"
    record.write_text("2.0.0\n")
    monkeypatch.setattr(tf_ops, "_BUILD_VERSION_FILE", str(record))
    with pytest.raises(
        tf_ops.TFVersionMismatchError,
        match=f"built against TensorFlow 2.0.0 but TensorFlow {tf.__version__} is installed",
    ):
        tf_ops._load_library()
    monkeypatch.setattr(tf_ops, "_BUILD_VERSION_FILE", str(tmp_path / "missing.txt"))
    with pytest.raises(ImportError, match="built without its TensorFlow ops"):
        tf_ops._load_library()
