"""xdl-ec through its job API in one process, on the shared batches: the run a user's script gets from
``Job.fit()`` without a cluster (a :class:`xdl_ec.job.local_run.LocalRun`, driven step range by step range so the
first ``--skip`` steps stay out of the timing).

Jobs: ``criteo-shaped`` / ``criteo-sample`` as the built-in job declares them (one table, the 26 salted keys as one
shared-ids feature [B, 26]); ``fields-100k`` and ``wide`` as a user would write them: one table and one feature per
field (``wide``'s multi-hot fields [B, 4] pooled by sum). All
with hyperparameters.py's set-up: Adagrad(0.02) from an accumulator of 0 on rows starting uniform in [-0.05, 0.05),
xdl_ec.models.DLRM(16, (64,), (64, 32)), Adam(0.001).

    PYTHONPATH=build/lead/stage python3 -P bench/peers/peer_xdl_ec.py --data FILE.npz --batch-size 2048 --steps 300

XDL_EC_TABLE_GROUPS=0 runs the job with ``table_groups=False`` (every table on its own: the A/B of issue #49).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Dict, Iterator, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run with python -P: the harness beside it
import numpy as np  # noqa: E402
from hyperparameters import (
    ADAGRAD_EPSILON,
    ADAGRAD_START,
    BOTTOM_MLP,
    DENSE_LR,
    EMB_DIM,
    ROW_INIT,
    SPARSE_LR,
    TOP_MLP,
)
from peer_harness import num_steps, parse_args, run_peer  # noqa: E402
from shared_batches import SharedBatches  # noqa: E402

import xdl_ec  # noqa: E402
from xdl_ec.job.local_run import LocalRun  # noqa: E402
from xdl_ec.models import DLRM  # noqa: E402
from xdl_ec.ps.worker import RunSettings  # noqa: E402
from xdl_ec.tf.determinism import configure_determinism  # noqa: E402


def make_job(data: SharedBatches, batch_size: int, steps: int, grouped: Optional[bool] = None) -> xdl_ec.Job:
    """The workload's job over ``steps`` batches; ``grouped`` None: table groups unless XDL_EC_TABLE_GROUPS=0."""
    per_field = data.per_field
    widths = data.widths
    fields = [f"C{i + 1}" for i in range(len(widths))]
    starts = np.concatenate([[0], np.cumsum(widths)])

    def table(name: str) -> xdl_ec.Table:
        return xdl_ec.Table(
            name,
            EMB_DIM,
            optimizer=xdl_ec.optim.Adagrad(SPARSE_LR, initial_accumulator_value=ADAGRAD_START, epsilon=ADAGRAD_EPSILON),
            initializer=xdl_ec.init.RandomUniform(-ROW_INIT, ROW_INIT),
            seed=0,
        )

    if per_field:
        tables = [table(f) for f in fields]
        features = [xdl_ec.Feature(f, t, combiner="sum" if w > 1 else None) for f, t, w in zip(fields, tables, widths)]
    else:
        tables = [table("criteo_categorical")]
        features = [xdl_ec.Feature("categorical", tables[0], shared_ids=True)]

    def as_batch(dense: np.ndarray, sparse: np.ndarray, label: np.ndarray) -> Dict[str, Any]:
        if per_field:
            columns = {
                f: sparse[:, starts[i]] if w == 1 else sparse[:, starts[i] : starts[i + 1]]
                for i, (f, w) in enumerate(zip(fields, widths))
            }
            return {"label": label, "dense": dense, **columns}
        return {"label": label, "dense": dense, "categorical": sparse}

    def train_input(worker: int, num_workers: int) -> Iterator[Dict[str, Any]]:
        return (as_batch(*b) for b in data.train_batches(batch_size, steps))

    job = xdl_ec.Job(
        tables=tables,
        features=features,
        model_fn=lambda: DLRM(EMB_DIM, bottom_mlp=BOTTOM_MLP, top_mlp=TOP_MLP, name="dlrm"),
        input_fn=train_input,
        dense_learning_rate=DENSE_LR,
        table_groups=os.environ.get("XDL_EC_TABLE_GROUPS", "1") != "0" if grouped is None else grouped,
    )
    job.as_batch = as_batch  # type: ignore[attr-defined]
    return job


class _Trained:
    """The run's trained model, taken once training is over (at the first prediction)."""

    def __init__(self, run: LocalRun) -> None:
        self._run = run
        self._model: Any = None

    def predict(self, batch: Dict[str, Any]) -> Any:
        if self._model is None:
            self._model = self._run.trained()
        return self._model.predict(batch)


def version() -> str:
    """The commit of the xdl_ec imported (its Python may be a work tree's: then '+ uncommitted' where it differs)."""
    here = os.path.dirname(os.path.realpath(xdl_ec.__file__))
    try:
        git = ["git", "-C", here]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, timeout=10)
        return f"xdl-ec {head.stdout.strip() or '?'}{' + uncommitted' if dirty.stdout.strip() else ''}"
    except OSError:
        return f"xdl-ec ({here})"


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    data = SharedBatches(args.data)
    job = make_job(data, args.batch_size, num_steps(data, args))
    configure_determinism(0, False)
    run = LocalRun(job.spec, RunSettings(seed=0, deterministic=False))

    details: Dict[str, Any] = {"version": version()}

    def train(n: int) -> List[float]:
        before = len(run.losses)
        details["stages"] = run.fit(n)["stages"]  # the last call's: the timed steps' input, pull, TF, push seconds
        return list(run.losses[before:])

    def predict(dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        batch = job.as_batch(dense, sparse, np.zeros(len(dense), np.float32))  # type: ignore[attr-defined]
        return np.asarray(trained.predict(batch))

    trained = _Trained(run)
    try:
        run_peer("xdl-ec", data, args, train, predict, details)
    finally:
        run.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
