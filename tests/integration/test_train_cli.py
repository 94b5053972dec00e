"""`xdl-ec train`: reports, determinism, data errors, flag errors, the demo, and DLRM vs the plain-Keras peer."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from support.paths import CRITEO_SAMPLE, REPO_ROOT  # noqa: E402
from xdl_ec.cli import main  # noqa: E402

ROOT = REPO_ROOT
SAMPLE = CRITEO_SAMPLE
REPORT_FIELDS = {
    "samples",
    "steps",
    "samples_per_sec",
    "final_loss",
    "auc",
    "logloss",
    "model_digest",
    "config",
    "eval_samples",
    "bad_lines",
    "embedding_rows",
}
TINY = [
    "--synthetic",
    "--synthetic-rows",
    "3000",
    "--synthetic-max-cardinality",
    "500",
    "--batch-size",
    "256",
    "--emb-dim",
    "4",
    "--no-progress",
]


def train(tmp_path: Path, *flags: str, name: str = "report.json") -> dict:
    path = tmp_path / name
    assert main(["train", *flags, "--report", str(path)]) == 0
    return json.loads(path.read_text())


def test_synthetic_run_reports_every_field(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    report = train(tmp_path, *TINY, "--steps", "6")
    assert REPORT_FIELDS <= report.keys()
    assert report["steps"] == 6 and report["samples"] == 6 * 256
    assert report["samples_per_sec"] > 0 and np.isfinite(report["final_loss"])
    assert report["eval_samples"] == 300 and 0.0 <= report["auc"] <= 1.0 and report["logloss"] > 0
    assert len(report["model_digest"]) == 64 and report["embedding_rows"] > 0
    assert report["config"]["synthetic"] and report["config"]["steps"] == 6
    out = capsys.readouterr().out
    assert "AUC" in out and report["model_digest"] in out


def test_epochs_cover_the_train_split(tmp_path: Path) -> None:
    report = train(tmp_path, *TINY, "--epochs", "2", "--model", "mlp", "--hidden", "8")
    assert report["samples"] == 2 * 2700 and report["steps"] == 2 * 11


def test_deterministic_runs_give_the_same_digest(tmp_path: Path) -> None:
    flags = [*TINY, "--steps", "4", "--deterministic", "--optimizer", "adam", "--lr", "0.01"]
    first = train(tmp_path, *flags, name="a.json")
    second = train(tmp_path, *flags, name="b.json")
    assert first["model_digest"] == second["model_digest"]
    assert first["final_loss"] == second["final_loss"]
    other_seed = train(tmp_path, *flags, "--seed", "1", name="c.json")
    assert other_seed["model_digest"] != first["model_digest"]


def write_criteo(path: Path, lines: int, bad: dict[int, str] | None = None) -> Path:
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(lines):
        ints = [str(v) for v in rng.integers(0, 20, 13)]
        cats = [f"{v:08x}" for v in rng.integers(0, 50, 26)]
        rows.append("\t".join([str(int(rng.random() < 0.3)), *ints, *cats]))
    for i, line in (bad or {}).items():
        rows[i] = line
    path.write_text("".join(r + "\n" for r in rows))
    return path


def test_bad_lines_skip_is_counted_and_error_stops(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = write_criteo(tmp_path / "bad.tsv", 400, {10: "1\t2\t3", 20: "x" + "\t" * 39})
    report = train(
        tmp_path,
        "--data",
        str(data),
        "--on-bad-line",
        "skip",
        "--epochs",
        "1",
        "--batch-size",
        "64",
        "--emb-dim",
        "4",
        "--no-progress",
    )
    assert report["bad_lines"] == 2 and report["samples"] == 360 - 2
    assert main(["train", "--data", str(data), "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{data}:11: wrong field count" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--data", "/nonexistent/criteo.tsv"], "no such file"),
        (["--synthetic", "--batch-size", "0"], "--batch-size"),
        (["--synthetic", "--eval-fraction", "1.5"], "--eval-fraction"),
        (["--synthetic", "--lr", "-1"], "--lr"),
        (["--synthetic", "--model", "wide"], "--model"),
        (["--synthetic", "--optimizer", "rmsprop"], "unknown name 'rmsprop'"),
        (["--synthetic", "--top-mlp", "64,x"], "--top-mlp"),
        (["--synthetic", "--steps", "3", "--epochs", "2"], "not allowed with"),
        (["--synthetic", "--report", "/nonexistent/dir/r.json"], "--report"),
    ],
)
def test_bad_flags_exit_2_with_one_line(flags: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    try:
        status = main(["train", *flags])
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_unreadable_or_empty_data_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    good = write_criteo(tmp_path / "good.tsv", 200)
    truncated = tmp_path / "truncated.tsv.gz"
    truncated.write_bytes(gzip.compress(good.read_bytes())[:-40])
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    for path, message in ((truncated, f"{truncated}: cannot read the file"), (empty, "train split is empty")):
        assert main(["train", "--data", str(path), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam", "ftrl"])
def test_every_sparse_optimizer_trains(tmp_path: Path, optimizer: str) -> None:
    report = train(tmp_path, *TINY, "--steps", "3", "--optimizer", optimizer, "--lr", "0.01")
    assert report["steps"] == 3 and np.isfinite(report["final_loss"])
    assert report["config"]["optimizer"] == optimizer


def test_missing_file_from_the_shell(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "xdl_ec", "train", "--data", str(tmp_path / "none.tsv")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"xdl-ec train: error: --data: no such file: {tmp_path / 'none.tsv'}"]


def test_no_arguments_runs_the_demo_on_the_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    sample = write_criteo(tmp_path / "sample.tsv", 300)
    monkeypatch.setenv("XDL_EC_CRITEO_SAMPLE", str(sample))
    monkeypatch.chdir(tmp_path)
    assert main(["train"]) == 0
    captured = capsys.readouterr()
    assert f"demo on {sample}" in captured.err
    assert "eval on 30 held-out rows" in captured.out


def load_peer():  # noqa: ANN201 - the bench module
    spec = importlib.util.spec_from_file_location("keras_peer", ROOT / "bench" / "keras_peer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dlrm_auc_matches_the_plain_keras_peer_on_criteo() -> None:
    if not SAMPLE.exists():
        pytest.skip(f"Criteo sample absent: {SAMPLE}")
    from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job

    peer = load_peer()
    ours, theirs = [], []
    for seed in (0, 1):  # the mean over two seeds: one 999-row hold-out is noisy at the 0.01 level
        config = TrainConfig(data=str(SAMPLE), seed=seed, deterministic=True, progress=False)  # the CLI defaults
        report = criteo_job(config).fit(deterministic=True, seed=seed)
        assert (report["samples"], report["eval_samples"]) == (3 * 9000, 999)
        ours.append(report["auc"])
        theirs.append(peer.KerasPeer(config).run()["auc"])
    assert min(ours) > 0.70, f"xdl-ec DLRM AUC {ours} below a sensible model's on this sample"
    assert abs(np.mean(ours) - np.mean(theirs)) <= 0.01, f"xdl-ec {ours} vs plain Keras {theirs}"


def run_cli(tmp_path: Path, *args: str, env: dict | None = None, prelude: str = "") -> subprocess.CompletedProcess:
    """``xdl-ec ARGS`` in a fresh process whose stderr is a pipe (not a terminal); ``prelude``: Python run first."""
    code = f"{prelude}\nimport sys\nfrom xdl_ec.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    base.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user who set nothing
    base.pop("RAY_LOGGER_LEVEL", None)
    return subprocess.run(
        [sys.executable, "-P", "-c", code, *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=300,
        cwd=tmp_path,
    )


# Fails the run the moment TensorFlow or Ray is imported: flag errors must come before either.
NO_TF_OR_RAY = """
import sys
class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras", "ray"):
            raise RuntimeError(f"{name} imported before every flag was checked")
