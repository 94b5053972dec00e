"""Save and resume (issue #15 part 1): a run stopped at step t and resumed ends at the uninterrupted run's
model_digest, on any backend, server count and fault tolerance; xdl_ec.load gives the trained model back; a save
that is missing, damaged or another job's is refused naming the file or the mismatch, with nothing changed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402
from support.paths import REPO_ROOT  # noqa: E402
from xdl_ec.cli import main  # noqa: E402

example = load_example("user_item_tags")
LOG = example.ClickLog(batch_size=64, batches=12, eval_batches=2)
STEPS, CUT, SEED = 12, 5, 3
_RUNS: dict = {}


def job(log=LOG) -> xdl_ec.Job:  # noqa: ANN001
    return example.make_job(log)


def uninterrupted() -> dict:
    if "full" not in _RUNS:
        _RUNS["full"] = job().fit(steps=STEPS, deterministic=True, seed=SEED)
    return _RUNS["full"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-process run stopped at step CUT with a save directory (the run saves at its end)."""
    root = tmp_path_factory.mktemp("save")
    report = job().fit(steps=CUT, deterministic=True, seed=SEED, save_dir=root)
    assert report["saves"]["saves"] == 1 and report["saves"]["last_step"] == CUT
    return root


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize(
    "cluster",
    [None, xdl_ec.Cluster(servers=3), xdl_ec.Cluster(servers=2)],
    ids=["one-process", "3-servers", "2-servers"],
)
def test_a_resumed_run_ends_at_the_uninterrupted_runs_model(saved: Path, cluster: "xdl_ec.Cluster | None") -> None:
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, resume=saved, cluster=cluster)
    assert report["model_digest"] == uninterrupted()["model_digest"]
    assert report["steps"] == STEPS and report["samples"] == (STEPS - CUT) * LOG.batch_size
    assert report["resumed_from"]["step"] == CUT


def test_a_save_taken_on_servers_resumes_in_one_process(tmp_path: Path) -> None:
    job().fit(steps=CUT, deterministic=True, seed=SEED, cluster=xdl_ec.Cluster(servers=3), save_dir=tmp_path)
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, resume=tmp_path)
    assert report["model_digest"] == uninterrupted()["model_digest"]


def test_resumed_under_ec_a_killed_server_is_rebuilt_with_the_loaded_rows(saved: Path) -> None:
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), fail_at=["9:1"])
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, resume=saved, cluster=cluster)
    assert [f["index"] for f in report["failures"]] == [1]
    # server 1's rows loaded at the resume are rebuilt from parity: the loaded rows reached the parity holders
    assert report["model_digest"] == uninterrupted()["model_digest"]


def test_resumed_under_ckpt_a_rollback_returns_to_the_loaded_state_not_to_empty_servers(saved: Path) -> None:
    cluster = xdl_ec.Cluster(servers=3, ft="ckpt", ckpt_interval="100", fail_at=["8:0"])
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, resume=saved, cluster=cluster)
    assert report["lost_samples"] == (8 - 1 - CUT) * LOG.batch_size
    assert report["model_digest"] == uninterrupted()["model_digest"]


def test_periodic_saves_keep_the_newest_k(tmp_path: Path) -> None:
    report = job().fit(steps=STEPS, deterministic=True, seed=SEED, save_dir=tmp_path, save_every="3", keep=2)
    assert report["saves"]["saves"] == 4  # steps 3, 6, 9, 12
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000003-step-000000000009",
        "ckpt-000004-step-000000000012",
    ]
    again = job().fit(steps=STEPS, deterministic=True, seed=SEED, resume=tmp_path)
    assert again["samples"] == 0 and again["model_digest"] == uninterrupted()["model_digest"]


def test_load_gives_the_trained_model_back(tmp_path: Path) -> None:
    trained = job()
    trained.fit(steps=STEPS, deterministic=True, seed=SEED)
    path = trained.save(tmp_path)
    assert Path(path).parent == tmp_path
    model = xdl_ec.load(tmp_path, job=job())
    batches = list(LOG.holdout())
    for batch in batches:
        np.testing.assert_array_equal(model.predict(batch), trained.predict(batch))
    assert model.evaluate(batches) == trained.evaluate(batches)


