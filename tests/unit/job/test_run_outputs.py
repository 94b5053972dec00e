"""What a fit writes beside its model: TensorBoard scalars (``logdir``) and fresh serving (``export_every`` with
``export_dir``: a base SavedModel, then deltas), and the errors of a bad directory or interval."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

tf = pytest.importorskip("tensorflow")

from xdl_ec.job.export_schedule import parse_export_every  # noqa: E402


def _tags(logdir: Path) -> set:
    return {
        value.tag
        for events in logdir.glob("events.out.tfevents.*")
        for event in tf.compat.v1.train.summary_iterator(str(events))
        for value in event.summary.value
    }


def test_logdir_gets_the_runs_scalars(tiny_job: Callable[[], Any], tmp_path: Path) -> None:
    tiny_job().fit(deterministic=True, logdir=tmp_path / "tb")
    assert {"loss", "samples_per_sec"} <= _tags(tmp_path / "tb")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="logdir: .*file exists and is not a directory"):
        tiny_job().fit(deterministic=True, logdir=tmp_path / "file")


def test_export_every_writes_a_base_then_deltas(tiny_job: Callable[[], Any], tmp_path: Path) -> None:
    report = tiny_job().fit(deterministic=True, export_every="2", export_dir=tmp_path / "serving")
    written = sorted(p.name for p in (tmp_path / "serving").iterdir())
    assert written[0] == "base" and written[1:] and all(name.startswith("delta-") for name in written[1:])
    assert report["exports"]
    with pytest.raises(ValueError, match="export_dir: .* is not empty"):
        tiny_job().fit(deterministic=True, export_every="2", export_dir=tmp_path / "serving")


@pytest.mark.parametrize("every", ["auto", "often", "0", 5])
def test_a_bad_export_interval_is_an_error(every: Any) -> None:
    with pytest.raises(ValueError, match="export_every: "):
        parse_export_every(every)
