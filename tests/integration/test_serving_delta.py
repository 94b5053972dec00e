"""Fresh serving (#36): a run with ``export_every`` writes a base SavedModel and then deltas; a process with
TensorFlow alone (xdl_ec not importable) applies them in order to the model it serves, without a reload, and then
predicts what ``xdl_ec.load`` of a save at the same step predicts (1e-6): changed and new rows, rows a bounded table
evicted (served as unknown ids again) and the dense weights. Deltas out of order or of another base are refused with
nothing changed; bad settings are clear errors; on servers (with the backstop sharing the dirty-row sets) and
through the CLI the same."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import xdl_ec  # noqa: E402
from support.serving import PLAIN_TF  # noqa: E402
from xdl_ec.cli import main  # noqa: E402
from xdl_ec.keep.saved_run import SavedRun  # noqa: E402

STEPS, EVERY, BATCH, USERS = 8, 2, 32, 400


def batch_at(rng: np.random.Generator, step: int, size: int = BATCH) -> Dict[str, Any]:
    """Users from a fixed pool; items drifting by step (old ones stop coming, so the TTL evicts their rows)."""
    users = rng.integers(0, USERS, size)
    items = rng.integers(0, 12, size) + 6 * step
    return {
        "label": ((users + items) % 3 == 0).astype(np.float32),
        "user": users,
        "item": items,
        "dense": rng.normal(size=(size, 3)).astype(np.float32),
    }


def input_fn(worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
    rng = np.random.default_rng(worker)
    return (batch_at(rng, step) for step in range(STEPS))


def model_fn() -> Any:
    class Concat(tf.keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = tf.keras.layers.Dense(4, activation="tanh")
            self.out = tf.keras.layers.Dense(1)

        def call(self, embedded, dense, training=False):  # noqa: ANN001, ANN201 - the job API's call
            return self.out(self.hidden(tf.concat([embedded["user"], embedded["item"], dense], axis=1)))

    return Concat()


def make_job() -> xdl_ec.Job:
    users = xdl_ec.Table("users", dim=8, optimizer=xdl_ec.optim.Adagrad(0.1), seed=1)
    items = xdl_ec.Table(
        "items", dim=4, optimizer=xdl_ec.optim.Adagrad(0.1), seed=2, evict=xdl_ec.Evict(ttl_steps=2, every_steps=2)
    )
    return xdl_ec.Job(
        tables=[users, items],
        features=[xdl_ec.Feature("user", users), xdl_ec.Feature("item", items)],
        model_fn=model_fn,
        input_fn=input_fn,
        dense_learning_rate=0.05,
    )


def probe() -> Dict[str, np.ndarray]:
    """Every id the run trained, some never seen; no label."""
    rng = np.random.default_rng(7)
    n = 480
    return {
        "user": np.resize(np.arange(-3, USERS + 5), n).astype(np.int64),
        "item": np.resize(np.arange(-2, 6 * STEPS + 12), n).astype(np.int64),
        "dense": rng.normal(size=(n, 3)).astype(np.float32),
    }


def saves_by_step(root: Path) -> Dict[int, Path]:
    saves = {}
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        saves[SavedRun.open(path).step] = path
    return saves


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    root = tmp_path_factory.mktemp("delta")
    job = make_job()
    report = job.fit(
        deterministic=True,
        seed=1,
        save_dir=root / "saves",
        save_every=str(EVERY),
        keep=STEPS,
        export_every=str(EVERY),
        export_dir=root / "serving",
        logdir=root / "tb",
    )
    expected = {}
    for step, path in saves_by_step(root / "saves").items():
        model = xdl_ec.load(path, job)
        expected[step] = model.predict(probe())
        model.close()
    return {"job": job, "report": report, "root": root, "serving": root / "serving", "expected": expected}


# A serving process: TensorFlow only. Loads the base, applies each delta named on the command line in order and keeps
# the probabilities after each, and checks each removed key reads row 0 (unknown) afterwards.
APPLY = PLAIN_TF + textwrap.dedent("""
    base, probe_file, out_file, *deltas = sys.argv[1:]
    m = tf.saved_model.load(base)
    serve = m.signatures["serving_default"]
    with np.load(probe_file) as probe:
        inputs = {k: tf.constant(probe[k]) for k in probe.files}
    out = {"base": serve(**inputs)["probability"].numpy()}
    tables = ["users", "items"]
    for delta in deltas:
        done = int(m.apply_delta(tf.constant(delta)).numpy())
        assert done == int(m.sequence.numpy()), (done, int(m.sequence.numpy()))
        step = int(m.step.numpy())
        for i, name in enumerate(tables):
            removed = tf.io.parse_tensor(tf.io.read_file(f"{delta}/table-{i}.removed.tensor"), tf.int64)
            rows = tf.raw_ops.LookupTableFindV2(
                table_handle=m.row_of[name].resource_handle, keys=removed, default_value=tf.constant(0, tf.int64))
            assert not np.any(rows.numpy()), "a removed key still has a row"
        out[f"step_{step}"] = serve(**inputs)["probability"].numpy()
    np.savez(out_file, **out)
    assert "xdl_ec" not in sys.modules, "xdl_ec was imported"
    print("applied without xdl_ec")