sys.meta_path.insert(0, _Refuse())
"""


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--synthetic", "--servers", "3", "--ft", "ec", "--code", "2,1", "--fail-at", "40:5"],
            "--fail-at 40:5: there is no server 5 (the run has 3 servers, indices 0..2)",
        ),
        (
            ["--synthetic", "--servers", "3", "--workers", "2", "--fail-worker-at", "4:2"],
            "--fail-worker-at 4:2: there is no worker 2 (the run has 2 workers, indices 0..1)",
        ),
        (
            ["--synthetic", "--steps", "10", "--servers", "3", "--fail-at", "20:1"],
            "--fail-at 20:1: the run has only 10 steps; pick a step in 1..10",
        ),
        (
            [
                "--script",
                str(ROOT / "examples" / "user_item_tags.py"),
                "--steps",
                "3",
                "--servers",
                "3",
                "--fail-at",
                "2:7",
            ],
            "--fail-at 2:7: there is no server 7 (the run has 3 servers, indices 0..2)",
        ),
        (
            ["--synthetic", "--servers", "2", "--ft", "ec", "--code", "4,1"],
            "--servers: the code k=4, r=1 needs at least k + r = 5 servers, got 2; add servers or use a smaller code",
        ),
    ],
)
def test_flags_are_checked_before_tensorflow_or_ray_is_imported(tmp_path: Path, flags: list[str], message: str) -> None:
    proc = run_cli(tmp_path, "train", *flags, "--no-progress", prelude=NO_TF_OR_RAY)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [f"xdl-ec train: error: {message}"]


def test_an_argument_error_is_one_line_and_a_pointer_to_help(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "train", "--synthetic", "--servers", "6", "--ft", "ec", "--code", "5,5")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "xdl-ec train: error: argument --code: expected K,R (data and parity servers per stripe) like 4,1: need "
        "k >= 1, 1 <= r <= 4 and k + r <= 32, got k=5, r=5",
        "run 'xdl-ec train --help' for every flag",
    ]


STARTUP_NOISE = (
    "absl::InitializeLog",
    "oneDNN",
    "cpu_feature_guard",
    "This TensorFlow binary is optimized",
    " INFO ",
    "Started a local Ray instance",
    "Pushing file package",
)


@pytest.mark.ray
def test_no_tensorflow_or_ray_start_up_lines_and_plain_progress_lines(tmp_path: Path) -> None:
    """stderr is a pipe: the progress is plain lines (no bar), and neither TF nor Ray prints its start-up lines."""
    proc = run_cli(
        tmp_path,
        "train",
        "--synthetic",
        "--synthetic-rows",
        "3000",
        "--steps",
        "5",
        "--servers",
        "2",
        "--backend",
        "ray",
        env={"RAY_AUTH_MODE": "disabled"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not [line for line in proc.stderr.splitlines() if any(n in line for n in STARTUP_NOISE)], proc.stderr
    assert "\r" not in proc.stderr and "%|" not in proc.stderr
    assert re.fullmatch(r"step 1/5: loss \d+\.\d{4}, progressive AUC \d\.\d{4}", proc.stderr.strip()), proc.stderr
    assert "trained dlrm: 640 samples in 5 steps" in proc.stdout


def test_the_python_api_prints_no_tensorflow_start_up_lines(tmp_path: Path) -> None:
    code = (
        f"import sys\nsys.path.insert(0, {str(ROOT / 'examples')!r})\n"
        "import user_item_tags as ex\n"
        "job = ex.make_job(ex.ClickLog(batch_size=64, batches=4, eval_batches=1))\n"
        "print(job.fit()['steps'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["4"]
    assert proc.stderr == ""
    # a user who asks for TF's INFO lines gets them
    loud = subprocess.run(
        [sys.executable, "-P", "-c", "import xdl_ec, tensorflow"],
        capture_output=True,
        text=True,
        env={**env, "TF_CPP_MIN_LOG_LEVEL": "0"},
        timeout=300,
        cwd=tmp_path,
    )
    assert "oneDNN" in loud.stderr or "cpu_feature_guard" in loud.stderr


def test_a_resumed_run_names_its_steps_the_save_it_resumed_and_where_saves_go(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    saves = tmp_path / "saves"
    flags = [*TINY, "--deterministic", "--save-dir", str(saves)]
    assert main(["train", *flags, "--steps", "6"]) == 0
    first = capsys.readouterr().out.splitlines()
    assert first[0].startswith("trained dlrm: 1,536 samples in 6 steps, ")
    assert first[1] == f"saves go to {saves.resolve()} (newest: step 6)"
    from xdl_ec.keep.saved_run import SavedRun

    step_6 = SavedRun.open(saves).directory.resolve()
    assert main(["train", *flags, "--steps", "10", "--resume", str(saves)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("trained dlrm: 1,024 samples in 4 steps this run (steps 7-10), ")
    assert out[1] == f"resumed the save of step 6 in {step_6}; saves go to {saves.resolve()} (newest: step 10)"


def test_sigterm_stops_at_a_step_boundary_saves_and_exits_143(tmp_path: Path) -> None:
    """SIGTERM is a clean stop: the run saves the step it stopped at and says how to resume it; exit 143."""
    import signal

    from xdl_ec.keep.saved_run import SavedRun

    saves = tmp_path / "saves"
    args = ["train", *TINY[:-1], "--steps", "20000", "--save-dir", "saves", "--save-every", "100000"]
    code = "import sys\nfrom xdl_ec.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, "-P", "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )
    try:
        first = proc.stderr.readline()  # the progress' first line: training has begun
        assert first.startswith("step 1/20,000: loss"), first
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    rest = proc.stderr.read().splitlines()
    assert status == 143, rest
    saved = SavedRun.open(saves)
    assert 1 <= saved.step < 20000
    assert rest == [
        "xdl-ec train: SIGTERM: stopping at the next step boundary (SIGTERM again: at once)",
        f"xdl-ec train: interrupted (SIGTERM), stopped at step {saved.step:,}; last save: step {saved.step:,} in "
        f"{saved.directory.resolve()}",
        f"resume with: xdl-ec {' '.join(args)} --resume saves",
    ]


def test_reattach_flags_are_checked_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["train", "--synthetic", "--steps", "2", "--no-progress"]
    assert main([*base, "--servers", "3", "--reattach-within", "5"]) == 2
    assert "--reattach-within" in capsys.readouterr().err
    on_ray = [*base, "--servers", "3", "--backend", "ray", "--run-dir", str(tmp_path)]
    assert main([*on_ray, "--reattach-within", "0"]) == 2
    assert "must be > 0" in capsys.readouterr().err
    # a reattachable run keeps its dense state in its one worker: several are refused before Ray starts
    flags = [*base, "--servers", "3", "--workers", "2", "--backend", "ray", "--run-dir", str(tmp_path)]
    assert main(flags) == 2
    assert "one worker" in capsys.readouterr().err
    assert not (tmp_path / "ray-head.json").exists()
