"""Online training (issue #36): progressive validation (the AUC and log loss of each batch scored by its own step
before the update, the same in one process and on servers); an endless file stream trained exactly once through
SIGKILLs and resumes; TensorBoard scalars read back from the event files."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.examples import load_example  # noqa: E402
from xdl_ec.cli import main  # noqa: E402

tags = load_example("user_item_tags")
esmm = load_example("esmm")
LOG = tags.ClickLog(batch_size=64, batches=12, eval_batches=2)


def test_progressive_figures_are_the_steps_own_pre_update_scores_and_match_on_servers(capsys) -> None:  # noqa: ANN001
    here = tags.make_job(LOG).fit(deterministic=True, seed=3, progress=True)
    progressive = here["progressive"]
    assert set(progressive) == {"auc", "logloss", "samples"} and progressive["samples"] == 12 * 64
    assert 0.0 <= progressive["auc"] <= 1.0
    # the step's loss is the mean cross-entropy of the same pre-update probabilities: over equal batches their
    # mean is the window's log loss (float32 step arithmetic)
    losses = [row[3] for row in here["timeline"]]
    assert progressive["logloss"] == pytest.approx(float(np.mean(losses)), rel=1e-5)
    assert "progressive AUC" in capsys.readouterr().err  # the progress line (not a terminal: plain lines)
    servers = tags.make_job(LOG).fit(cluster=xdl_ec.Cluster(servers=2), deterministic=True, seed=3)
    assert servers["model_digest"] == here["model_digest"]
    assert servers["progressive"] == progressive


def test_two_workers_score_every_sample_and_several_heads_get_their_own_figures() -> None:
    two = tags.make_job(LOG).fit(cluster=xdl_ec.Cluster(servers=2, workers=2), deterministic=True, seed=3)
    assert two["progressive"]["samples"] == 12 * 64
    log = esmm.ImpressionLog(batch_size=64, batches=10, eval_batches=2)
    report = esmm.make_job(log).fit(deterministic=True, seed=1)
    progressive = report["progressive"]
    assert set(progressive["heads"]) == {"buy", "click"} and progressive["samples"] == 10 * 64
    assert progressive["auc"] == progressive["heads"]["buy"]["auc"]  # the first head by name, as evaluation
    assert all(0.0 <= h["auc"] <= 1.0 and h["logloss"] > 0 for h in progressive["heads"].values())


# ---- an endless file stream, trained exactly once through SIGKILLs ---------------------------------------------
FILES, ROWS, BATCH = 6, 120, 40  # 18 batches


def row(i: int) -> str:
    """A Criteo row whose C26 is its sample id (hex); the label depends on C1 so the model has something to learn."""
    c1 = i * 2654435761 % 97
    return "\t".join([str(int(c1 < 30)), *[str(i % 11)] * 13, f"{c1:08x}", *["0000abcd"] * 24, f"{i:08x}"])


def put_file(directory: Path, n: int) -> None:
    """File n (rows n * ROWS ...), written under a dot name and renamed in; odd ones gzipped."""
    text = "".join(row(i) + "\n" for i in range(n * ROWS, (n + 1) * ROWS)).encode()
    tmp = directory / f".part-{n:02d}"
    tmp.write_bytes(gzip.compress(text) if n % 2 else text)
    tmp.rename(directory / f"part-{n:02d}")


def stream_dir(root: Path, files: int) -> Path:
    directory = root / "stream"
    directory.mkdir()
    for n in range(files):
        put_file(directory, n)
    return directory


def killed(command: list, saves: Path, rng: np.random.Generator, env: dict, cwd: Path) -> None:
    """Runs ``command`` and SIGKILLs it at a random point after its first save."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "xdl_ec", *command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        cwd=cwd,
    )
    try:
        deadline = time.monotonic() + 180
        while not any(saves.glob("ckpt-*")):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no save within 180 s"
            time.sleep(0.05)
        time.sleep(float(rng.uniform(0.0, 1.5)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def newest_save(saves: Path) -> dict:
    newest = sorted(saves.glob("ckpt-*"))[-1]
    return json.loads((newest / "MANIFEST.json").read_text())


def test_a_stream_killed_at_random_and_resumed_ends_at_the_uninterrupted_model(tmp_path: Path) -> None:
    """Files arrive while the run goes on, the driver is SIGKILLed twice at random points and resumed from its newest
    save each time with the files before the save's position gone (a resume reads nothing before it): the model is
    the uninterrupted run's (--deterministic), and so is its progressive validation over the whole stream."""
    rng = np.random.default_rng(36)
    common = ["train", "--batch-size", str(BATCH), "--deterministic", "--seed", "2", "--no-progress"]
    full = tmp_path / "full"
    full.mkdir()
    reference = tmp_path / "reference.json"
    assert (
        main(
            [*common, "--stream", str(stream_dir(full, FILES)), "--stream-idle-exit", "0.5", "--report", str(reference)]
        )
        == 0
    )
    expected = json.loads(reference.read_text())
    assert expected["steps"] == FILES * ROWS // BATCH and expected["samples"] == FILES * ROWS
    assert expected["progressive"]["samples"] == FILES * ROWS

    online = tmp_path / "online"
    online.mkdir()
    directory = stream_dir(online, 2)
    saves = online / "saves"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    command = [
        *common,
        "--stream",
        str(directory),
        "--stream-idle-exit",
        "60",
        "--save-dir",
        str(saves),
        "--save-every",
        "2",
    ]
    killed(command, saves, rng, env, tmp_path)
    for n in range(2, 4):
        put_file(directory, n)
    killed([*command, "--resume", str(saves)], saves, rng, env, tmp_path)
    cut = newest_save(saves)
    position = cut["reader_position"]["worker_inputs"][0]["stream"]
    assert position is not None and cut["reader_position"]["worker_batches"] == [cut["step"]]
    for name in os.listdir(directory):
        if name < position["file"]:
            os.remove(directory / name)
    for n in range(4, FILES):
        put_file(directory, n)
    report = tmp_path / "resumed.json"
    assert (
        main(
            [
                *common,
                "--stream",
                str(directory),
                "--stream-idle-exit",
                "0.5",
                "--save-dir",
                str(saves),
                "--save-every",
                "2",
                "--resume",
                str(saves),
                "--report",
                str(report),
            ]
        )
        == 0
    )
    resumed = json.loads(report.read_text())
    assert resumed["resumed_from"]["step"] == cut["step"]
    assert resumed["steps"] == expected["steps"] and resumed["samples"] == FILES * ROWS - cut["extra"]["samples"]
    assert resumed["model_digest"] == expected["model_digest"]


SCRIPT = '''
import json, os
import numpy as np
import xdl_ec
from xdl_ec.builtin.criteo_job import StreamBatches, TrainConfig, criteo_job
from xdl_ec.data.schema import categorical_keys

IDS = {int(k): i for i, k in enumerate(categorical_keys(
    np.array([[0] * 25 + [i] for i in range(%(rows)d)], np.uint64))[:, -1])}


class Logged:
    """The built-in stream input, writing the sample ids of every batch it hands out (before it trains)."""

    def __init__(self, config, worker, count):
        self.inner, self.worker, self.first = StreamBatches(config, worker, count), worker, 0
        self.resumed = False

    def resume_at(self, position):
        self.inner.resume_at(position)
        self.first, self.resumed = position["batches"], True

    def position_after(self, batches):
        return self.inner.position_after(batches)

    def stats(self):
        return self.inner.stats()

    def __iter__(self):
        for n, batch in enumerate(self.inner, self.first + 1):
            ids = [IDS[int(k)] for k in batch["categorical"][:, -1]]
            with open(os.environ["ID_LOG"], "a") as f:
                f.write(json.dumps({"worker": self.worker, "batch": n, "ids": ids, "resumed": self.resumed}) + "\\n")
            yield batch


class LoggedInput:
    def __init__(self, config):
        self.config = config

    def __call__(self, worker, count):
        return Logged(self.config, worker, count)


def job():
    config = TrainConfig(stream=os.environ["STREAM"], stream_idle_exit=float(os.environ["IDLE"]),
                         batch_size=%(batch)d, progress=False, model="mlp", hidden=(16,))
    built = criteo_job(config)
    return xdl_ec.Job(built.tables, built.features, built.spec.model_fn, LoggedInput(config))
'''


def test_two_workers_on_a_stream_train_every_sample_exactly_once_through_a_sigkill(tmp_path: Path) -> None:
    """Sample ids logged as each worker's input hands batches out: the killed run's batches up to its newest save,
    then the resumed run's from its saved positions, are every sample once (none twice, none skipped). (A resumed
    worker first reads its input's first batch to build its model, then continues at its position: that read trains
    nothing and is left out.)"""
    rng = np.random.default_rng(7)
    script = tmp_path / "logged_stream.py"
    script.write_text(SCRIPT % {"rows": FILES * ROWS, "batch": BATCH})
    directory = stream_dir(tmp_path, 3)
    saves, log = tmp_path / "saves", tmp_path / "ids.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "STREAM": str(directory),
        "ID_LOG": str(log),
        "IDLE": "60",
    }
    cluster = ["--servers", "2", "--workers", "2"]
    common = [
        "train",
        "--script",
        str(script),
        "--no-progress",
        *cluster,
        "--save-dir",
        str(saves),
        "--save-every",
        "1",
    ]
    killed(common, saves, rng, env, tmp_path)
    cut = newest_save(saves)
    before = [json.loads(x) for x in log.read_text().splitlines()]
    log.unlink()
    for n in range(3, FILES):
        put_file(directory, n)
    os.environ.update(STREAM=str(directory), ID_LOG=str(log), IDLE="0.5")
    try:
        assert main([*common, "--resume", str(saves)]) == 0
    finally:
        for name in ("STREAM", "ID_LOG", "IDLE"):
            os.environ.pop(name, None)
    after = [json.loads(x) for x in log.read_text().splitlines()]
    step = cut["step"]
    trained = [i for (_, b), ids in by_batch(before).items() if b <= step for i in ids]
    trained += [i for ids in by_batch([e for e in after if e["resumed"]]).values() for i in ids]
    assert sorted(trained) == list(range(FILES * ROWS))  # each sample once: none twice, none skipped
    resumed = [e for e in after if e["resumed"]]
    assert min(e["batch"] for e in resumed) == step + 1 and {e["worker"] for e in resumed} == {0, 1}


def by_batch(entries: list) -> dict:
    """{(worker, batch): ids}; a batch handed out twice (the model is built from a worker's first batch read by
    another pass over the input) must hold the same ids each time."""
    out: dict = {}
    for e in entries:
        assert out.setdefault((e["worker"], e["batch"]), e["ids"]) == e["ids"]
    return out


def test_the_built_in_job_on_a_stream_from_python_stops_after_its_steps(tmp_path: Path) -> None:
    from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job

    # no idle exit: the run ends after its steps without waiting for rows past them
    config = TrainConfig(
        stream=str(stream_dir(tmp_path, 2)), stream_idle_exit=None, batch_size=BATCH, steps=4, progress=False
    )
    job = criteo_job(config)
    assert job.spec.eval_fn is None  # a stream has no hold-out: progressive validation measures it
    report = job.fit(cluster=xdl_ec.Cluster(servers=2, workers=2))
    assert report["steps"] == 2 and report["samples"] == 4 * BATCH and report["progressive"]["samples"] == 4 * BATCH
    assert [w["input"]["stream_file"] for w in report["workers"]] == ["part-01", "part-01"]


def test_a_rollback_on_a_stream_resumes_at_the_kept_position_and_ends_exact(tmp_path: Path) -> None:
    """--ft ckpt rolls every worker back to the last checkpoint: their inputs continue at the stream position they
    kept for that batch (a new reader starting inside a later file), and the run ends at the failure-free model."""
    from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job

    config = TrainConfig(
        stream=str(stream_dir(tmp_path, FILES)), stream_idle_exit=0.0, batch_size=BATCH, progress=False, seed=1
    )
    free = criteo_job(config).fit(cluster=xdl_ec.Cluster(servers=3, workers=2), deterministic=True, seed=1)
    cluster = xdl_ec.Cluster(
        servers=3, workers=2, ft="ckpt", ckpt_interval="3", ckpt_dir=str(tmp_path / "ckpt"), fail_at=("5:1",)
    )
    report = criteo_job(config).fit(cluster=cluster, deterministic=True, seed=1)
    assert len(report["failures"]) == 1 and report["lost_samples"] > 0
    assert report["model_digest"] == free["model_digest"]
    # the rolled-back readers began at their positions (end of batch 6 of 18: inside the second file), so each
    # new reader finished fewer files than the stream has
    assert all(w["input"]["stream_files_read"] < FILES for w in report["workers"])


def test_stream_flags_that_cannot_work_are_usage_errors(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert main(["train", "--stream", str(tmp_path / "nope")]) == 2
    assert "--stream: no such directory" in capsys.readouterr().err
    assert main(["train", "--stream", str(tmp_path), "--epochs", "2"]) == 2
    assert "--epochs: a stream is endless and has no hold-out" in capsys.readouterr().err
    assert main(["train", "--synthetic", "--stream-idle-exit", "5"]) == 2
    assert "--stream-idle-exit: ends a --stream" in capsys.readouterr().err


def test_a_stream_directory_vanishing_mid_run_stops_with_a_clear_error(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import threading

    directory = stream_dir(tmp_path, 1)
    remove = threading.Timer(6.0, shutil.rmtree, (directory,))
    remove.start()
    try:
        assert (
            main(
                [
                    "train",
                    "--stream",
                    str(directory),
                    "--stream-idle-exit",
                    "60",
                    "--batch-size",
                    str(BATCH),
                    "--no-progress",
                ]
            )
            == 2
        )
    finally:
        remove.join()
    err = capsys.readouterr().err
    # gone while the stream waits for a new file (or, on a slow start, before it opened: no such directory)
    assert (
        f"stream directory {directory} vanished (read up to 'part-00', line {ROWS})" in err
        or f"stream directory {directory}: no such directory" in err
    )


def test_a_corrupt_line_mid_stream_stops_naming_it_or_is_skipped(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    directory = stream_dir(tmp_path, 2)
    with open(directory / "part-00", "a") as f:  # a plain file: a torn line at its end
        f.write("1\t2\t3\n")
    common = [
        "train",
        "--stream",
        str(directory),
        "--stream-idle-exit",
        "0.2",
        "--batch-size",
        str(BATCH),
        "--no-progress",
    ]
    assert main(common) != 0
    assert "part-00:121: wrong field count" in capsys.readouterr().err
    report = tmp_path / "skip.json"
    logdir = tmp_path / "tb"
    assert main([*common, "--on-bad-line", "skip", "--report", str(report), "--logdir", str(logdir)]) == 0
    figures = json.loads(report.read_text())
    assert figures["samples"] == 2 * ROWS and figures["workers"][0]["input"]["bad_lines"] == 1
    last = {tag: points[-1] for tag, points in scalars(logdir).items()}  # --logdir: the same scalars as fit's
    assert last["progressive/auc"] == (figures["steps"], pytest.approx(figures["progressive"]["auc"], rel=1e-6))
    assert last["rows/criteo_categorical"][1] == figures["embedding_rows"] and last["failures"][1] == 0.0


# ---- TensorBoard ----------------------------------------------------------------------------------------------
def scalars(logdir: Path) -> dict:
    """{tag: [(step, value)]} read back from the event files."""
    import tensorflow as tf

    out: dict = {}
    for path in sorted(logdir.rglob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, float(tf.make_ndarray(v.tensor))))
    return out


def test_logdir_writes_loss_progressive_auc_rate_rows_and_failures_read_back(tmp_path: Path) -> None:
    from xdl_ec.job.tensorboard_log import TensorBoardLog

    logdir = tmp_path / "tb"
    report = tags.make_job(LOG).fit(deterministic=True, seed=3, logdir=logdir, save_dir=tmp_path / "saves")
    got = scalars(logdir)
    last = {tag: points[-1] for tag, points in got.items()}
    assert last["progressive/auc"] == (12, pytest.approx(report["progressive"]["auc"], rel=1e-6))
    assert last["progressive/logloss"] == (12, pytest.approx(report["progressive"]["logloss"], rel=1e-6))
    assert last["failures"] == (12, 0.0) and last["saves"] == (12, 1.0)
    for table in ("users", "items", "tags"):
        assert last[f"rows/{table}"][1] > 0
    assert last["rows/users"][1] + last["rows/items"][1] + last["rows/tags"][1] == report["embedding_rows"]
    assert "loss" in last and last["loss"][0] == 12
    # written every step (every=0): the loss at each step is that step's, the rate is there from the second write
    every = tmp_path / "every"
    log = TensorBoardLog(every, every=0.0)
    job = tags.make_job(LOG)
    from xdl_ec.job.local_run import LocalRun

    run = LocalRun(job.spec)
    try:
        log.start(run)
        run.hooks.append(log)
        run.fit(4)
    finally:
        log.close()
        run.close()
    got = scalars(every)
    assert [s for s, _ in got["loss"]] == [1, 2, 3, 4]
    assert [v for _, v in got["loss"]] == pytest.approx(run.losses, rel=1e-6)
    assert all(v > 0 for _, v in got["samples_per_sec"]) and len(got["samples_per_sec"]) == 4


def test_logdir_on_servers_sums_rows_over_servers_and_counts_failures(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    cluster = xdl_ec.Cluster(servers=3, ft="ec", code=(2, 1), fail_at=("5:1",))
    report = tags.make_job(LOG).fit(cluster=cluster, deterministic=True, seed=3, logdir=logdir)
    last = {tag: points[-1] for tag, points in scalars(logdir).items()}
    assert last["failures"] == (12, float(len(report["injected"]))) and len(report["injected"]) == 1
    assert sum(v for tag, (_, v) in last.items() if tag.startswith("rows/")) == report["embedding_rows"]
    assert last["progressive/auc"][1] == pytest.approx(report["progressive"]["auc"], rel=1e-6)
    # the cluster's figures: bytes per sample as the report gives them, parity's lag, the failure's rebuild time
    assert last["bytes_per_sample/pulled"][1] == pytest.approx(report["bytes_pulled_per_sample"], rel=1e-5)
    assert last["bytes_per_sample/pushed"][1] == pytest.approx(report["bytes_pushed_per_sample"], rel=1e-5)
    assert "parity/lag_deltas" in last and last["parity/lag_deltas"][1] >= 0
    (failure,) = report["failures"]
    assert scalars(logdir)["failure/seconds_to_full_redundancy"] == [
        (failure["step"], pytest.approx(failure["seconds_to_full_redundancy"], rel=1e-6))
    ]
