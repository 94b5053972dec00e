"""The raw Criteo TSV reader: formats, transforms, keys, bad lines in both modes, split and streaming."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest

from support.paths import CRITEO_SAMPLE  # noqa: E402
from xdl_ec.data import BadLineError, CriteoReader
from xdl_ec.data.criteo import CHUNK_LINES, parse_lines_fast
from xdl_ec.data.schema import EMPTY_VALUE, categorical_keys, dense_transform

SAMPLE = CRITEO_SAMPLE


def make_line(label: str = "1", ints: list[str] | None = None, cats: list[str] | None = None) -> str:
    ints = ints if ints is not None else [str(i) for i in range(13)]
    cats = cats if cats is not None else [f"{0x10000000 + i:08x}" for i in range(26)]
    return "\t".join([label, *ints, *cats])


def write(tmp_path: Path, lines: list[str], gz: bool = False) -> Path:
    text = "".join(line + "\n" for line in lines)
    if gz:
        path = tmp_path / "data.tsv.gz"
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path = tmp_path / "data.tsv"
        path.write_text(text)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_plain_and_gzip_give_the_same_batches(tmp_path: Path, gz: bool) -> None:
    lines = [make_line(str(i % 2), [str(i)] * 13) for i in range(10)]
    reader = CriteoReader(write(tmp_path, lines, gz), eval_fraction=0.0)
    batches = list(reader.batches(4))
    assert [len(b) for b in batches] == [4, 4, 2]
    b = batches[0]
    assert b.dense.dtype == np.float32 and b.dense.shape == (4, 13)
    assert b.sparse.dtype == np.int64 and b.sparse.shape == (4, 26)
    assert b.label.dtype == np.float32 and b.label.tolist() == [0.0, 1.0, 0.0, 1.0]
    np.testing.assert_array_equal(b.dense[3], np.float32(np.log1p(3.0)))


def test_transforms_empties_and_salted_keys(tmp_path: Path) -> None:
    ints = ["", "-2", "0", "7"] + ["1"] * 9
    cats = ["deadbeef", "deadbeef", ""] + ["0000000a"] * 22 + [""]  # trailing empty field: line ends in a tab
    line = make_line("0", ints, cats)
    assert line.endswith("\t")
    (b,) = CriteoReader(write(tmp_path, [line]), eval_fraction=0.0).batches(8)
    np.testing.assert_array_equal(b.dense[0, :4], np.array([0.0, 0.0, 0.0, np.log1p(7.0)], dtype=np.float32))
    keys = b.sparse[0]
    assert keys[0] != keys[1], "the same hex in two columns must give two keys (per-column salt)"
    assert keys[2] != keys[25], "an empty value gets its own key per column"
    values = np.full((1, 26), 10, dtype=np.uint64)
    values[0, :2] = 0xDEADBEEF
    values[0, 2] = values[0, 25] = EMPTY_VALUE
    np.testing.assert_array_equal(keys, categorical_keys(values)[0])
    # Distinct (column, value) pairs never collide: the key map is a bijection.
    grid = np.arange(26 * 1000, dtype=np.uint64).reshape(1000, 26)
    assert len(np.unique(categorical_keys(grid))) == grid.size
    assert len(np.unique(categorical_keys(np.full((1, 26), EMPTY_VALUE, dtype=np.uint64)))) == 26


BAD_LINES = {
    "wrong field count": make_line() + "\textra",
    "bad label": make_line("2"),
    "non-numeric integer": make_line(ints=["1"] * 5 + ["x1"] + ["1"] * 7),
    "bad hex": make_line(cats=["0000000g"] + ["00000001"] * 25),
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_bad_line_error_names_file_line_and_reason(tmp_path: Path, kind: str) -> None:
    path = write(tmp_path, [make_line(), make_line(), BAD_LINES[kind], make_line()])
    reader = CriteoReader(path, eval_fraction=0.0)
    with pytest.raises(BadLineError) as err:
        list(reader.batches(2))
    assert f"{path}:3:" in str(err.value)
    assert kind in str(err.value)
    assert err.value.line_no == 3


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_bad_line_skip_counts_once(tmp_path: Path, kind: str) -> None:
    path = write(tmp_path, [make_line("0"), BAD_LINES[kind], make_line("1"), BAD_LINES[kind]], gz=True)
    reader = CriteoReader(path, eval_fraction=0.0, on_bad_line="skip")
    for _ in range(2):  # two epochs: each bad line still counted once
        batches = list(reader.batches(10))
        assert [b.label.tolist() for b in batches] == [[0.0, 1.0]]
    assert reader.bad_lines == 2
    assert [n for n, _ in reader.bad_line_examples] == [2, 4]
    assert all(kind in reason for _, reason in reader.bad_line_examples)


def test_more_bad_values_are_rejected(tmp_path: Path) -> None:
    for bad in (
        make_line(ints=["+"] + ["1"] * 12),
        make_line(ints=["1.5"] + ["1"] * 12),
        make_line(cats=["123456789"] + ["1"] * 25),
        make_line(cats=["0x12"] + ["1"] * 25),
        "",
    ):
        reader = CriteoReader(write(tmp_path, [bad]), eval_fraction=0.0)
        with pytest.raises(BadLineError):
            list(reader.batches(1))


def test_time_ordered_split_holds_out_the_last_lines(tmp_path: Path) -> None:
    lines = [make_line("1" if i >= 17 else "0", [str(i)] * 13) for i in range(20)]
    reader = CriteoReader(write(tmp_path, lines), eval_fraction=0.15)
    assert (reader.num_lines, reader.num_train_lines, reader.num_eval_lines) == (20, 17, 3)
    train = np.concatenate([b.dense[:, 0] for b in reader.batches(5, "train")])
    held = np.concatenate([b.dense[:, 0] for b in reader.batches(5, "eval")])
    np.testing.assert_array_equal(train, np.log1p(np.arange(17, dtype=np.float64)).astype(np.float32))
    np.testing.assert_array_equal(held, np.log1p(np.arange(17, 20, dtype=np.float64)).astype(np.float32))
    assert all(b.label.all() for b in reader.batches(5, "eval"))


def test_streams_lazily(tmp_path: Path) -> None:
    # A bad line far down the file is not reached while the first batches are consumed.
    path = write(tmp_path, [make_line()] * (3 * CHUNK_LINES) + [make_line("9")])
    stream = CriteoReader(path, eval_fraction=0.0).batches(10)
    assert len(next(stream)) == 10 and len(next(stream)) == 10
    with pytest.raises(BadLineError, match=f":{3 * CHUNK_LINES + 1}: bad label"):
        list(stream)


def random_line(rng: np.random.Generator) -> str:
    def integer() -> str:
        kind = rng.integers(6)
        return [
            "",
            "0",
            str(rng.integers(0, 10**6)),
            f"-{rng.integers(0, 3)}",
            f"+{rng.integers(0, 99)}",
            str(rng.integers(0, 10**15)),
        ][kind]

    def hex_value() -> str:
        kind = rng.integers(5)
        value = int(rng.integers(0, 1 << 32))
        return ["", f"{value:08x}", f"{value:08X}", f"{value:x}", f"{value:08x}"][kind]

    return "\t".join([str(rng.integers(2)), *(integer() for _ in range(13)), *(hex_value() for _ in range(26))])


def test_vectorised_and_line_by_line_paths_agree(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    lines = [random_line(rng) + "\n" for _ in range(500)]
    reader = CriteoReader(write(tmp_path, [make_line()]), eval_fraction=0.0)
    wanted = reader._parse_lines_checked(lines, 1)
    # Short hex values make the vectorised path decline a chunk; without them it must take it and agree.
    full_width = [line for line in lines if all(len(f) in (0, 8) for f in line.rstrip("\n").split("\t")[14:])]
    fast = parse_lines_fast(full_width)
    assert fast is not None and len(full_width) > 10
    for got, want in zip(fast, reader._parse_lines_checked(full_width, 1)):
        np.testing.assert_array_equal(got, want)
    # The reader as a whole (either path per chunk) gives the same rows.
    path = tmp_path / "random.tsv"
    path.write_text("".join(lines))
    (batch,) = CriteoReader(path, eval_fraction=0.0).batches(1000)
    np.testing.assert_array_equal(batch.label, wanted.label)
    np.testing.assert_array_equal(batch.dense, dense_transform(wanted.raw_dense))
    np.testing.assert_array_equal(batch.sparse, categorical_keys(wanted.values))


def test_the_native_path_takes_every_well_formed_line_with_or_without_newlines(tmp_path: Path) -> None:
    """Short hex values, signs, empties, CRLF endings, a last line without its newline, and a stream's stripped lines
    (xdl_ec.data.file_stream): the native parse takes them all and gives the line-by-line path's values."""
    rng = np.random.default_rng(11)
    lines = [random_line(rng) for _ in range(400)]
    reader = CriteoReader(write(tmp_path, [make_line()]), eval_fraction=0.0)
    wanted = reader._parse_lines_checked([line + "\n" for line in lines], 1)
    for given in (
        [line + "\n" for line in lines],
        [line + "\r\n" for line in lines],
        [line + "\n" for line in lines[:-1]] + [lines[-1]],
        lines,
    ):
        fast = parse_lines_fast(given)
        assert fast is not None
        for got, want in zip(fast, wanted):
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype


