"""xdl_ec.sparse.codec: parity identical to pyeclib's ISA-L backends, exact decode, in-place update, bad input."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

from xdl_ec.sparse.codec import ErasureCode

PYECLIB_HEADER = 80  # liberasurecode's fragment header, before the payload


def random_data(k: int, length: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(k, length), dtype=np.uint8)


@pytest.mark.parametrize("ec_type,matrix", [("isa_l_rs_vand", "vandermonde"), ("isa_l_rs_cauchy", "cauchy")])
@pytest.mark.parametrize("k,r", [(1, 1), (2, 1), (4, 1), (4, 2), (3, 3), (6, 3), (10, 4), (12, 4), (21, 4), (29, 3)])
def test_parity_is_byte_identical_to_pyeclib(ec_type: str, matrix: str, k: int, r: int) -> None:
    ec_iface = pytest.importorskip("pyeclib.ec_iface")
    driver = ec_iface.ECDriver(k=k, m=r, ec_type=ec_type)
    code = ErasureCode(k, r, matrix)
    length = 1000  # k * length splits evenly: pyeclib's fragment i is bytes [i L, (i + 1) L)
    data = random_data(k, length, seed=k * 10 + r)
    fragments = driver.encode(data.tobytes())
    assert len(fragments) == k + r
    payloads = []
    for fragment in fragments:
        assert len(fragment) == PYECLIB_HEADER + length  # no padding when the split is even
        payloads.append(np.frombuffer(fragment[PYECLIB_HEADER:], dtype=np.uint8))
    np.testing.assert_array_equal(np.stack(payloads[:k]), data)
    np.testing.assert_array_equal(np.stack(payloads[k:]), code.encode(data))


def test_automatic_cauchy_above_the_vandermonde_range_matches_pyeclib() -> None:
    ec_iface = pytest.importorskip("pyeclib.ec_iface")
    code = ErasureCode(28, 4)
    assert code.matrix == "cauchy"
    data = random_data(28, 200)
    fragments = ec_iface.ECDriver(k=28, m=4, ec_type="isa_l_rs_cauchy").encode(data.tobytes())
    parity = np.stack([np.frombuffer(f[PYECLIB_HEADER:], dtype=np.uint8) for f in fragments[28:]])
    np.testing.assert_array_equal(parity, code.encode(data))


def test_pyeclib_pads_an_uneven_split_with_zeros_and_parity_still_matches() -> None:
    ec_iface = pytest.importorskip("pyeclib.ec_iface")
    k, r = 4, 2
    driver = ec_iface.ECDriver(k=k, m=r, ec_type="isa_l_rs_vand")
    raw = np.random.default_rng(1).integers(0, 256, size=4 * 250 - 3, dtype=np.uint8)
    fragments = driver.encode(raw.tobytes())
    length = len(fragments[0]) - PYECLIB_HEADER
    assert length == 250  # ceil(997 / 4): the last data fragment ends in 3 zero bytes
    padded = np.zeros(k * length, dtype=np.uint8)
    padded[: raw.size] = raw
    parity = np.stack([np.frombuffer(f[PYECLIB_HEADER:], dtype=np.uint8) for f in fragments[k:]])
    np.testing.assert_array_equal(parity, ErasureCode(k, r).encode(padded.reshape(k, length)))


@pytest.mark.parametrize("k,r", [(1, 1), (3, 2), (5, 3), (8, 4)])
@pytest.mark.parametrize("fill", ["random", "zero", "ones"])
def test_every_erasure_pattern_decodes_exactly(k: int, r: int, fill: str) -> None:
    code = ErasureCode(k, r)
    data = {
        "random": random_data(k, 77),
        "zero": np.zeros((k, 77), np.uint8),
        "ones": np.full((k, 77), 0xFF, np.uint8),
    }[fill]
    stripe = np.concatenate([data, code.encode(data)])
    for lost in range(0, r + 1):
        for erased in itertools.combinations(range(k + r), lost):
            survivors = {i: stripe[i] for i in range(k + r) if i not in erased}
            np.testing.assert_array_equal(code.decode(survivors), data, err_msg=f"erased {erased}")


def test_decode_prefers_data_and_accepts_any_key_order_and_numpy_int_keys() -> None:
    code = ErasureCode(4, 2)
    data = random_data(4, 33)
    parity = code.encode(data)
    fragments = {np.int64(5): parity[1], 3: data[3], 0: data[0], 4: parity[0], 1: data[1]}
    np.testing.assert_array_equal(code.decode(fragments), data)


def test_update_in_place_equals_reencode() -> None:
    for k, r, matrix in [(4, 1, "auto"), (4, 2, "auto"), (6, 4, "auto"), (5, 3, "cauchy"), (24, 4, "auto")]:
        code = ErasureCode(k, r, matrix)
        rng = np.random.default_rng(k + r)
        data = random_data(k, 4099, seed=k)
        parity = code.encode(data)
        for index in range(k):
            new = rng.integers(0, 256, size=4099, dtype=np.uint8)
            delta = data[index] ^ new
            data[index] = new
            assert code.update(parity, index, delta) is None
            np.testing.assert_array_equal(parity, code.encode(data), err_msg=f"{code} index {index}")


def test_update_of_row_strided_parity_view() -> None:
    code = ErasureCode(3, 2)
    data = random_data(3, 64)
    storage = np.zeros((2, 100), np.uint8)
    parity = storage[:, 10:74]  # rows contiguous, row stride 100
    parity[:] = code.encode(data)
    delta = random_data(1, 64, seed=9)[0]
    code.update(parity, 2, delta)
    data[2] ^= delta
    np.testing.assert_array_equal(parity, code.encode(data))
    assert not storage[:, :10].any() and not storage[:, 74:].any()


def test_properties_and_matrix_choice() -> None:
    code = ErasureCode(4, 3)
    assert (code.k, code.r, code.matrix) == (4, 3, "vandermonde")
    coefficients = code.coefficients
    assert coefficients.dtype == np.uint8 and coefficients.shape == (3, 4)
    np.testing.assert_array_equal(coefficients[0], np.ones(4, np.uint8))  # r = 1 is plain XOR
    np.testing.assert_array_equal(coefficients[1], [1, 2, 4, 8])
    assert ErasureCode(22, 4).matrix == "cauchy"  # outside ISA-L's Vandermonde safe range
    assert ErasureCode(21, 4).matrix == "vandermonde"
    assert ErasureCode(4, 2, "cauchy").matrix == "cauchy"
    data = random_data(1, 50)
    np.testing.assert_array_equal(ErasureCode(1, 4).encode(data), np.repeat(data, 4, axis=0))
    xor = random_data(5, 50)
    np.testing.assert_array_equal(ErasureCode(5, 1).encode(xor)[0], np.bitwise_xor.reduce(xor, axis=0))


def test_pickles_to_the_same_code() -> None:
    code = ErasureCode(22, 4)
    clone = pickle.loads(pickle.dumps(code))
    assert (clone.k, clone.r, clone.matrix) == (22, 4, "cauchy")
    data = random_data(22, 40)
    np.testing.assert_array_equal(clone.encode(data), code.encode(data))


def test_zero_length_fragments() -> None:
    code = ErasureCode(3, 2)
    empty = np.zeros((3, 0), np.uint8)
    assert code.encode(empty).shape == (2, 0)
    assert code.decode({0: empty[0], 3: np.zeros(0, np.uint8), 4: np.zeros(0, np.uint8)}).shape == (3, 0)


def test_non_contiguous_input_is_encoded_as_its_values() -> None:
    code = ErasureCode(3, 2)
    wide = random_data(3, 200)
    view = wide[:, ::2]
    np.testing.assert_array_equal(code.encode(view), code.encode(np.ascontiguousarray(view)))


@pytest.mark.parametrize(
    "k,r,matrix,message",
    [
        (0, 1, "auto", "k=0"),
        (4, 0, "auto", "r=0"),
        (4, 5, "auto", "1 <= r <= 4"),
        (30, 3, "auto", "k + r <= 32"),
        (22, 4, "vandermonde", "safe range"),
        (4, 2, "reed", "matrix='reed'"),
    ],
)
def test_bad_parameters(k: int, r: int, matrix: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("+", r"\+")):
        ErasureCode(k, r, matrix)


def test_bad_parameter_types() -> None:
    with pytest.raises(TypeError, match="k must be an int"):
        ErasureCode(4.0, 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="r must be an int"):
        ErasureCode(4, True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="matrix must be a str"):
        ErasureCode(4, 2, None)  # type: ignore[arg-type]


def test_encode_bad_input() -> None:
    code = ErasureCode(4, 2)
    with pytest.raises(TypeError, match="dtype uint8"):
        code.encode(np.zeros((4, 8), np.int32))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        code.encode([[0] * 8] * 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k=4 rows"):
        code.encode(np.zeros((3, 8), np.uint8))
    with pytest.raises(ValueError, match="2-dimensional"):
        code.encode(np.zeros(32, np.uint8))


def test_decode_bad_input_raises_clearly() -> None:
    code = ErasureCode(4, 2)
    data = random_data(4, 16)
    parity = code.encode(data)
    with pytest.raises(ValueError, match=r"unrecoverable: lost fragments \{1, 2, 5\}, this code tolerates r=2"):
        code.decode({0: data[0], 3: data[3], 4: parity[0]})
    with pytest.raises(ValueError, match="unrecoverable"):
        code.decode({})
    with pytest.raises(ValueError, match="unequal lengths"):
        code.decode({0: data[0], 1: data[1], 2: data[2], 3: data[3][:8]})
    with pytest.raises(ValueError, match="index 6 out of range"):
        code.decode({0: data[0], 1: data[1], 2: data[2], 6: parity[0]})
    with pytest.raises(ValueError, match="index -1 out of range"):
        code.decode({-1: data[0], 1: data[1], 2: data[2], 3: data[3]})
    with pytest.raises(TypeError, match="dtype uint8"):
        code.decode({0: data[0].astype(np.int16), 1: data[1], 2: data[2], 3: data[3]})
    with pytest.raises(ValueError, match="1-dimensional"):
        code.decode({0: data[:1], 1: data[1], 2: data[2], 3: data[3]})
    with pytest.raises(TypeError, match="fragment index must be an int, got str"):
        code.decode({"0": data[0], 1: data[1], 2: data[2], 3: data[3]})
    with pytest.raises(TypeError, match="dict"):
        code.decode([data[0], data[1], data[2], data[3]])  # type: ignore[arg-type]


def test_update_bad_input_changes_nothing() -> None:
    code = ErasureCode(4, 2)
    data = random_data(4, 64)
    parity = code.encode(data)
    before = parity.copy()
    delta = random_data(1, 64, seed=3)[0]
    cases = [
        ((parity, 4, delta), ValueError, "index 4 is a parity fragment"),
        ((parity, 6, delta), ValueError, "index 6 out of range"),
        ((parity, -1, delta), ValueError, "index -1 out of range"),
        ((parity, 2**70, delta), ValueError, "out of range"),
        ((parity, 0, delta[:63]), ValueError, "63 bytes"),
        ((parity, 0, delta.astype(np.uint16)), TypeError, "dtype uint8"),
        ((parity[:1], 0, delta), ValueError, r"shape \(r=2"),
        ((parity[:, ::2], 0, delta[:32]), ValueError, "contiguous"),
        ((parity.astype(np.int8), 0, delta), TypeError, "dtype uint8"),
        ((parity.tolist(), 0, delta), TypeError, "numpy.ndarray"),
        ((parity, 1.0, delta), TypeError, "index must be an int"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            code.update(*args)
        np.testing.assert_array_equal(parity, before)
    frozen = parity.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        code.update(frozen, 0, delta)
    np.testing.assert_array_equal(frozen, before)


def test_reconstruct_rebuilds_only_the_lost_fragments_parity_included() -> None:
    code = ErasureCode(5, 3)
    data = random_data(5, 321)
    stripe = np.concatenate([data, code.encode(data)])
    for lost in ([0], [6], [7, 2], [1, 4, 5], [5, 6, 7]):
        survivors = {i: stripe[i] for i in range(8) if i not in lost}
        np.testing.assert_array_equal(code.reconstruct(survivors, lost), stripe[lost], err_msg=f"lost {lost}")
    out = np.zeros((2, 321), np.uint8)
    result = code.reconstruct({i: stripe[i] for i in (7, 6, 0, 1, 2)}, np.array([3, 5]), out=out)
    assert result is out  # written in place, zero-copy
    np.testing.assert_array_equal(out, stripe[[3, 5]])


def test_reconstruct_bad_input_writes_nothing() -> None:
    code = ErasureCode(3, 2)
    data = random_data(3, 40)
    stripe = np.concatenate([data, code.encode(data)])
    survivors = {0: stripe[0], 2: stripe[2], 4: stripe[4]}
    out = np.full((1, 40), 7, np.uint8)
    cases = [
        (({0: stripe[0], 2: stripe[2]}, [1], out), ValueError, r"unrecoverable: lost fragments \{1, 3, 4\}"),
        ((survivors, [2], out), ValueError, "also present"),
        ((survivors, [1, 1], np.zeros((2, 40), np.uint8)), ValueError, "twice"),
        ((survivors, [5], out), ValueError, "index 5 out of range"),
        ((survivors, [1], np.zeros((2, 40), np.uint8)), ValueError, "shape"),
        ((survivors, [1], np.zeros((1, 41), np.uint8)), ValueError, "shape"),
        ((survivors, [1], out.astype(np.int8)), TypeError, "dtype uint8"),
        ((survivors, [1.5], out), TypeError, "lost index must be an int, got float"),
        ((survivors, "1", out), TypeError, "sequence"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            code.reconstruct(*args)
        assert (out == 7).all()
    readonly = out.copy()
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        code.reconstruct(survivors, [1], readonly)