""")


def deltas_of(serving: Path) -> List[Path]:
    return sorted(p for p in serving.iterdir() if p.name.startswith("delta-"))


def test_plain_tensorflow_applies_the_deltas_and_predicts_what_the_saves_do(
    run: Dict[str, Any], tmp_path: Path
) -> None:
    serving = run["serving"]
    deltas = deltas_of(serving)
    assert [d.name for d in deltas] == [f"delta-{i:06d}" for i in range(1, STEPS // EVERY + 1)]
    manifests = [json.loads((d / "manifest.json").read_text()) for d in deltas]
    assert [m["step"] for m in manifests] == list(range(EVERY, STEPS + 1, EVERY))
    np.savez(tmp_path / "probe.npz", **probe())
    (tmp_path / "apply.py").write_text(APPLY)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-P", str(tmp_path / "apply.py"), str(serving / "base"), str(tmp_path / "probe.npz"),
         str(tmp_path / "out.npz"), *map(str, deltas)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "applied without xdl_ec" in done.stdout
    with np.load(tmp_path / "out.npz") as served:
        for step, wanted in run["expected"].items():
            np.testing.assert_allclose(served[f"step_{step}"], wanted, rtol=0, atol=1e-6, err_msg=f"step {step}")
        assert np.ptp(served[f"step_{STEPS}"]) > 1e-3  # the trained rows and weights matter
        assert np.abs(served[f"step_{STEPS}"] - served["base"]).max() > 1e-3
    # the TTL evicted items: deltas removed rows, and the removed ids serve as unknown (checked in the subprocess,
    # and by the match with xdl_ec.load, which reads zeros for them)
    assert sum(t["removed"] for m in manifests for t in m["tables"] if t["name"] == "items") > 0
    # a delta carries the rows changed since the previous export (users of 2 batches), not the table (~190 users; in
    # this process the bounded items table is cut whole beside it, the users table by its dirty rows)
    users_rows = [t["rows"] for m in manifests for t in m["tables"] if t["name"] == "users"]
    held = len(run["job"].model.tables.tables["users"])
    assert max(users_rows) <= EVERY * BATCH < held / 2, (users_rows, held)


def test_the_report_gives_freshness_and_sizes_and_tensorboard_each_export(run: Dict[str, Any]) -> None:
    exports = run["report"]["exports"]
    assert exports["count"] == 1 + STEPS // EVERY and exports["deltas"] == STEPS // EVERY
    assert 0 < exports["freshness_s"]["median"] <= exports["freshness_s"]["p99"]
    assert exports["delta_bytes"] > 0 and exports["full_bytes"] > 0 and exports["base_bytes"] > 0
    sizes = [(run["serving"] / f"delta-{r['sequence']:06d}" / "manifest.json") for r in exports["records"]]
    assert [json.loads(p.read_text())["bytes"] for p in sizes] == [r["bytes"] for r in exports["records"]]
    logged: Dict[str, List[Any]] = {}
    for path in sorted((run["root"] / "tb").rglob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for v in event.summary.value:
                logged.setdefault(v.tag, []).append((event.step, float(tf.make_ndarray(v.tensor))))
    records = exports["records"]
    assert logged["export/delta_bytes"] == [(r["step"], float(r["bytes"])) for r in records]
    assert [step for step, _ in logged["export/freshness_s"]] == [r["step"] for r in records]
    np.testing.assert_allclose([v for _, v in logged["export/freshness_s"]], [r["freshness_s"] for r in records], 1e-6)


def serve_probe(model: Any) -> np.ndarray:
    return model.signatures["serving_default"](**{k: tf.constant(v) for k, v in probe().items()})["probability"].numpy()


def test_a_delta_out_of_order_or_of_another_base_is_refused_and_changes_nothing(
    run: Dict[str, Any], tmp_path: Path
) -> None:
    serving = run["serving"]
    first, second = deltas_of(serving)[:2]
    m = tf.saved_model.load(str(serving / "base"))
    before = serve_probe(m)
    with pytest.raises(tf.errors.InvalidArgumentError, match="in sequence"):
        m.apply_delta(tf.constant(str(second)))
    assert int(m.sequence.numpy()) == 0
    np.testing.assert_array_equal(serve_probe(m), before)
    # the first delta as another run's base would have written it: its head names another base id
    other = tmp_path / first.name
    shutil.copytree(first, other)
    head = tf.io.parse_tensor(tf.io.read_file(str(other / "head.tensor")), tf.string).numpy()
    head[0] = b"0123456789abcdef0123456789abcdef"
    (other / "head.tensor").write_bytes(tf.io.serialize_tensor(tf.constant(head)).numpy())
    with pytest.raises(tf.errors.InvalidArgumentError, match="another base"):
        m.apply_delta(tf.constant(str(other)))
    np.testing.assert_array_equal(serve_probe(m), before)
    # a delta missing a file changes nothing either
    broken = tmp_path / "broken"
    shutil.copytree(first, broken)
    (broken / "table-1.rows.tensor").unlink()
    with pytest.raises(tf.errors.NotFoundError):
        m.apply_delta(tf.constant(str(broken)))
    assert int(m.sequence.numpy()) == 0
    np.testing.assert_array_equal(serve_probe(m), before)
    assert int(m.apply_delta(tf.constant(str(first))).numpy()) == 1
    np.testing.assert_allclose(serve_probe(m), run["expected"][EVERY], rtol=0, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="in sequence"):
        m.apply_delta(tf.constant(str(first)))  # twice
    np.testing.assert_allclose(serve_probe(m), run["expected"][EVERY], rtol=0, atol=1e-6)


def test_bad_export_settings_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    job = make_job()
    with pytest.raises(ValueError, match="give both"):
        job.fit(steps=1, export_every="2")
    with pytest.raises(ValueError, match="give both"):
        job.fit(steps=1, export_dir=tmp_path / "e")
    with pytest.raises(ValueError, match="neither a step count"):
        job.fit(steps=1, export_every="soon", export_dir=tmp_path / "e")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "base").mkdir()
    with pytest.raises(ValueError, match="is not empty"):
        job.fit(steps=1, export_every="2", export_dir=tmp_path / "used")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        job.fit(steps=1, export_every="2", export_dir=tmp_path / "file")
    assert not (tmp_path / "e").exists()
    for flags, message in (
        (["--export-every", "60s"], "--export-dir"),
        (["--export-dir", str(tmp_path / "e")], "--export-every"),
        (["--export-every", "0", "--export-dir", str(tmp_path / "e")], "--export-every"),
        (["--export-every", "2", "--export-dir", str(tmp_path / "used")], "--export-dir"),
    ):
        assert main(["train", "--synthetic", "--steps", "1", "--no-progress", *flags]) == 2, flags
        assert f"error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


def test_on_servers_with_the_backstop_the_last_delta_serves_the_trained_model(tmp_path: Path) -> None:
    job = make_job()
    report = job.fit(
        cluster=xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1)),
        deterministic=True,
        seed=1,
        save_dir=tmp_path / "backstop",
        backstop_every="3",
        export_every=str(EVERY),
        export_dir=tmp_path / "serving",
    )
    assert report["exports"]["deltas"] == STEPS // EVERY
    m = tf.saved_model.load(str(tmp_path / "serving" / "base"))
    for delta in deltas_of(tmp_path / "serving"):
        m.apply_delta(tf.constant(str(delta)))
    np.testing.assert_allclose(serve_probe(m), job.predict(probe()), rtol=0, atol=1e-6)
    # the backstop still gets every change: its newest save (a chain of increments) is the trained model too
    saved = xdl_ec.load(tmp_path / "backstop", job)
    np.testing.assert_allclose(saved.predict(probe()), job.predict(probe()), rtol=0, atol=1e-6)
    saved.close()


def described_inputs(model_dir: Path, size: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
    """Random inputs for a SavedModel's signature as its ``serving.json`` describes them (ids of the synthetic
    data's range and beyond)."""
    inputs = {}
    for name, text in json.loads((model_dir / "assets.extra" / "serving.json").read_text())["inputs"].items():
        dtype, shape = text.split(" ", 1)
        if shape == "[nnz]":  # variable-length ids: with their row splits below
            continue
        if shape == "[B + 1]":
            splits = np.concatenate([[0], np.cumsum(rng.integers(0, 4, size))]).astype(np.int64)
            inputs[name] = splits
            inputs[name.replace("_row_splits", "_values")] = rng.integers(0, 300, int(splits[-1]))
            continue
        dims = [size] + [int(d) for d in shape.strip("[]").split(", ")[1:]]
        inputs[name] = rng.normal(size=dims).astype(np.float32) if dtype == "float32" else rng.integers(0, 300, dims)
    return inputs


