"""xdl_ec.data.stream: the rows of a directory's files in name order as they appear, resumed at a position without
reading what is before it."""

from __future__ import annotations

import gzip
import os
import shutil
import threading
import time
from pathlib import Path
from typing import List

import numpy as np
import pytest

from xdl_ec.data import BadLineError, StreamError, stream
from xdl_ec.data.schema import categorical_keys


def line(i: int) -> str:
    """A Criteo row whose C26 is its sample id (hex)."""
    return "\t".join([str(i % 2), *[str(i % 7)] * 13, *["0000abcd"] * 25, f"{i:08x}"])


def write(directory: Path, name: str, ids: range, gz: bool = False) -> None:
    """Written under a temporary name, then renamed in, as a producer does."""
    text = "".join(line(i) + "\n" for i in ids).encode()
    tmp = directory / f".{name}.partial"
    with gzip.open(tmp, "wb") if gz else open(tmp, "wb") as f:
        f.write(text)
    os.replace(tmp, directory / name)


def ids_of(lines: List[str]) -> List[int]:
    return [int(text.split("\t")[-1], 16) for text in lines]


def batch_ids(batch) -> List[int]:  # noqa: ANN001
    """Sample ids of a batch, recovered from its last column's keys."""
    keys = batch.sparse[:, -1]
    table = {
        int(k): i
        for i, k in enumerate(categorical_keys(np.array([[0] * 25 + [i] for i in range(1000)], dtype=np.uint64))[:, -1])
    }
    return [table[int(k)] for k in keys]


def test_files_are_read_in_name_order_partial_names_ignored_gzip_or_not(tmp_path: Path) -> None:
    write(tmp_path, "hour-02", range(20, 30), gz=True)
    write(tmp_path, "hour-01", range(0, 20))
    (tmp_path / "hour-03.tmp").write_text(line(999) + "\n")  # being written: not read
    (tmp_path / ".hour-04").write_text(line(998) + "\n")
    s = stream(tmp_path, "hour-*", idle_exit=0.0, poll=0.01)
    assert ids_of(list(s)) == list(range(30))
    assert s.position() == {
        "file": "hour-02",
        "offset": len("".join(line(i) + "\n" for i in range(20, 30))),
        "line": 10,
        "batch": 0,
    }


def test_the_stream_waits_for_files_renamed_in_and_ends_after_idle_exit(tmp_path: Path) -> None:
    write(tmp_path, "a", range(0, 5))
    late = threading.Timer(0.3, write, (tmp_path, "b", range(5, 9)))
    late.start()
    start = time.monotonic()
    got = ids_of(list(stream(tmp_path, idle_exit=1.0, poll=0.02)))
    late.join()
    assert got == list(range(9)) and time.monotonic() - start >= 1.3


def test_batches_wait_for_their_rows_across_files_and_a_resume_reads_nothing_before_its_position(
    tmp_path: Path,
) -> None:
    for n, gz in enumerate([False, True, False, True]):
        write(tmp_path, f"part-{n}", range(n * 25, n * 25 + 25), gz=gz)
    whole = list(stream(tmp_path, idle_exit=0.0).batches(16))
    assert [batch_ids(b) for b, _ in whole] == [list(range(i, min(i + 16, 100))) for i in range(0, 100, 16)]
    assert [p["batch"] for _, p in whole] == list(range(1, 8))
    for cut in (1, 2, 4, 5):
        position = whole[cut - 1][1]
        moved = tmp_path.parent / f"moved-{cut}"
        shutil.copytree(tmp_path, moved)
        for name in os.listdir(moved):
            if name < position["file"]:
                os.remove(moved / name)  # a resume never reads the files before its position
        rest = list(stream(moved, idle_exit=0.0, start=position).batches(16))
        assert [batch_ids(b) for b, _ in rest] == [batch_ids(b) for b, _ in whole[cut:]]
        assert [p for _, p in rest] == [p for _, p in whole[cut:]]


def test_bad_lines_error_naming_file_and_line_or_are_skipped_and_counted(tmp_path: Path) -> None:
    write(tmp_path, "a", range(0, 10))
    with open(tmp_path / "a", "a") as f:
        f.write("1\tnot a row\n")
    write(tmp_path, "b", range(10, 20))
    with pytest.raises(BadLineError, match=r"/a:11: wrong field count"):
        list(stream(tmp_path, idle_exit=0.0).batches(8))
    s = stream(tmp_path, idle_exit=0.0)
    assert [batch_ids(b) for b, _ in s.batches(8, on_bad_line="skip")] == [
        list(range(0, 8)),
        list(range(8, 16)),
        list(range(16, 20)),
    ]
    assert s.bad_lines == 1


def test_a_vanished_directory_a_late_file_and_a_gone_position_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(StreamError, match="no such directory"):
        stream(tmp_path / "nope")
    gone = tmp_path / "gone"
    gone.mkdir()
    write(gone, "a", range(3))
    s = iter(stream(gone, idle_exit=5.0, poll=0.01))
    assert ids_of([next(s) for _ in range(3)]) == [0, 1, 2]
    shutil.rmtree(gone)
    with pytest.raises(StreamError, match="vanished"):
        next(s)
    late = tmp_path / "late"
    late.mkdir()
    write(late, "b", range(3))
    s = iter(stream(late, idle_exit=5.0, poll=0.01))
    assert ids_of([next(s) for _ in range(3)]) == [0, 1, 2]
    write(late, "a", range(3, 6))
    with pytest.raises(StreamError, match="file 'a' appeared after 'b' was read"):
        next(s)
    with pytest.raises(StreamError, match="the position's file 'x' is gone"):
        stream(late, start={"file": "x", "offset": 10, "line": 1, "batch": 1})
