"""The job API's unit tests share one tiny job, written as a ``--script`` file (so a save names it and
``xdl_ec.load`` rebuilds it unasked): one table of 4-float rows over 50 users, two dense features, a one-layer model,
8 batches of 32 and 2 hold-out batches. A fit takes about a second."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Dict

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from xdl_ec.job.job import Job  # noqa: E402
from xdl_ec.job.job_source import load_script_job  # noqa: E402

TINY_SCRIPT = """
import numpy as np
import tensorflow as tf

import xdl_ec


def batch(seed, size=32):
    rng = np.random.default_rng(seed)
    user = rng.integers(0, 50, size)
    dense = rng.normal(size=(size, 2)).astype(np.float32)
    label = (rng.random(size) < 1 / (1 + np.exp(-(user % 3 - 1.0) - dense[:, 0]))).astype(np.float32)
    return {"label": label, "dense": dense, "user": user}


def input_fn(worker, num_workers):
    return (batch(b) for b in range(worker, 8, num_workers))


class Model(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.out = tf.keras.layers.Dense(1)

    def call(self, embedded, dense, training=False):
        return self.out(tf.concat([embedded["user"], dense], axis=1))


def job(dim=4):
    users = xdl_ec.Table("users", dim=dim, optimizer=xdl_ec.optim.Adagrad(0.05))
    return xdl_ec.Job(
        [users], [xdl_ec.Feature("user", users)], Model, input_fn, eval_fn=lambda: (batch(s) for s in range(100, 102))
    )
"""


@pytest.fixture
def tiny_script(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_job.py"
    path.write_text(TINY_SCRIPT)
    return path


@pytest.fixture
def tiny_job(tiny_script: Path) -> Callable[[], Job]:
    """A factory of fresh tiny jobs (each from the script, as ``xdl-ec train --script`` builds it)."""

    def make() -> Any:
        return load_script_job(str(tiny_script))

    return make


@pytest.fixture
def tiny_batch(tiny_job: Callable[[], Job]) -> Callable[[int], Dict[str, np.ndarray]]:
    """``batch(seed)`` of the tiny job's script: its input's batches (seeds 0-7), hold-out (100, 101) and others."""
    tiny_job()
    return sys.modules["xdl_ec_script_tiny_job"].batch
