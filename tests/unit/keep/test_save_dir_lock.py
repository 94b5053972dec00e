"""A live run holds its save dir: a second run given the same one is refused naming the live one, before it writes
or rotates anything; a dead run's lock (its process killed) is taken over; a run's end frees the dir."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xdl_ec.keep.save_dir_lock import SaveDirBusy, SaveDirLock

HOLD = textwrap.dedent(
    """
    import sys, time
    from xdl_ec.keep.save_dir_lock import SaveDirLock
    lock = SaveDirLock(sys.argv[1])
    print("held", flush=True)
    time.sleep(600)
    """
)


def _holder(directory: Path) -> subprocess.Popen:
    """Another process holding ``directory`` until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_live_holder_is_named_and_a_killed_one_is_taken_over(tmp_path: Path) -> None:
    holder = _holder(tmp_path / "saves")
    try:
        with pytest.raises(SaveDirBusy, match=rf"held by a live run \(pid {holder.pid} on .*save-dir"):
            SaveDirLock(tmp_path / "saves")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock = SaveDirLock(tmp_path / "saves")  # the dead run's lock is stale: taken over
    assert lock.held
    lock.release()
    lock.release()  # idempotent
    assert not lock.held


def test_a_released_dir_is_free_again_in_the_same_process(tmp_path: Path) -> None:
    first = SaveDirLock(tmp_path)
    with pytest.raises(SaveDirBusy, match=f"pid {os.getpid()}"):
        SaveDirLock(tmp_path)
    first.release()
    SaveDirLock(tmp_path).release()


def test_a_fit_into_a_held_save_dir_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    from support.examples import load_example

    example = load_example("user_item_tags")
    job = example.make_job(example.ClickLog(batch_size=32, batches=4, eval_batches=1))
    saves = tmp_path / "saves"
    holder = _holder(saves)
    try:
        before = sorted(p.name for p in saves.iterdir())
        with pytest.raises(SaveDirBusy, match="another --save-dir"):
            job.fit(steps=2, save_dir=saves, save_every="1", deterministic=True)
        assert sorted(p.name for p in saves.iterdir()) == before  # nothing saved or rotated
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    job.fit(steps=2, save_dir=saves, save_every="1", deterministic=True)  # the holder died: the dir is taken over
    resumed = job.fit(steps=4, save_dir=saves, resume=saves, deterministic=True)  # the first fit's end freed it
    assert resumed["resumed_from"]["step"] == 2
