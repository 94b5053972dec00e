"""xdl-ec's built-in DLRM body (xdl_ec/models/dlrm.py) rewritten for the TensorFlow peers, layer for layer: bottom
MLP (64, emb_dim) with ReLU on the dense features, the strict upper triangle of the dot products of the F + 1
vectors, concatenated with the bottom output, top MLP (64, 32) with ReLU and one linear logit; Keras' default
initialisers (Glorot uniform, zero bias). Runs on Keras 3 (TF 2.21) and on tf-keras 2.16 (TFRA's TF); it is not
imported from xdl-ec because TFRA's environment has no xdl-ec."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import tensorflow as tf
from hyperparameters import BOTTOM_MLP, EMB_DIM, TOP_MLP


class DLRMBody(tf.keras.Model):
    """``model(vectors [B, F, d], dense [B, 13])`` -> logits [B]."""

    def __init__(
        self, emb_dim: int = EMB_DIM, bottom_mlp: Sequence[int] = BOTTOM_MLP, top_mlp: Sequence[int] = TOP_MLP
    ) -> None:
        super().__init__()
        self.bottom = [tf.keras.layers.Dense(u, activation="relu") for u in [*bottom_mlp, emb_dim]]
        self.top = [tf.keras.layers.Dense(u, activation="relu") for u in top_mlp]
        self.top.append(tf.keras.layers.Dense(1))

    def call(self, vectors: Any, dense: Any) -> Any:
        x = dense
        for layer in self.bottom:
            x = layer(x)
        vectors = tf.concat([x[:, None, :], vectors], axis=1)
        n = int(vectors.shape[1])
        rows, cols = np.triu_indices(n, k=1)
        dots = tf.matmul(vectors, vectors, transpose_b=True)
        pairs = tf.gather(tf.reshape(dots, [-1, n * n]), tf.constant(rows * n + cols, dtype=tf.int32), axis=1)
        h = tf.concat([x, pairs], axis=1)
        for layer in self.top:
            h = layer(h)
        return tf.squeeze(h, axis=1)
