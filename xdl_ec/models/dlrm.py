"""DLRM (Naumov et al., 2019): bottom MLP on the dense features, dot interaction with the embeddings, top MLP."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from ..data.schema import NUM_SPARSE


class DLRM(tf.keras.Model):
    """DLRM body: inputs ``(dense [B, 13], embeddings [B, 26, emb_dim])`` -> click logits ``[B]``.

    The bottom MLP maps the dense features to one more ``emb_dim`` vector (its last layer has ``emb_dim`` units);
    the 27 vectors interact by pairwise dot products (the strict upper triangle: 27 * 26 / 2 = 351 features),
    concatenated with the bottom output and fed to the top MLP, whose last layer is one linear unit. The body owns
    no embeddings, so the same body serves an xdl-ec table and a plain Keras ``Embedding``.
    """

    def __init__(self, emb_dim: int, bottom_mlp: Sequence[int] = (64,), top_mlp: Sequence[int] = (64, 32),
                 **kwargs) -> None:
        super().__init__(**kwargs)
        _check_sizes(emb_dim, bottom_mlp, top_mlp)
        self.emb_dim = int(emb_dim)
        self.bottom = [tf.keras.layers.Dense(int(u), activation="relu", name=f"bottom_{i}")
                       for i, u in enumerate([*bottom_mlp, emb_dim])]
        self.top = [tf.keras.layers.Dense(int(u), activation="relu", name=f"top_{i}") for i, u in enumerate(top_mlp)]
        self.top.append(tf.keras.layers.Dense(1, name="logit"))
        n = NUM_SPARSE + 1
        rows, cols = np.triu_indices(n, k=1)
        self._pairs = tf.constant(rows * n + cols, dtype=tf.int32)

    def call(self, inputs, training: bool = False):  # noqa: ANN001, ANN201 - Keras signature
        dense, emb = inputs
        x = dense
        for layer in self.bottom:
            x = layer(x)
        vectors = tf.concat([x[:, None, :], emb], axis=1)  # [B, 27, d]
        dots = tf.matmul(vectors, vectors, transpose_b=True)  # [B, 27, 27]
        n = NUM_SPARSE + 1
        pairs = tf.gather(tf.reshape(dots, [-1, n * n]), self._pairs, axis=1)
        h = tf.concat([x, pairs], axis=1)
        for layer in self.top:
            h = layer(h)
        return tf.squeeze(h, axis=1)


def _check_sizes(emb_dim: int, *mlps: Sequence[int]) -> None:
    if isinstance(emb_dim, bool) or not isinstance(emb_dim, (int, np.integer)) or emb_dim < 1:
        raise ValueError(f"emb_dim: must be a positive integer, got {emb_dim!r}")
    for mlp in mlps:
        if any(isinstance(u, bool) or not isinstance(u, (int, np.integer)) or u < 1 for u in mlp):
            raise ValueError(f"MLP layer sizes: must be positive integers, got {list(mlp)!r}")
