"""TensorFlow's own saving of xdl_ec tables: tf.train.Checkpoint, CheckpointManager and Keras save_weights carry
the tables of SparseEmbedding layers (rows, optimizer state, step counters), and a restored model continues
training bit-identically."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from xdl_ec import EmbeddingTable
from xdl_ec.sparse import init, optim
from xdl_ec.tf import tf_ops  # noqa: E402
from xdl_ec.tf.keras_layer import SparseEmbedding  # noqa: E402
from xdl_ec.tf.table_trackable import TableTrackable  # noqa: E402

_names = itertools.count()
BATCH = 8


def auto_step(table: EmbeddingTable) -> int:
    return int(tf_ops._ops.xdl_ec_auto_step(handle=tf.constant(table.handle, tf.int64)))


def make_tables() -> List[EmbeddingTable]:
    # Adam's update depends on the step (bias correction), Adagrad's does not: both must continue exactly.
    suffix = next(_names)
    return [
        EmbeddingTable(f"user{suffix}", 4, optimizer=optim.Adagrad(learning_rate=0.2), seed=11),
        EmbeddingTable(f"item{suffix}", 3, optimizer=optim.Adam(learning_rate=0.05), seed=12),
    ]


def make_model(tables: List[EmbeddingTable], seed: int) -> keras.Model:
    """Two features, each with its own SparseEmbedding, into a small dense tower; compiled and built."""
    keras.utils.set_random_seed(seed)
    user = keras.Input(shape=(2,), dtype="int64", name="user")
    item = keras.Input(shape=(3,), dtype="int64", name="item")
    pooled = keras.layers.Concatenate()(
        [
            SparseEmbedding(tables[0], combiner="sum", name="user_embedding")(user),
            SparseEmbedding(tables[1], combiner="mean", name="item_embedding")(item),
        ]
    )
    hidden = keras.layers.Dense(5, activation="tanh")(pooled)
    model = keras.Model({"user": user, "item": item}, keras.layers.Dense(1)(hidden))
    # Not keras.optimizers.Adam: under model.fit Grappler then prunes the table updates (a separate problem).
    model.compile(optimizer=keras.optimizers.Adagrad(0.05), loss=keras.losses.BinaryCrossentropy(from_logits=True))
    model.optimizer.build(model.trainable_variables)  # Keras restores optimizer variables only once they exist
    return model


def make_data(seed: int, steps: int, ids: int) -> tuple:
    rng = np.random.default_rng(seed)
    x = {
        "user": rng.integers(0, ids, size=(steps * BATCH, 2)).astype(np.int64),
        "item": rng.integers(0, ids, size=(steps * BATCH, 3)).astype(np.int64),
    }
    return x, rng.integers(0, 2, size=(steps * BATCH, 1)).astype(np.float32)


def train(model: keras.Model, data: tuple) -> None:
    model.fit(data[0], data[1], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)


def state_of(model: keras.Model, tables: List[EmbeddingTable]) -> Dict[str, np.ndarray]:
    """Everything training depends on: rows by key, both step counters, dense weights and optimizer variables."""
    state: Dict[str, np.ndarray] = {}
    for i, table in enumerate(tables):
        rows = table.export()
        order = np.argsort(rows["keys"])
        for name in ("keys", "values", "state"):
            state[f"table{i}.{name}"] = rows[name][order]
        state[f"table{i}.steps"] = np.array([table.step, auto_step(table)])
    for i, weight in enumerate(model.weights):
        state[f"weight{i}"] = weight.numpy()
    for i, variable in enumerate(model.optimizer.variables):
        state[f"optimizer{i}"] = variable.numpy()
    return state


def assert_bit_identical(expected: Dict[str, np.ndarray], actual: Dict[str, np.ndarray]) -> None:
    assert expected.keys() == actual.keys()
    for name in expected:
        a, b = expected[name], actual[name]
        assert (a.dtype, a.shape) == (b.dtype, b.shape), name
        assert a.tobytes() == b.tobytes(), f"{name} differs"


class Saver:
    """One saving route: ``save`` may be called repeatedly, ``restore`` loads the latest save into a model."""

    def __init__(self, route: str, directory: Path) -> None:
        self.route, self.directory, self.saves = route, directory, 0

    def _checkpoint(self, model: keras.Model) -> "tf.train.Checkpoint":
        return tf.train.Checkpoint(model=model, optimizer=model.optimizer)

    def save(self, model: keras.Model) -> None:
        self.saves += 1
        if self.route == "checkpoint":
            self.latest = self._checkpoint(model).write(str(self.directory / f"ckpt-{self.saves}"))
        elif self.route == "manager":
            tf.train.CheckpointManager(self._checkpoint(model), str(self.directory), max_to_keep=2).save()
        else:
            model.save_weights(str(self.directory / "model.weights.h5"))

    def restore(self, model: keras.Model) -> None:
        if self.route == "checkpoint":
            self._checkpoint(model).read(self.latest).assert_consumed()
        elif self.route == "manager":
            checkpoint = self._checkpoint(model)
            manager = tf.train.CheckpointManager(checkpoint, str(self.directory), max_to_keep=2)
            checkpoint.restore(manager.latest_checkpoint).assert_consumed()
        else:
            model.load_weights(str(self.directory / "model.weights.h5"))


ROUTES = ["checkpoint", "manager", "weights_h5"]


@pytest.mark.parametrize("route", ROUTES)
def test_restored_model_continues_training_bit_identically(route, tmp_path):
    saver = Saver(route, tmp_path)
    tables = make_tables()
    model = make_model(tables, seed=1)
    train(model, make_data(seed=10, steps=3, ids=30))
    saver.save(model)  # an older save: restoring must pick the latest one
    train(model, make_data(seed=11, steps=2, ids=30))
    saver.save(model)
    later = make_data(seed=12, steps=3, ids=60)  # new ids too: rows created after the restore start from (seed, key)
    train(model, later)
    expected = state_of(model, tables)

    fresh_tables = make_tables()
    fresh = make_model(fresh_tables, seed=2)  # other dense initial weights, empty tables, step counters at 0
    saver.restore(fresh)
    train(fresh, later)
    assert_bit_identical(expected, state_of(fresh, fresh_tables))
    assert fresh_tables[1].step == 0 and auto_step(fresh_tables[1]) == 8  # 3 + 2 + 3 fit steps, all automatic


def test_without_the_auto_step_adam_rows_would_differ(tmp_path):
    # The guard of the test above: restoring rows alone (step counter restarting) changes Adam's updates.
    saver = Saver("checkpoint", tmp_path)
    tables = make_tables()
    model = make_model(tables, seed=1)
    train(model, make_data(seed=10, steps=3, ids=30))
    saver.save(model)
    later = make_data(seed=12, steps=2, ids=30)
    train(model, later)
    expected = state_of(model, tables)
    fresh_tables = make_tables()
    fresh = make_model(fresh_tables, seed=2)
    saver.restore(fresh)
    tf_ops._ops.xdl_ec_set_auto_step(
        handle=tf.constant(fresh_tables[1].handle, tf.int64), latest=tf.constant(0, tf.int64)
    )
    train(fresh, later)
    assert state_of(fresh, fresh_tables)["table1.values"].tobytes() != expected["table1.values"].tobytes()


class Tower(keras.Model):
    """Layers over the given tables (a table may appear twice: shared), their outputs summed."""

    def __init__(self, tables: List[EmbeddingTable]) -> None:
        super().__init__()
        self.count = len(tables)
        # Attributes, not a list: Keras 3 lists of layers are not reached by tf.train.Checkpoint.
        for i, table in enumerate(tables):
            setattr(self, f"embedding{i}", SparseEmbedding(table, combiner="sum"))

    def embeddings(self) -> List[SparseEmbedding]:
        return [getattr(self, f"embedding{i}") for i in range(self.count)]

    def call(self, ids, training=None):
        return sum(keras.ops.sum(layer(ids, training=training), axis=1, keepdims=True) for layer in self.embeddings())


def fit_tower(model: Tower, ids: np.ndarray) -> None:
    model.fit(ids, np.ones((len(ids), 1), np.float32), batch_size=len(ids), epochs=1, verbose=0)


def tower(tables: List[EmbeddingTable]) -> Tower:
    model = Tower(tables)
    model.compile(optimizer="sgd", loss="mse")
    model(np.zeros((1, 2), np.int64), training=False)  # builds without inserting id 0
    return model


def exports(tables: List[EmbeddingTable]) -> List[tuple]:
    return [(table.export(), table.step, auto_step(table)) for table in tables]


def assert_same_exports(expected: List[tuple], actual: List[tuple]) -> None:
    for (rows_a, step_a, auto_a), (rows_b, step_b, auto_b) in zip(expected, actual, strict=True):
        order_a, order_b = np.argsort(rows_a["keys"]), np.argsort(rows_b["keys"])
        for name in ("keys", "values", "state"):
            assert rows_a[name][order_a].tobytes() == rows_b[name][order_b].tobytes(), name
        assert (step_a, auto_a) == (step_b, auto_b)


def save_and_restore(route: str, model: keras.Model, tmp_path: Path) -> Callable[[], None]:
    """Saves ``model`` now; returns the call restoring that save into it."""
    if route == "checkpoint":
        path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
        return lambda: tf.train.Checkpoint(model=model).read(path).assert_existing_objects_matched()
    path = str(tmp_path / "model.weights.h5")
    model.save_weights(path)
    return lambda: model.load_weights(path)


@pytest.mark.parametrize("route", ["checkpoint", "weights_h5"])
def test_restore_removes_rows_created_after_the_save(route, tmp_path):
    tables = [
        EmbeddingTable(f"rows{next(_names)}", 3, optimizer=optim.Adam(0.1), seed=1),
        EmbeddingTable(f"sgd{next(_names)}", 2, optimizer=optim.SGD(0.1), initializer=init.Constant(1.0)),
    ]
    model = tower(tables)
    fit_tower(model, np.array([[1, 2], [3, 1]], np.int64))
    tables[0].push(np.array([2]), np.ones((1, 3), np.float32))  # the table's own counter is saved too
    saved = exports(tables)
    restore = save_and_restore(route, model, tmp_path)
    fit_tower(model, np.array([[1, 40], [41, 42]], np.int64))
    tables[0].push(np.array([40]), np.ones((1, 3), np.float32))
    assert len(tables[0]) == 6 and tables[0].step == 2
    restore()
    assert_same_exports(saved, exports(tables))
    assert sorted(tables[0].export()["keys"]) == [1, 2, 3]


@pytest.mark.parametrize("route", ["checkpoint", "weights_h5"])
def test_a_table_shared_by_two_layers_is_restored_consistently(route, tmp_path):
    shared = EmbeddingTable(f"shared{next(_names)}", 2, optimizer=optim.Adagrad(0.1), seed=4)
    model = tower([shared, shared])
    assert model.embedding0._table_checkpoint is model.embedding1._table_checkpoint
    fit_tower(model, np.array([[5, 6]], np.int64))
    saved = exports([shared])
    restore = save_and_restore(route, model, tmp_path)
    fit_tower(model, np.array([[5, 7]], np.int64))
    restore()
    assert_same_exports(saved, exports([shared]))
    if route == "checkpoint":  # one object in the checkpoint's graph: the rows are stored once
        names = [name for name, _ in tf.train.list_variables(str(tmp_path / "ckpt"))]
        assert sum(name.endswith("/.ATTRIBUTES/keys") for name in names) == 1


def test_an_empty_table_restores_to_empty(tmp_path):
    table = EmbeddingTable(f"empty{next(_names)}", 4, optimizer=optim.Ftrl(0.1))
    model = tower([table])
    restore = save_and_restore("checkpoint", model, tmp_path)
    fit_tower(model, np.array([[1, 2]], np.int64))
    restore()
    assert len(table) == 0 and table.step == 0 and auto_step(table) == 0


def trained_tower(table: EmbeddingTable) -> Tower:
    model = tower([table])
    fit_tower(model, np.array([[1, 2], [2, 3]], np.int64))
    return model


MISMATCHES = [
    (lambda name: EmbeddingTable(name, 5, optimizer=optim.Adagrad(0.1)), "dim 4 but the table has dim 5"),
    # Momentum keeps as many state floats as Adagrad: the optimizer itself must be compared.
    (
        lambda name: EmbeddingTable(name, 4, optimizer=optim.Momentum(0.1)),
        "optimizer 'Adagrad' but the table has optimizer 'Momentum'",
    ),
    (
        lambda name: EmbeddingTable(name, 4, optimizer=optim.Adam(0.1)),
        "optimizer 'Adagrad' but the table has optimizer 'Adam'",
    ),
]


@pytest.mark.parametrize("route", ["checkpoint", "weights_h5"])
@pytest.mark.parametrize("make_target, message", MISMATCHES)
def test_restoring_into_another_dim_or_optimizer_is_refused_and_changes_nothing(route, make_target, message, tmp_path):
    source = trained_tower(EmbeddingTable(f"source{next(_names)}", 4, optimizer=optim.Adagrad(0.1)))
    save_and_restore(route, source, tmp_path)  # the save is what matters
    target_table = make_target(f"target{next(_names)}")
    target = trained_tower(target_table)
    before = exports([target_table])
    with pytest.raises(
        ValueError,
        match=rf"table '{target_table.name}' from the checkpoint of table "
        rf"'{source.embedding0.table.name}'.*{message}",
    ):
        if route == "checkpoint":
            tf.train.Checkpoint(model=target).read(str(tmp_path / "ckpt"))
        else:
            target.load_weights(str(tmp_path / "model.weights.h5"))
    assert_same_exports(before, exports([target_table]))


def test_a_weight_file_without_table_entries_is_refused(tmp_path):
    # As written before tables were saved with the weights: the layer's "0" (backward_trigger) only.
    h5py = pytest.importorskip("h5py")
    table = EmbeddingTable(f"strict{next(_names)}", 2, optimizer=optim.SGD(0.1))
    model = tower([table])
    fit_tower(model, np.array([[1, 2]], np.int64))
    path = str(tmp_path / "old.weights.h5")
    model.save_weights(path)
    with h5py.File(path, "r+") as f:
        entries = f["embedding0/vars"]
        for name in [name for name in entries if name.startswith("table_")]:
            del entries[name]
    fit_tower(model, np.array([[3, 4]], np.int64))
    before = exports([table])
    with pytest.raises(
        ValueError,
        match=rf"(?s)SparseEmbedding '\w+' \(table '{table.name}'\): the weight file's "
        rf"entries for this layer are \['0'\].*missing \['table_auto_step'",
    ):
        model.load_weights(path)
    assert_same_exports(before, exports([table]))


def test_a_saved_model_leaves_the_table_out(tmp_path):
    # SavedModels trace saving into graphs; the table (rows in this process) stays a checkpoint matter.
    model = make_model(make_tables(), seed=1)
    train(model, make_data(seed=10, steps=1, ids=30))
    tf.saved_model.save(model, str(tmp_path / "saved"))
    names = [name for name, _ in tf.train.list_variables(str(tmp_path / "saved" / "variables" / "variables"))]
    assert any("kernel" in name for name in names)
    assert not any("_table_checkpoint" in name for name in names)


def test_snapshot_entries_and_spec():
    table = EmbeddingTable(f"spec{next(_names)}", 3, optimizer=optim.Adam(0.1))
    table.pull(np.array([9, 4]))
    snapshot = TableTrackable.of(table).snapshot()
    assert TableTrackable.of(table) is TableTrackable.of(table)
    assert snapshot["keys"].dtype == np.int64 and snapshot["values"].shape == (2, 3)
    assert snapshot["state"].shape == (2, 6) and int(snapshot["step"]) == 0 and int(snapshot["auto_step"]) == 0
    assert json.loads(snapshot["spec"].tobytes()) == {
        "format": 1,
        "table": table.name,
        "dim": 3,
        "state_floats": 6,
        "optimizer": "Adam",
    }
    bad = dict(snapshot, values=snapshot["values"].astype(np.float64))
    with pytest.raises(ValueError, match="values must be float32"):
        TableTrackable.of(table).restore(bad)
    with pytest.raises(ValueError, match=r"lacks \['auto_step'\]"):
        TableTrackable.of(table).restore({k: v for k, v in snapshot.items() if k != "auto_step"})
    assert sorted(table.export()["keys"]) == [4, 9]


def test_replace_validates_before_erasing():
    table = EmbeddingTable(f"replace{next(_names)}", 2, optimizer=optim.Adagrad(0.1))
    table.pull(np.array([1, 2, 3]))
    before = table.export()
    for keys, values, message in (
        ([5, 5], np.zeros((2, 2)), "duplicate"),
        ([5, 6], np.full((2, 2), np.nan), "non-finite"),
    ):
        with pytest.raises(ValueError, match=message):
            table.replace(np.array(keys), values, np.ones((2, 2)))
    assert all(before[name].tobytes() == table.export()[name].tobytes() for name in before)
    table.replace(np.array([3, 7]), np.ones((2, 2)), np.full((2, 2), 0.5))
    rows = table.export()
    assert sorted(rows["keys"]) == [3, 7] and (rows["values"] == 1).all() and (rows["state"] == 0.5).all()
