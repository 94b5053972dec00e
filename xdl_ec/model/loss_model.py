"""LossModel: a job's Keras model that computes its own loss from the batch's labels, as XDL's model functions do.

A job's model ordinarily returns logits and the job's ``loss`` turns them and the labels into the loss. A model whose
loss is its own business (a hand-written cross entropy, auxiliary losses, regularization terms) subclasses
:class:`LossModel` instead: called with ``labels=`` (float [B], or [B, C] of C classes) in the training step it
returns ``(loss, probabilities, outputs)``: the scalar loss the step differentiates, its probabilities ([B], [B, 1] or
[B, C]; None if the training graph computes none, when progressive validation has nothing to score) and a dict of
extra scalar outputs (an accuracy, an auxiliary loss) the report and the progress line show; called without labels
(evaluation, prediction, serving) it returns the probabilities alone.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import keras

ModelLoss = Tuple[Any, Optional[Any], Dict[str, Any]]


class LossModel(keras.Model):
    """The base of a job's model that computes its own loss (see the module docstring). ``label_classes``: C of
    the labels [B, C] it reads, None for labels [B]."""

    computes_loss = True
    label_classes: Optional[int] = None
