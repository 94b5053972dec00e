"""DLRM (Naumov et al., 2019): bottom MLP on the dense features, dot interaction with the embeddings, top MLP."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf


def feature_vectors(embedded: Dict[str, Any]) -> Any:
    """The embedded features as vectors [B, F, dim]: a [B, dim] feature is one vector, a [B, n, dim] one n, in the
    job's feature order (every feature must have the same dim)."""
    parts = [x[:, None, :] if x.shape.rank == 2 else x for x in embedded.values()]
    dims = {int(p.shape[-1]) for p in parts}
    if len(dims) != 1:
        raise ValueError(f"DLRM's dot interaction needs every feature's rows of one dim, got dims {sorted(dims)}")
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=1)


class DLRM(tf.keras.Model):
    """DLRM body: ``model(embedded, dense)`` -> click logits [B], with ``embedded`` {feature: [B, dim] or
    [B, n, dim]} (a job's embedded features) and ``dense`` [B, D] or None.

    The bottom MLP maps the dense features to one more ``emb_dim`` vector (its last layer has ``emb_dim`` units);
    the F + 1 vectors interact by pairwise dot products (the strict upper triangle), concatenated with the bottom
    output and fed to the top MLP, whose last layer is one linear unit. The body owns no embeddings, so the same
    body serves an xdl-ec table and a plain Keras ``Embedding``.
    """

    def __init__(
        self, emb_dim: int, bottom_mlp: Sequence[int] = (64,), top_mlp: Sequence[int] = (64, 32), **kwargs
    ) -> None:
        super().__init__(**kwargs)
        _check_sizes(emb_dim, bottom_mlp, top_mlp)
        self.emb_dim = int(emb_dim)
        self.bottom = [
            tf.keras.layers.Dense(int(u), activation="relu", name=f"bottom_{i}")
            for i, u in enumerate([*bottom_mlp, emb_dim])
        ]
        self.top = [tf.keras.layers.Dense(int(u), activation="relu", name=f"top_{i}") for i, u in enumerate(top_mlp)]
        self.top.append(tf.keras.layers.Dense(1, name="logit"))

    def call(self, embedded: Dict[str, Any], dense: Optional[Any] = None, training: bool = False):  # noqa: ANN201
        vectors = feature_vectors(embedded)
        x = None
        if dense is not None:
            x = dense
            for layer in self.bottom:
                x = layer(x)
            vectors = tf.concat([x[:, None, :], vectors], axis=1)  # [B, F + 1, d]
        n = int(vectors.shape[1])
        rows, cols = np.triu_indices(n, k=1)
        dots = tf.matmul(vectors, vectors, transpose_b=True)  # [B, n, n]
        pairs = tf.gather(tf.reshape(dots, [-1, n * n]), tf.constant(rows * n + cols, dtype=tf.int32), axis=1)
        h = pairs if x is None else tf.concat([x, pairs], axis=1)
        for layer in self.top:
            h = layer(h)
        return tf.squeeze(h, axis=1)


def _check_sizes(emb_dim: int, *mlps: Sequence[int]) -> None:
    if isinstance(emb_dim, bool) or not isinstance(emb_dim, (int, np.integer)) or emb_dim < 1:
        raise ValueError(f"emb_dim: must be a positive integer, got {emb_dim!r}")
    for mlp in mlps:
        if any(isinstance(u, bool) or not isinstance(u, (int, np.integer)) or u < 1 for u in mlp):
            raise ValueError(f"MLP layer sizes: must be positive integers, got {list(mlp)!r}")
