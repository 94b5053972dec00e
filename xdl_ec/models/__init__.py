"""CTR model bodies (Keras 3 via tf.keras), called as a job's model: ``model(embedded, dense)`` -> logits [B],
with ``embedded`` {feature: [B, dim] or [B, n, dim]}. A body owns no embeddings, so the same body trains on an
xdl-ec table or on a plain Keras ``Embedding``."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from xdl_ec.models.dlrm import DLRM
from xdl_ec.models.mlp import EmbeddingMLP

MODELS = ("dlrm", "mlp")


def build_model(
    name: str,
    emb_dim: int,
    *,
    bottom_mlp: Sequence[int] = (64,),
    top_mlp: Sequence[int] = (64, 32),
    hidden: Sequence[int] = (128, 64),
) -> tf.keras.Model:
    """A model body by name: ``dlrm`` (uses bottom_mlp, top_mlp) or ``mlp`` (uses hidden)."""
    if name == "dlrm":
        return DLRM(emb_dim, bottom_mlp, top_mlp, name="dlrm")
    if name == "mlp":
        return EmbeddingMLP(emb_dim, hidden, name="mlp")
    raise ValueError(f"model: unknown model {name!r}, expected one of {MODELS}")


__all__ = ["DLRM", "EmbeddingMLP", "MODELS", "build_model"]
