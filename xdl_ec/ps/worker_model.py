"""WorkerModel: a worker's copy of the job's dense model and the TF step over it.

Both are built with the worker's first batch: its shapes (:meth:`~xdl_ec.model.feature_batch.FeatureBatch.signature`)
fix the model's inputs and the traced step's, and every later batch must keep them.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from xdl_ec.model.dense_model import DenseModel
from xdl_ec.model.feature_batch import FeatureBatch
from xdl_ec.model.job_spec import JobSpec
from xdl_ec.model.model_step import ModelStep
from xdl_ec.ps.dense_state import DenseState


class WorkerModel:
    """Worker ``worker``'s dense model of ``job`` (initialised from ``seed``) and its step. ``apply_dense``: the
    step applies its dense gradients to this model itself; ``report_dense``: it answers them too (see
    :mod:`xdl_ec.ps.dense_sync`)."""

    def __init__(self, job: JobSpec, worker: int, seed: int, apply_dense: bool, report_dense: bool) -> None:
        self._job, self._worker, self._seed = job, worker, seed
        self._apply_dense, self._report_dense = apply_dense, report_dense
        self.dense: Optional[DenseModel] = None
        self.signature: Optional[Tuple[Any, ...]] = None  # the batch signature the model and step were built for
        self._step: Optional[ModelStep] = None

    def build_for(self, batch: Optional[FeatureBatch]) -> None:
        """Builds the model and step for ``batch``'s shapes, unless built already (or there is no batch)."""
        if batch is None or self._step is not None:
            return
        job = self._job
        self.signature = signature = batch.signature()
        self.dense = DenseModel(
            job.model_fn,
            job.dense_optimizer,
            job.dense_learning_rate,
            signature,
            job.dims(),
            job.combiners(),
            self._seed,
        )
        self._step = ModelStep.of(
            job,
            self.dense,
            signature,
            apply=self._apply_dense,
            return_dense=self._report_dense,
            grouped=bool(batch.groups),  # as the worker's input prepares its batches
        )

    @property
    def built_dense(self) -> DenseModel:
        """The dense model, built with the first batch (its shapes fix the model's)."""
        if self.dense is None:
            raise RuntimeError(f"worker {self._worker}: its model is built with its first batch, and it has had none")
        return self.dense

    @property
    def built_step(self) -> ModelStep:
        """The TF step, built with the first batch."""
        if self._step is None:
            raise RuntimeError(f"worker {self._worker}: its step is built with its first batch, and it has had none")
        return self._step

    def check_following(self, batch: FeatureBatch, following: FeatureBatch) -> None:
        """Raises the step's clear shape-mismatch error when ``following`` (read ahead) differs from ``batch``'s
        shapes: before ``batch``'s step applies anything."""
        if following.signature() != batch.signature():
            self.built_step._inputs(following, {})

    def take_weights(self, weights: Union[None, DenseState, Sequence[np.ndarray]]) -> None:
        """Takes the driver's dense ``weights`` (None: keeps its own; a :class:`DenseState`: the whole state)."""
        if isinstance(weights, DenseState):
            self.load(weights)
        elif weights is not None:
            self.built_dense.set_weights(weights)

    def load(self, state: DenseState) -> None:
        """Takes ``state`` as this model's (weights and optimizer variables)."""
        self.built_dense.load_state(state.weights, state.optimizer)

    def state(self) -> Tuple[List[np.ndarray], List[np.ndarray], int]:
        """(weights, optimizer variables, optimizer iterations)."""
        weights, variables = self.built_dense.state()
        return weights, variables, int(self.built_dense.optimizer.iterations.numpy())