def test_the_cli_exports_the_built_in_job_and_its_deltas_serve_the_saved_model(tmp_path: Path) -> None:
    serving, saves, report = tmp_path / "serving", tmp_path / "saves", tmp_path / "report.json"
    flags = ["--synthetic", "--synthetic-rows", "2000", "--batch-size", "128", "--steps", "5", "--deterministic"]
    flags += ["--export-every", "2", "--export-dir", str(serving), "--save-dir", str(saves), "--no-progress"]
    assert main(["train", *flags, "--report", str(report)]) == 0
    exports = json.loads(report.read_text())["exports"]
    assert exports["deltas"] == 3 and [r["step"] for r in exports["records"]] == [2, 4, 5]  # the end's delta too
    assert main(["export", "--from", str(saves), "--out", str(tmp_path / "full")]) == 0
    inputs = {k: tf.constant(v) for k, v in described_inputs(serving / "base", 256, np.random.default_rng(0)).items()}
    m = tf.saved_model.load(str(serving / "base"))
    for delta in deltas_of(serving):
        m.apply_delta(tf.constant(str(delta)))
    full = tf.saved_model.load(str(tmp_path / "full")).signatures["serving_default"](**inputs)["probability"]
    served = m.signatures["serving_default"](**inputs)["probability"]
    np.testing.assert_allclose(served.numpy(), full.numpy(), rtol=0, atol=1e-6)
    assert np.ptp(served.numpy()) > 1e-4


