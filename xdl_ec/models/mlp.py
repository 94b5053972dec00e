"""Embedding&MLP (the DeepCTR-style baseline): concatenated embeddings and dense features into an MLP."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import tensorflow as tf

from xdl_ec.models.dlrm import _check_sizes


class EmbeddingMLP(tf.keras.Model):
    """Embedding&MLP body: ``model(embedded, dense)`` -> click logits [B]. Every embedded feature is flattened
    and concatenated with the dense features, then goes through ReLU layers of ``hidden`` units and one linear
    output unit. The body owns no embeddings (see :class:`~xdl_ec.models.dlrm.DLRM`).
    """

    def __init__(self, emb_dim: int, hidden: Sequence[int] = (128, 64), **kwargs) -> None:
        super().__init__(**kwargs)
        _check_sizes(emb_dim, hidden)
        self.emb_dim = int(emb_dim)
        self.hidden = [
            tf.keras.layers.Dense(int(u), activation="relu", name=f"hidden_{i}") for i, u in enumerate(hidden)
        ]
        self.out = tf.keras.layers.Dense(1, name="logit")

    def call(self, embedded: Dict[str, Any], dense: Optional[Any] = None, training: bool = False):  # noqa: ANN201
        parts = [tf.reshape(x, [-1, x.shape[1] * x.shape[2]]) if x.shape.rank == 3 else x for x in embedded.values()]
        if dense is not None:
            parts.append(dense)
        h = tf.concat(parts, axis=1)
        for layer in self.hidden:
            h = layer(h)
        return tf.squeeze(self.out(h), axis=1)
