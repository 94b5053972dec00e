"""JobSpec: what a training job is, checked once: its tables, features, model, input and loss.

The parameter-server roles receive it as is (picklable with the job's functions: module-level functions pickle
by reference; Ray's cloudpickle also takes closures and lambdas), and each builds its own model and input from the
factories: ``model_fn()`` returns a Keras model called as ``model(embedded, dense)``; ``input_fn(worker,
num_workers)`` returns an iterable of dict batches (see :mod:`xdl_ec.model.feature_batch`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from xdl_ec.settings import checks
from .dense_model import DENSE_OPTIMIZERS
from .feature import Feature
from .model_step import LOSSES
from xdl_ec.sparse.table_config import Table


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A checked job: ``tables`` in declared order (the order of the model digest), ``features``, the factories,
    ``loss`` ("binary_crossentropy" or a callable ``loss(labels, logits)``), the dense optimizer (a Keras optimizer
    name or config dict) and its learning rate, and an optional ``eval_fn()`` giving hold-out batches."""

    tables: Tuple[Table, ...]
    features: Tuple[Feature, ...]
    model_fn: Callable[[], Any]
    input_fn: Callable[[int, int], Any]
    loss: Union[str, Callable[[Any, Any], Any]] = "binary_crossentropy"
    dense_optimizer: Union[str, Dict[str, Any]] = "adam"
    dense_learning_rate: float = 0.001
    eval_fn: Optional[Callable[[], Any]] = None

    def __post_init__(self) -> None:
        tables, features = tuple(self.tables), tuple(self.features)
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "features", features)
        if not tables:
            raise ValueError("tables: a job needs at least one Table")
        names: Dict[str, Table] = {}
        for t in tables:
            checks.instance("tables[...]", t, Table)
            if t.name in names:
                raise ValueError(f"tables: two tables are named {t.name!r}; table names must be unique")
            names[t.name] = t
        if not features:
            raise ValueError("features: a job needs at least one Feature")
        seen = set()
        for f in features:
            checks.instance("features[...]", f, Feature)
            if f.name in seen:
                raise ValueError(f"features: two features are named {f.name!r}; feature names must be unique")
            seen.add(f.name)
            if names.get(f.table.name) != f.table:
                raise ValueError(f"feature {f.name!r}: its table {f.table.name!r} is not one of the job's tables "
                                 f"(or differs from the declared one); pass it in tables=[...]")
        unused = [t.name for t in tables if not any(f.table.name == t.name for f in features)]
        if unused:
            raise ValueError(f"tables: {unused} are looked up by no feature; declare a Feature for them or drop them")
        for name in ("model_fn", "input_fn"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{name}: must be a function (a factory), got {type(getattr(self, name)).__name__}")
        if not isinstance(self.model_fn, type) and hasattr(self.model_fn, "trainable_variables"):  # a model is callable
            raise TypeError("model_fn: must be a function that builds the model, got a model itself: every worker "
                            "builds its own (model_fn=make_model, not make_model())")
        if self.eval_fn is not None and not callable(self.eval_fn):
            raise TypeError(f"eval_fn: must be a function or None, got {type(self.eval_fn).__name__}")
        if isinstance(self.loss, str):
            checks.one_of("loss", self.loss, LOSSES)
        elif not callable(self.loss):
            raise TypeError(f"loss: must be one of {LOSSES} or a callable loss(labels, logits)")
        if isinstance(self.dense_optimizer, str):
            checks.one_of("dense_optimizer", self.dense_optimizer, DENSE_OPTIMIZERS)
        elif not isinstance(self.dense_optimizer, dict):
            raise TypeError("dense_optimizer: must be a Keras optimizer name or config dict")
        checks.positive_number("dense_learning_rate", self.dense_learning_rate)

    @property
    def table_names(self) -> List[str]:
        return [t.name for t in self.tables]

    def dims(self) -> Dict[str, int]:
        """{feature name: its table's dim}."""
        return {f.name: f.table.dim for f in self.features}

    def combiners(self) -> Dict[str, Optional[str]]:
        return {f.name: f.combiner for f in self.features}

    def describe(self) -> Dict[str, Any]:
        """JSON-friendly: tables and features (the report's ``job`` entry)."""
        return {"tables": [t.describe() for t in self.tables],
                "features": [{"name": f.name, "table": f.table.name, "combiner": f.combiner,
                              "shared_ids": f.shared_ids} for f in self.features]}