def test_vectorised_path_declines_every_bad_kind() -> None:
    for bad in [
        *BAD_LINES.values(),
        make_line(ints=["+"] + ["1"] * 12),
        make_line(ints=["-"] + ["1"] * 12),
        make_line(ints=["1" * 16] + ["1"] * 12),
        make_line(cats=["0000000\x00"] + ["00000001"] * 25),
        make_line(cats=["00000é01"] + ["00000001"] * 25),
    ]:
        assert parse_lines_fast([make_line() + "\n", bad + "\n"]) is None


def test_bad_arguments(tmp_path: Path) -> None:
    path = write(tmp_path, [make_line()])
    with pytest.raises(FileNotFoundError, match="no such file"):
        CriteoReader(tmp_path / "missing.tsv")
    with pytest.raises(ValueError, match="eval_fraction"):
        CriteoReader(path, eval_fraction=1.0)
    with pytest.raises(ValueError, match="on_bad_line"):
        CriteoReader(path, on_bad_line="ignore")
    with pytest.raises(ValueError, match="batch_size"):
        CriteoReader(path).batches(0)
    with pytest.raises(ValueError, match="split"):
        CriteoReader(path).batches(1, "test")


def test_tf_dataset_matches_numpy_batches(tmp_path: Path) -> None:
    lines = [make_line(str(i % 2), [str(i)] * 13) for i in range(7)]
    reader = CriteoReader(write(tmp_path, lines), eval_fraction=0.0)
    pytest.importorskip("tensorflow")
    for (d, s, y), b in zip(reader.dataset(3), reader.batches(3), strict=True):
        np.testing.assert_array_equal(d.numpy(), b.dense)
        np.testing.assert_array_equal(s.numpy(), b.sparse)
        np.testing.assert_array_equal(y.numpy(), b.label)


