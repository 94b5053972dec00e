"""The root's public names: loaded from the module each lives in on first use (importing a low room runs no job/ or
xdl/ code, nor TensorFlow), XDL's names under ``xdl_ec.xdl`` with their old root spelling deprecated, one ``SGD`` per
meaning, and the old module path ``xdl_ec.codec``."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

import xdl_ec
import xdl_ec.xdl as xdl


def _fresh(code: str) -> str:
    """What ``code`` prints in a fresh interpreter with this one's path."""
    code = f"import sys; sys.path[:0] = {sys.path!r}; {code}"
    return subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("module", ["xdl_ec._core", "xdl_ec.sparse.table", "xdl_ec.settings.checks"])
def test_importing_a_low_room_runs_no_higher_room_nor_tensorflow(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(_fresh(code))
    rooms = {name.split(".")[1] for name in loaded if name.startswith("xdl_ec.")}
    assert rooms <= {"_core", "settings", "sparse", "tf"}, rooms
    assert [name for name in loaded if name.startswith("xdl_ec.tf.")] == ["xdl_ec.tf.startup_log"]
    assert "tensorflow" not in loaded


def test_every_public_name_is_the_object_where_it_lives() -> None:
    for name in xdl_ec.__all__:
        home = xdl_ec.PUBLIC.get(name)
        if home is None:
            assert name == "save"
            continue
        module = importlib.import_module(home)
        expected = module if home == f"xdl_ec.{name}" else getattr(module, name)
        assert getattr(xdl_ec, name) is expected, name
    assert xdl_ec.keras.SparseEmbedding.__name__ == "SparseEmbedding"  # public, outside __all__ (it imports TF)
    assert set(xdl_ec.__all__) <= set(dir(xdl_ec)) and "keras" in dir(xdl_ec)
    assert not xdl_ec.XDL_NAMES & set(dir(xdl_ec))


def test_star_import_gives_the_public_names_and_no_deprecated_one() -> None:
    code = (
        "import sys, warnings; warnings.simplefilter('error'); from xdl_ec import *; "
        "print(Job.__name__, 'embedding' in dir(), 'tensorflow' in sys.modules)"
    )
    assert _fresh(code).split() == ["Job", "False", "False"]


@pytest.mark.parametrize("name", sorted(xdl_ec.XDL_NAMES))
def test_xdl_names_at_the_root_are_deprecated_aliases_of_xdl_ec_xdl(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"^xdl_ec\.{name} is deprecated: use xdl_ec\.xdl\.{name} "):
        old = getattr(xdl_ec, name)
    assert old is getattr(xdl, name)


def test_from_import_of_an_old_name_warns_at_the_importing_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from xdl_ec import embedding  # noqa: F401 - the old spelling under test
    # the import system asks twice (hasattr, then getattr): one line, so Python's default filter shows it once
    assert caught and {(w.category, w.filename, str(w.message)) for w in caught} == {
        (
            DeprecationWarning,
            __file__,
            "xdl_ec.embedding is deprecated: use xdl_ec.xdl.embedding (import xdl_ec.xdl as xdl)",
        )
    }


def test_one_sgd_per_meaning() -> None:
    assert isinstance(xdl_ec.optim.SGD, type)  # the optimizer class
    assert xdl.SGD(0.5) == xdl_ec.optim.SGD(learning_rate=0.5)  # XDL's function, XDL's argument names
    assert xdl.SGD is not xdl_ec.optim.SGD
    with pytest.raises(TypeError):
        xdl.SGD(0.5, 0.9)  # XDL's SGD takes the learning rate only


def test_the_old_codec_path_imports_the_codec() -> None:
    import xdl_ec.codec
    from xdl_ec.sparse import codec

    assert xdl_ec.codec.ErasureCode is codec.ErasureCode and xdl_ec.codec.MATRICES == codec.MATRICES
    code = xdl_ec.codec.ErasureCode(2, 1)
    data = np.stack([np.arange(8, dtype=np.uint8), np.full(8, 3, np.uint8)])
    parity = code.encode(data)
    assert np.array_equal(parity[0], data[0] ^ data[1])  # r = 1: XOR
    assert np.array_equal(code.decode({1: data[1], 2: parity[0]}), data)


def test_a_subpackage_is_reachable_as_an_attribute() -> None:
    """As when the root imported them all: ``import xdl_ec`` then ``xdl_ec.sparse``."""
    assert _fresh("import xdl_ec; print(xdl_ec.sparse.__name__, xdl_ec.data.__name__)").split() == [
        "xdl_ec.sparse",
        "xdl_ec.data",
    ]


def test_unknown_names_are_clear_errors() -> None:
    with pytest.raises(AttributeError, match=r"^module 'xdl_ec' has no attribute 'no_such_name'$"):
        xdl_ec.no_such_name  # noqa: B018
    with pytest.raises(AttributeError, match=r"^xdl_ec\.DataReader: XDL's DataReader is not ported; write reader"):
        xdl_ec.DataReader  # noqa: B018
    with pytest.raises(AttributeError, match=r"^xdl_ec\.xdl\.TrainSession: XDL's TrainSession is not ported; "):
        xdl.TrainSession  # noqa: B018
    with pytest.raises(AttributeError, match=r"^module 'xdl_ec.xdl' has no attribute 'no_such_name'$"):
        xdl.no_such_name  # noqa: B018
    with pytest.raises(AttributeError, match="_private"):
        xdl_ec._private  # noqa: B018