@pytest.mark.parametrize("ft", ["ckpt", "cpr"])
def test_after_a_failure_a_reset_delta_serves_the_recovered_model(ft: str, tmp_path: Path) -> None:
    """ckpt rolls every server back (rows the dirty sets cannot name disappear, the step goes back); cpr restores the
    lost server's rows from an older partial save (stale values, no newer step): the delta after the failure resets
    the tables to their whole cut, and the served model is the trained one."""
    job = make_job()
    settings = {"ckpt_interval": "3"} if ft == "ckpt" else {"cpr_interval": 3}
    cluster = xdl_ec.Cluster(servers=2, ft=ft, fail_at=["5:1"], **settings)
    report = job.fit(cluster=cluster, deterministic=True, seed=1, export_every="1", export_dir=tmp_path / "serving")
    assert len(report["failures"]) == 1
    resets = [r["step"] for r in report["exports"]["records"] if r["reset"]]
    assert len(resets) == 1, report["exports"]["records"]
    m = tf.saved_model.load(str(tmp_path / "serving" / "base"))
    for delta in deltas_of(tmp_path / "serving"):
        m.apply_delta(tf.constant(str(delta)))
    np.testing.assert_allclose(serve_probe(m), job.predict(probe()), rtol=0, atol=1e-6)


@pytest.mark.slow  # the flags' path is the built-in job's test's; this adds a --script job (~30 s under load)
def test_a_script_job_exports_through_the_cli(tmp_path: Path) -> None:
    script = str(Path(__file__).resolve().parents[2] / "examples" / "user_item_tags.py")
    serving, saves = tmp_path / "serving", tmp_path / "saves"
    flags = ["--script", script, "--steps", "4", "--deterministic", "--no-progress"]
    assert main(["train", *flags, "--export-every", "2", "--export-dir", str(serving), "--save-dir", str(saves)]) == 0
    assert [d.name for d in deltas_of(serving)] == ["delta-000001", "delta-000002"]
    assert main(["export", "--from", str(saves), "--out", str(tmp_path / "full"), "--script", script]) == 0
    inputs = {k: tf.constant(v) for k, v in described_inputs(serving / "base", 64, np.random.default_rng(1)).items()}
    m = tf.saved_model.load(str(serving / "base"))
    for delta in deltas_of(serving):
        m.apply_delta(tf.constant(str(delta)))
    full = tf.saved_model.load(str(tmp_path / "full")).signatures["serving_default"](**inputs)["probability"]
    np.testing.assert_allclose(
        m.signatures["serving_default"](**inputs)["probability"].numpy(), full.numpy(), atol=1e-6
    )
