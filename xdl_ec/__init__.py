"""xdl-ec: a sparse CTR-model trainer whose fault tolerance comes from erasure codes.

The package's rooms, lowest first (each imports only rooms below it; docs/design/layers.md): settings, sparse, net,
data, tf, models, model, keep, ps, ft, job, builtin, xdl, benchmark; the root holds the public names, the CLI and
the public namespaces ``xdl_ec.optim``, ``xdl_ec.init``, ``xdl_ec.keras`` and ``xdl_ec.codec``.

Every import of a module below the root runs this file first, so it imports no room: a public name is loaded from
the module it lives in on first use (:func:`__getattr__`). XDL's names live in ``xdl_ec.xdl`` (``import xdl_ec.xdl
as xdl``); their old spelling at the root still works, with a DeprecationWarning naming the new one.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from typing import TYPE_CHECKING, Any, List

from xdl_ec.tf.startup_log import quiet_tensorflow_startup

quiet_tensorflow_startup()  # before anything here imports TensorFlow (TF_CPP_MIN_LOG_LEVEL, its first import's lines)

if TYPE_CHECKING:  # what type checkers and IDEs see of the names loaded on first use below
    from xdl_ec import codec, init, optim, xdl
    from xdl_ec import keras as keras  # public, kept out of __all__ (below)
    from xdl_ec.job.cluster import Cluster
    from xdl_ec.job.job import Job
    from xdl_ec.job.loading import load
    from xdl_ec.job.trained_model import TrainedModel
    from xdl_ec.keep.saved_run import SaveMismatch
    from xdl_ec.model.dense_model import ModelError
    from xdl_ec.model.feature import Feature
    from xdl_ec.model.feature_batch import InputError
    from xdl_ec.model.side_input import Input
    from xdl_ec.sparse.cache_config import Cache
    from xdl_ec.sparse.row_rules import Admit, Evict
    from xdl_ec.sparse.table import EmbeddingTable
    from xdl_ec.sparse.table_config import Table

__version__ = "0.1.0"

#: the public names and the module each lives in (a module's own name: the module itself)
PUBLIC = {
    "Admit": "xdl_ec.sparse.row_rules",
    "Cache": "xdl_ec.sparse.cache_config",
    "Cluster": "xdl_ec.job.cluster",
    "EmbeddingTable": "xdl_ec.sparse.table",
    "Evict": "xdl_ec.sparse.row_rules",
    "Feature": "xdl_ec.model.feature",
    "Input": "xdl_ec.model.side_input",
    "InputError": "xdl_ec.model.feature_batch",
    "Job": "xdl_ec.job.job",
    "ModelError": "xdl_ec.model.dense_model",
    "SaveMismatch": "xdl_ec.keep.saved_run",
    "Table": "xdl_ec.sparse.table_config",
    "TrainedModel": "xdl_ec.job.trained_model",
    "load": "xdl_ec.job.loading",
    "codec": "xdl_ec.codec",
    "init": "xdl_ec.init",
    "keras": "xdl_ec.keras",
    "optim": "xdl_ec.optim",
    "xdl": "xdl_ec.xdl",
}

#: XDL's names once spelled at the root (``xdl_ec.embedding``), now ``xdl_ec.xdl.<name>``
XDL_NAMES = frozenset(
    (
        "SGD",
        "Adagrad",
        "Adam",
        "Constant",
        "Ftrl",
        "Momentum",
        "Ones",
        "RandomUniform",
        "SparseTensor",
        "TruncatedNormal",
        "VarType",
        "Zeros",
        "embedding",
        "layers",
        "losses",
        "set_sparse_optimizer",
        "tf_wrapper",
        "xdl_job",
    )
)


def save(job: Job, directory: str, keep: int = 2) -> str:
    """``job.save(directory, keep)``: the last fit's model as the newest save under ``directory``."""
    return job.save(directory, keep)


def __getattr__(name: str) -> Any:
    """A public name, loaded from its module on first use; XDL's old root spelling, with a DeprecationWarning; a
    module of the package by its name; else an error (for XDL's names not ported: what to do instead)."""
    if name in PUBLIC:
        module = importlib.import_module(PUBLIC[name])
        value = module if module.__name__ == f"{__name__}.{name}" else getattr(module, name)
        globals()[name] = value  # loaded once: later lookups do not come here
        return value
    if name in XDL_NAMES:
        warnings.warn(
            f"xdl_ec.{name} is deprecated: use xdl_ec.xdl.{name} (import xdl_ec.xdl as xdl)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("xdl_ec.xdl"), name)
    if name.startswith("_"):  # dunder probes (copy, pickle, pytest) and private names: no error text to build
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # `xdl_ec.sparse`, as an eager root once gave
        return importlib.import_module(f"{__name__}.{name}")
    from xdl_ec.xdl.api import missing

    raise missing(name, __name__)


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(PUBLIC))


# xdl_ec.keras is public but not here: `from xdl_ec import *` would import TensorFlow for it
__all__ = [
    "Admit",
    "Cache",
    "Cluster",
    "EmbeddingTable",
    "Evict",
    "Feature",
    "Input",
    "InputError",
    "Job",
    "ModelError",
    "SaveMismatch",
    "Table",
    "TrainedModel",
    "codec",
    "init",
    "load",
    "optim",
    "save",
    "xdl",
]