def test_load_finds_the_script_job_by_itself(tmp_path: Path) -> None:
    script = REPO_ROOT / "examples" / "user_item_tags.py"
    assert (
        main(
            [
                "train",
                "--script",
                str(script),
                "--steps",
                "4",
                "--deterministic",
                "--no-progress",
                "--save-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    model = xdl_ec.load(tmp_path)  # the save names the script: no job= needed
    batch = next(iter(example.job().spec.input_fn(0, 1)))
    probabilities = model.predict(batch)
    assert probabilities.shape == (len(batch["label"]),) and np.all((probabilities > 0) & (probabilities < 1))


def test_a_job_built_in_python_needs_job_to_load(tmp_path: Path) -> None:
    trained = job()
    trained.fit(steps=2)
    trained.save(tmp_path)
    with pytest.raises(ValueError, match="built in Python .*pass it"):
        xdl_ec.load(tmp_path)


# ---- bad saves: a clear error naming the file or the mismatch, nothing changed ------------------------------
def _copy(saved: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(saved, target)
    return target


def _one_save(root: Path) -> Path:
    (save,) = [p for p in root.iterdir() if p.name.startswith("ckpt-")]
    return save


def test_resume_from_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such save directory"):
        job().fit(steps=STEPS, resume=tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="holds no committed save"):
        job().fit(steps=STEPS, resume=tmp_path)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_resume_from_a_damaged_save_names_the_file(saved: Path, tmp_path: Path, damage: str) -> None:
    root = _copy(saved, tmp_path)
    target = sorted(_one_save(root).rglob("table-0001.values.npy"))[0]
    data = bytearray(target.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[-7] ^= 0x01
    target.write_bytes(bytes(data))
    before = tree_digest(root)
    with pytest.raises(ValueError, match="table-0001.values.npy"):
        job().fit(
            steps=STEPS, deterministic=True, seed=SEED, resume=root, cluster=xdl_ec.Cluster(servers=2), save_dir=root
        )
    assert tree_digest(root) == before  # nothing overwritten, no save added


def _other_job(dim: int = 16, optimizer: str = "adagrad") -> xdl_ec.Job:
    spec = job().spec
    tables = [
        xdl_ec.Table(
            t.name,
            dim if t.name == "users" else t.dim,
            optimizer=optimizer if t.name == "users" else t.optimizer,
            initializer=t.initializer,
            seed=t.seed,
        )
        for t in spec.tables
    ]
    by_name = {t.name: t for t in tables}
    features = [
        xdl_ec.Feature(f.name, by_name[f.table.name], combiner=f.combiner, shared_ids=f.shared_ids)
        for f in spec.features
    ]
    return xdl_ec.Job(tables, features, spec.model_fn, spec.input_fn)


@pytest.mark.parametrize(
    "other, match",
    [
        (lambda: _other_job(dim=8), r"table 'users' was saved with dim=16, this job declares dim=8"),
        (lambda: _other_job(optimizer="sgd"), r"table 'users' was saved with optimizer="),
        (
            lambda: xdl_ec.Job(
                [xdl_ec.Table("x", 4)],
                [xdl_ec.Feature("user", xdl_ec.Table("x", 4))],
                job().spec.model_fn,
                job().spec.input_fn,
            ),
            r"tables \['items', 'tags', 'users'\].*another job",
        ),
    ],
)
def test_resume_of_another_job_is_refused(saved: Path, other, match: str) -> None:  # noqa: ANN001
    before = tree_digest(saved)
    with pytest.raises(xdl_ec.SaveMismatch, match=match):
        other().fit(steps=STEPS, deterministic=True, seed=SEED, resume=saved)
    assert tree_digest(saved) == before


def test_resume_with_other_run_settings_is_refused(saved: Path) -> None:
    with pytest.raises(xdl_ec.SaveMismatch, match="seed=3, deterministic=True; resume with the same"):
        job().fit(steps=STEPS, deterministic=True, seed=4, resume=saved)
    with pytest.raises(xdl_ec.SaveMismatch, match="saved by a run of 1 worker.*--workers 1"):
        job().fit(
            steps=STEPS, deterministic=True, seed=SEED, resume=saved, cluster=xdl_ec.Cluster(servers=2, workers=2)
        )


def test_cli_save_flags_are_checked_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    def refused(*args: str) -> str:
        assert main(list(args)) == 2
        return capsys.readouterr().err

    assert "--save-every: needs --save-dir DIR" in refused("train", "--synthetic", "--steps", "2", "--save-every", "10")
    assert "--save-every:" in refused(
        "train", "--synthetic", "--steps", "2", "--save-dir", str(tmp_path), "--save-every", "often"
    )
    assert "--resume: no such save directory" in refused(
        "train", "--synthetic", "--steps", "2", "--resume", str(tmp_path / "absent")
    )
    assert "--save-dir: verify trains a fresh run" in refused(
        "verify", "--synthetic", "--steps", "2", "--servers", "3", "--code", "2,1", "--save-dir", str(tmp_path)
    )
    assert not any(tmp_path.iterdir())


def test_cli_resume_of_the_built_in_model_ends_at_the_uninterrupted_digest(tmp_path: Path) -> None:
    common = [
        "train",
        "--synthetic",
        "--synthetic-rows",
        "4000",
        "--steps",
        "20",
        "--batch-size",
        "64",
        "--deterministic",
        "--seed",
        "1",
        "--no-progress",
    ]

    def cli(*args: str) -> dict:
        report = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
        assert main([*common, *args, "--report", str(report)]) == 0
        return json.loads(report.read_text())

    full = cli()
    saves = tmp_path / "saves"
    first = cli("--save-dir", str(saves), "--save-every", "8")
    assert first["model_digest"] == full["model_digest"] and first["saves"]["saves"] == 3  # 8, 16, end (20)
    shutil.rmtree(_newest(saves))  # as if the run had died after step 16
    resumed = cli("--resume", str(saves), "--servers", "2")
    assert resumed["resumed_from"]["step"] == 16 and resumed["model_digest"] == full["model_digest"]


def _newest(root: Path) -> Path:
    return sorted(p for p in root.iterdir() if p.name.startswith("ckpt-"))[-1]


@pytest.mark.ray
def test_a_save_resumes_on_ray_and_a_save_taken_on_ray_resumes(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    import ray

    from xdl_ec.ps.backend import connect_ray

    # a relative save directory: Ray's actors run in another working directory, so the servers must be handed an
    # absolute path (they wrote their tables into their own working directory, the save held no rows and resumed
    # to another model)
    monkeypatch.chdir(tmp_path)
    started = not ray.is_initialized()
    try:
        connect_ray()
        on_ray = xdl_ec.Cluster(servers=2, backend="ray")
        report = job().fit(steps=STEPS, deterministic=True, seed=SEED, resume=saved, cluster=on_ray)
        job().fit(steps=CUT, deterministic=True, seed=SEED, save_dir="saves", cluster=on_ray)
    finally:
        if started:
            ray.shutdown()
    assert report["model_digest"] == uninterrupted()["model_digest"]
    assert sorted(p.name for p in _newest(tmp_path / "saves").iterdir()) == [
        "MANIFEST.json",
        "dense",
        "server-0000",
        "server-0001",
    ]
    resumed = job().fit(steps=STEPS, deterministic=True, seed=SEED, resume="saves")
    assert resumed["model_digest"] == uninterrupted()["model_digest"]


def test_cli_export_of_a_save_serves_what_load_predicts(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import tensorflow as tf

    model = xdl_ec.load(saved, job=job())
    assert main(["export", "--from", str(saved), "--out", str(tmp_path / "served")]) == 2  # names no job: --script
    assert "pass it" in capsys.readouterr().err and not (tmp_path / "served").exists()
    script = str(REPO_ROOT / "examples" / "user_item_tags.py")
    assert main(["export", "--from", str(saved), "--out", str(tmp_path / "served"), "--script", script]) == 0
    serve = tf.saved_model.load(str(tmp_path / "served")).signatures["serving_default"]
    for batch in LOG.holdout():
        values, splits = batch["tags"]
        out = serve(
            user=tf.constant(batch["user"]),
            item=tf.constant(batch["item"]),
            tags_values=tf.constant(values),
            tags_row_splits=tf.constant(splits),
            dense=tf.constant(batch["dense"]),
        )
        np.testing.assert_allclose(out["probability"].numpy(), model.predict(batch), atol=1e-6)
    assert main(["export", "--from", str(saved), "--out", str(tmp_path / "served"), "--script", script]) == 2
    assert "exists and is not an empty directory" in capsys.readouterr().err


def test_load_rebuilds_the_built_in_job_from_its_save(tmp_path: Path) -> None:
    assert (
        main(
            [
                "train",
                "--synthetic",
                "--synthetic-rows",
                "3000",
                "--steps",
                "3",
                "--batch-size",
                "64",
                "--deterministic",
                "--no-progress",
                "--save-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    model = xdl_ec.load(tmp_path)  # the save names the built-in model's config
    from xdl_ec.builtin.criteo_job import CriteoHoldout, TrainConfig

    holdout = CriteoHoldout(TrainConfig(synthetic=True, synthetic_rows=3000, batch_size=64))
    metrics = model.evaluate(holdout())
    assert metrics["eval_samples"] == 300 and 0.0 < metrics["logloss"] < 5.0
