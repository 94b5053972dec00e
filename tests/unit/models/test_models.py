"""Model bodies: output shapes, parameter counts from the size flags, trainability."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from xdl_ec.models import DLRM, EmbeddingMLP, build_model  # noqa: E402


def inputs(batch: int, dim: int) -> tuple:
    """(embedded, dense) as a job calls a model: one fixed multi-hot feature [B, 26, dim] and 13 dense columns."""
    rng = np.random.default_rng(0)
    return (
        {"categorical": tf.constant(rng.normal(size=(batch, 26, dim)), tf.float32)},
        tf.constant(rng.random((batch, 13)), tf.float32),
    )


@pytest.mark.parametrize("name", ["dlrm", "mlp"])
@pytest.mark.parametrize("dim", [4, 16])
def test_output_is_one_logit_per_row(name: str, dim: int) -> None:
    model = build_model(name, dim)
    out = model(*inputs(5, dim))
    assert out.shape == (5,) and out.dtype == tf.float32
    assert np.all(np.isfinite(out.numpy()))


def test_dlrm_sizes_follow_the_flags() -> None:
    dim = 8
    model = DLRM(dim, bottom_mlp=(32,), top_mlp=(16,))
    model(*inputs(2, dim))
    bottom = (13 * 32 + 32) + (32 * dim + dim)
    interaction = 27 * 26 // 2
    top = ((dim + interaction) * 16 + 16) + (16 + 1)
    assert sum(int(np.prod(w.shape)) for w in model.weights) == bottom + top


def test_dlrm_interaction_is_the_upper_triangle_of_dot_products() -> None:
    dim = 3
    model = DLRM(dim, bottom_mlp=(4,), top_mlp=())
    embedded, dense = inputs(2, dim)
    emb = embedded["categorical"]
    model(embedded, dense)
    x = dense
    for layer in model.bottom:
        x = layer(x)
    v = np.concatenate([x.numpy()[:, None, :], emb.numpy()], axis=1)
    rows, cols = np.triu_indices(27, k=1)
    feats = np.concatenate([x.numpy(), np.einsum("bid,bid->bi", v[:, rows], v[:, cols])], axis=1)
    w, b = model.top[-1].get_weights()
    np.testing.assert_allclose(model(embedded, dense).numpy(), (feats @ w + b)[:, 0], rtol=1e-4, atol=1e-5)


def test_mlp_sizes_follow_the_flags() -> None:
    model = EmbeddingMLP(4, hidden=(8,))
    model(*inputs(2, 4))
    assert sum(int(np.prod(w.shape)) for w in model.weights) == (26 * 4 + 13) * 8 + 8 + 8 + 1


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match="model"):
        build_model("wide", 8)
    with pytest.raises(ValueError, match="emb_dim"):
        build_model("dlrm", 0)
    with pytest.raises(ValueError, match="MLP"):
        build_model("mlp", 8, hidden=(8, 0))


def test_features_of_several_shapes_feed_one_interaction() -> None:
    """DLRM over a job's features: a [B, dim] feature is one vector, a [B, n, dim] one n; MLP flattens each."""
    rng = np.random.default_rng(1)
    embedded = {
        "user": tf.constant(rng.normal(size=(3, 4)), tf.float32),
        "tags": tf.constant(rng.normal(size=(3, 2, 4)), tf.float32),
    }
    dlrm = DLRM(4, bottom_mlp=(4,), top_mlp=())
    assert dlrm(embedded, tf.zeros((3, 5))).shape == (3,)
    assert dlrm.top[-1].kernel.shape[0] == 4 + 4 * 3 // 2  # bottom output + pairs of 4 vectors
    assert DLRM(4, bottom_mlp=(4,), top_mlp=())(embedded, None).shape == (3,)  # no dense: the embeddings' pairs alone
    mlp = EmbeddingMLP(4, hidden=(2,))
    mlp(embedded, None)
    assert mlp.hidden[0].kernel.shape[0] == 4 + 2 * 4
    with pytest.raises(ValueError, match="one dim"):
        DLRM(4)({"a": tf.zeros((2, 4)), "b": tf.zeros((2, 3))}, None)
