"""Embedding&MLP (the DeepCTR-style baseline): concatenated embeddings and dense features into an MLP."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from ..data.schema import NUM_SPARSE
from .dlrm import _check_sizes


class EmbeddingMLP(tf.keras.Model):
    """Embedding&MLP body: inputs ``(dense [B, 13], embeddings [B, 26, emb_dim])`` -> click logits ``[B]``.

    The 26 embeddings are flattened and concatenated with the dense features, then go through ReLU layers of
    ``hidden`` units and one linear output unit. The body owns no embeddings (see :class:`DLRM`).
    """

    def __init__(self, emb_dim: int, hidden: Sequence[int] = (128, 64), **kwargs) -> None:
        super().__init__(**kwargs)
        _check_sizes(emb_dim, hidden)
        self.emb_dim = int(emb_dim)
        self.hidden = [tf.keras.layers.Dense(int(u), activation="relu", name=f"hidden_{i}")
                       for i, u in enumerate(hidden)]
        self.out = tf.keras.layers.Dense(1, name="logit")

    def call(self, inputs, training: bool = False):  # noqa: ANN001, ANN201 - Keras signature
        dense, emb = inputs
        h = tf.concat([tf.reshape(emb, [-1, NUM_SPARSE * self.emb_dim]), dense], axis=1)
        for layer in self.hidden:
            h = layer(h)
        return tf.squeeze(self.out(h), axis=1)
