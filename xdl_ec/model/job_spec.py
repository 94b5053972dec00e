"""JobSpec: what a training job is, checked once: its tables, features, model, input and loss.

The parameter-server roles receive it as is (picklable with the job's functions: module-level functions pickle
by reference; Ray's cloudpickle also takes closures and lambdas), and each builds its own model and input from the
factories: ``model_fn()`` returns a Keras model called as ``model(embedded, dense)``; ``input_fn(worker,
num_workers)`` returns an iterable of dict batches (see :mod:`xdl_ec.model.feature_batch`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from xdl_ec.model.dense_model import DENSE_OPTIMIZERS
from xdl_ec.model.feature import Feature
from xdl_ec.model.model_step import LOSSES
from xdl_ec.model.side_input import Input
from xdl_ec.settings import checks
from xdl_ec.sparse.row_rules import Admit, Evict
from xdl_ec.sparse.table_config import Table


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A checked job: ``tables`` in declared order (the order of the model digest), ``features``, the factories,
    ``loss`` ("binary_crossentropy" or a callable ``loss(labels, logits)``; for a model of several heads a dict
    {head: "binary_crossentropy"} weighted by ``loss_weights`` {head: weight} (1.0 each by default), or a callable
    ``loss(labels: dict, logits: dict)``), the dense optimizer (a Keras optimizer name or config dict) and its
    learning rate, an optional ``eval_fn()`` giving hold-out batches, and side ``inputs`` (xdl_ec.Input) passed to
    the model beside ``dense``."""

    tables: Tuple[Table, ...]
    features: Tuple[Feature, ...]
    model_fn: Callable[[], Any]
    input_fn: Callable[[int, int], Any]
    loss: Union[str, Dict[str, str], Callable[[Any, Any], Any]] = "binary_crossentropy"
    dense_optimizer: Union[str, Dict[str, Any]] = "adam"
    dense_learning_rate: float = 0.001
    eval_fn: Optional[Callable[[], Any]] = None
    inputs: Tuple[Input, ...] = ()
    loss_weights: Optional[Dict[str, float]] = None
    table_groups: bool = True  # the tables of one dim that qualify step together (xdl_ec.model.table_groups)

    def __post_init__(self) -> None:
        tables, features = tuple(self.tables), tuple(self.features)
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "features", features)
        object.__setattr__(self, "inputs", tuple(self.inputs))
        names: Dict[str, Table] = {}
        for t in tables:
            checks.instance("tables[...]", t, Table)
            if t.name in names:
                raise ValueError(f"tables: two tables are named {t.name!r}; table names must be unique")
            names[t.name] = t
        if tables and not features:
            raise ValueError("features: a job with tables needs at least one Feature (its ids are a table's keys)")
        if features and not tables:
            raise ValueError("tables: the features look ids up in tables; give the job their tables")
        seen = set()
        for f in features:
            checks.instance("features[...]", f, Feature)
            if f.name in seen:
                raise ValueError(f"features: two features are named {f.name!r}; feature names must be unique")
            seen.add(f.name)
            if names.get(f.table.name) != f.table:
                raise ValueError(
                    f"feature {f.name!r}: its table {f.table.name!r} is not one of the job's tables "
                    f"(or differs from the declared one); pass it in tables=[...]"
                )
        for i in self.inputs:
            checks.instance("inputs[...]", i, Input)
            if i.name in seen:
                raise ValueError(
                    f"inputs: {i.name!r} is also the name of a feature or another input; names must be unique"
                )
            seen.add(i.name)
        for f in features:
            if f.sequence and f.mask_name in seen:
                raise ValueError(
                    f"feature {f.name!r}: its mask reaches the model as {f.mask_name!r}, which is also a "
                    f"feature's or input's name; rename one"
                )
        unused = [t.name for t in tables if not any(f.table.name == t.name for f in features)]
        if unused:
            raise ValueError(f"tables: {unused} are looked up by no feature; declare a Feature for them or drop them")
        for name in ("model_fn", "input_fn"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{name}: must be a function (a factory), got {type(getattr(self, name)).__name__}")
        if not isinstance(self.model_fn, type) and hasattr(self.model_fn, "trainable_variables"):  # a model is callable
            raise TypeError(
                "model_fn: must be a function that builds the model, got a model itself: every worker "
                "builds its own (model_fn=make_model, not make_model())"
            )
        if self.eval_fn is not None and not callable(self.eval_fn):
            raise TypeError(f"eval_fn: must be a function or None, got {type(self.eval_fn).__name__}")
        if isinstance(self.loss, str):
            checks.one_of("loss", self.loss, LOSSES)
        elif isinstance(self.loss, dict):
            if not self.loss:
                raise ValueError("loss: a dict of heads must name at least one head: {head: 'binary_crossentropy'}")
            for head, kind in self.loss.items():
                checks.non_empty_str("loss: a head's name", head)
                checks.one_of(f"loss[{head!r}]", kind, LOSSES)
        elif not callable(self.loss):
            raise TypeError(
                f"loss: must be one of {LOSSES}, a dict {{head: {LOSSES[0]!r}}} or a callable loss(labels, logits)"
            )
        if self.loss_weights is not None:
            if not isinstance(self.loss, dict) or not isinstance(self.loss_weights, dict):
                raise ValueError(
                    "loss_weights: weights the heads of a loss given as a dict {head: loss}; pass "
                    "loss={head: 'binary_crossentropy', ...} too (a callable loss weighs its own terms)"
                )
            unknown = sorted(set(self.loss_weights) - set(self.loss))
            if unknown:
                raise ValueError(f"loss_weights: heads {unknown} are not in loss (heads: {sorted(self.loss)})")
            for head, weight in self.loss_weights.items():
                checks.number(f"loss_weights[{head!r}]", weight, low=0.0)
        if isinstance(self.dense_optimizer, str):
            checks.one_of("dense_optimizer", self.dense_optimizer, DENSE_OPTIMIZERS)
        elif not isinstance(self.dense_optimizer, dict):
            raise TypeError("dense_optimizer: must be a Keras optimizer name or config dict")
        checks.positive_number("dense_learning_rate", self.dense_learning_rate)

    def with_default_rules(self, admit: Optional[Admit], evict: Optional[Evict]) -> "JobSpec":
        """This job with ``admit`` / ``evict`` on every table that declares neither (``xdl-ec train --script`` with
        the table flags: defaults for the script's tables; a table's own rules stay as declared)."""
        if admit is None and evict is None:
            return self
        tables = {t.name: t if t.bounded else dataclasses.replace(t, admit=admit, evict=evict) for t in self.tables}
        features = tuple(dataclasses.replace(f, table=tables[f.table.name]) for f in self.features)
        return dataclasses.replace(self, tables=tuple(tables.values()), features=features)

    @property
    def heads(self) -> Optional[Tuple[str, ...]]:
        """The heads a loss dict names (sorted), whose labels every batch must carry; None otherwise."""
        return tuple(sorted(self.loss)) if isinstance(self.loss, dict) else None

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
        described: Dict[str, Any] = {
            "tables": [t.describe() for t in self.tables],
            "features": [
                {
                    "name": f.name,
                    "table": f.table.name,
                    "combiner": f.combiner,
                    "shared_ids": f.shared_ids,
                    **({"sequence": True, "max_length": f.max_length} if f.sequence else {}),
                }
                for f in self.features
            ],
        }
        if self.inputs:
            described["inputs"] = [i.describe() for i in self.inputs]
        if self.heads:
            described["heads"] = list(self.heads)
        return described
