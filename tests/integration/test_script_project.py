"""A script is a project (issue #33): ``xdl-ec train --script DIR/train.py`` imports the modules and the package beside
it, in this process and on Ray actors (the folder travels, bounded in size), and ``xdl_ec.load`` rebuilds the job of
its save in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from xdl_ec.cli import main  # noqa: E402
from xdl_ec.ps.backend import MAX_PROJECT_BYTES, ship_project  # noqa: E402

# Module names of their own: a module imported by an earlier test under the same name would be reused.
FILES = {
    "train.py": """
        import xdl_ec
        from clickproj_towers import make_model
        from clickproj_kit.batches import holdout, train


        def job():
            users = xdl_ec.Table("users", dim=8, seed=0)
            items = xdl_ec.Table("items", dim=8, seed=1)
            return xdl_ec.Job(tables=[users, items],
                              features=[xdl_ec.Feature("user", users), xdl_ec.Feature("item", items)],
                              model_fn=make_model, input_fn=train, eval_fn=holdout, dense_learning_rate=0.01)
        """,
    "clickproj_towers.py": """
        from clickproj_kit import sizes  # a module object: pickled by name, so the actors must import it


        def make_model():
            import tensorflow as tf

            class Towers(tf.keras.Model):
                def __init__(self):
                    super().__init__()
                    self.hidden = tf.keras.layers.Dense(sizes.HIDDEN, activation="relu")
                    self.out = tf.keras.layers.Dense(1)

                def call(self, embedded, dense, training=False):
                    return self.out(self.hidden(tf.concat([embedded["user"], embedded["item"], dense], axis=1)))

            return Towers()
        """,
    "clickproj_kit/__init__.py": "",
    "clickproj_kit/sizes.py": "HIDDEN = 16\nDENSE = 3\nBATCH = 64\nBATCHES = 24\n",
    "clickproj_kit/batches.py": """
        import numpy as np

        from . import sizes


        def batch(index, split):
            rng = np.random.default_rng([index, split])
            users = rng.integers(0, 300, sizes.BATCH).astype(np.int64)
            items = rng.integers(0, 100, sizes.BATCH).astype(np.int64)
            label = ((users + items) % 3 == 0).astype(np.float32)  # a signal the embeddings can learn
            dense = rng.normal(size=(sizes.BATCH, sizes.DENSE)).astype(np.float32)
            return {"label": label, "dense": dense, "user": users, "item": items}


        def train(worker, num_workers):
            return (batch(b, 0) for b in range(worker, sizes.BATCHES, num_workers))


        def holdout():
            return (batch(b, 1) for b in range(4))
        """,
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "clickproj"
    for name, body in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(body).lstrip())
    yield folder
    ship_project(None)  # this process's later Ray runs ship nothing of it
    for name in [m for m in sys.modules if m.split(".")[0] in ("clickproj_towers", "clickproj_kit")]:
        del sys.modules[name]


def train(tmp_path: Path, *flags: str) -> dict:
    path = tmp_path / "report.json"
    assert main(["train", *flags, "--no-progress", "--report", str(path)]) == 0
    return json.loads(path.read_text())


def test_a_script_imports_its_modules_and_package_and_load_rebuilds_it(project: Path, tmp_path: Path) -> None:
    report = train(
        tmp_path,
        "--script",
        str(project / "train.py"),
        "--steps",
        "8",
        "--deterministic",
        "--save-dir",
        str(tmp_path / "saves"),
    )
    assert report["steps"] == 8 and report["auc"] is not None
    assert sys.path[0] == str(project)
    # a fresh process, elsewhere: the save names the script, whose folder goes on sys.path again
    code = (
        "import numpy as np, xdl_ec\n"
        f"model = xdl_ec.load({str(tmp_path / 'saves')!r})\n"
        "batch = {'user': np.arange(5, dtype=np.int64), 'item': np.arange(5, dtype=np.int64), "
        "'dense': np.zeros((5, 3), np.float32)}\n"
        "p = np.asarray(model.predict(batch))\n"
        "print(p.shape, bool(((p > 0) & (p < 1)).all()))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and p != str(project))}
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["(5,)", "True"]


@pytest.mark.ray
def test_on_ray_the_folder_reaches_the_actors(project: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    flags = ["--script", str(project / "train.py"), "--steps", "6", "--deterministic", "--servers", "2"]
    here = train(tmp_path, *flags)
    on_ray = train(tmp_path, *flags, "--backend", "ray")
    assert on_ray["model_digest"] == here["model_digest"]


def test_a_folder_too_large_to_ship_is_refused_before_ray_starts(project: Path, capsys: pytest.CaptureFixture) -> None:
    with open(project / "big.bin", "wb") as f:
        f.truncate(MAX_PROJECT_BYTES + 1)  # sparse: no disk written
    status = main(
        [
            "train",
            "--script",
            str(project / "train.py"),
            "--steps",
            "2",
            "--servers",
            "2",
            "--backend",
            "ray",
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.strip().splitlines() == [
        f"xdl-ec train: error: --script: its folder {project} holds 50.0 MB; on Ray the script's folder travels to "
        f"every actor, at most 50 MB: put the script and the modules it imports in a folder of their own (data files "
        f"can stay where they are, read by absolute path)"
    ]
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