def test_real_sample_split_and_click_rate() -> None:
    if not SAMPLE.exists():
        pytest.skip(f"Criteo sample absent: {SAMPLE}")
    reader = CriteoReader(SAMPLE)
    assert (reader.num_train_lines, reader.num_eval_lines) == (9000, 999)
    labels = np.concatenate([b.label for b in reader.batches(4096, "all")])
    assert labels.size == 9999 and math.isclose(labels.mean(), 0.218, abs_tol=0.001)
    assert reader.bad_lines == 0


@pytest.mark.parametrize("text", [b"", b"a", b"a\n", b"a\nb", b"\n\n", b"a\r\nb\r", b"x\n" * 70000 + b"y"])
@pytest.mark.parametrize("gz", [False, True])
def test_lines_are_counted_on_the_bytes_as_they_are_read(tmp_path: Path, text: bytes, gz: bool) -> None:
    from xdl_ec.data.criteo import _count_lines, _read_lines

    path = tmp_path / ("f.gz" if gz else "f.tsv")
    path.write_bytes(gzip.compress(text) if gz else text)
    assert _count_lines(path) == sum(1 for _ in _read_lines(path))


def test_a_corrupt_gzip_file_is_named_when_its_lines_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "broken.tsv.gz"
    path.write_bytes(gzip.compress(("\n".join(make_line() for _ in range(50)) + "\n").encode())[:-30])
    with pytest.raises(OSError, match="broken.tsv.gz: cannot read the file"):
        _ = CriteoReader(path).num_lines
