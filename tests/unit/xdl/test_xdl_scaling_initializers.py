"""XDL's VarianceScaling and UniformUnitScaling become the row initializer TF 1's arithmetic gives a table of shape
[feature_dim, emb_dim] (issue #50); a bad setting is a clear error."""

from __future__ import annotations

import math

import numpy as np
import pytest

import xdl_ec.xdl as xdl
from xdl_ec.sparse import init


def test_variance_scaling_follows_the_tables_shape() -> None:
    truncated = xdl.VarianceScaling(scale=2.0, mode="fan_in").rows(feature_dim=50, emb_dim=8)
    assert truncated == init.TruncatedNormal(0.0, math.sqrt(2.0 / 50) / 0.87962566103423978)
    uniform = xdl.VarianceScaling(mode="fan_avg", distribution="uniform").rows(feature_dim=50, emb_dim=8)
    limit = math.sqrt(3.0 / 29.0)
    assert uniform == init.RandomUniform(-limit, limit)
    assert xdl.VarianceScaling(mode="fan_out").rows(50, 8) == init.TruncatedNormal(
        0.0, math.sqrt(1 / 8) / 0.87962566103423978
    )
    assert xdl.UniformUnitScaling(factor=0.5).rows(12, 4) == init.RandomUniform(-0.25, 0.25)
    untruncated = xdl.VarianceScaling(distribution="untruncated_normal").rows(feature_dim=25, emb_dim=8)
    assert untruncated == init.RandomNormal(0.0, 0.2)


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: xdl.VarianceScaling(distribution="gamma"), "distribution must be one of"),
        (lambda: xdl.RandomNormal(stddev=0.0), "RandomNormal: stddev must be > 0"),
        (lambda: xdl.VarianceScaling(mode="fan"), r"mode must be one of \('fan_in', 'fan_out', 'fan_avg'\)"),
        (lambda: xdl.VarianceScaling(scale=0.0), "scale must be a positive number"),
        (lambda: xdl.VarianceScaling(seed=3), r"seed the table instead: xdl_ec.xdl.embedding\(..., seed=N\)"),
        (lambda: xdl.UniformUnitScaling(factor=-1.0), "factor must be a positive number"),
    ],
)
def test_bad_settings_say_what_is_wrong(make, message: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=message):
        make()


def test_random_normal_rows_are_untruncated_and_depend_on_seed_and_id_only() -> None:
    from xdl_ec.sparse.table import EmbeddingTable

    table = EmbeddingTable("t", dim=8, initializer=xdl.RandomNormal(mean=0.5, stddev=0.1), seed=7)
    rows = table.pull(np.arange(20000, dtype=np.int64))
    assert abs(float(rows.mean()) - 0.5) < 0.005 and abs(float(rows.std()) - 0.1) < 0.005
    assert float(np.mean(np.abs(rows - 0.5) > 0.2)) > 0.03  # tails beyond 2 stddev: not the truncated normal
    again = EmbeddingTable("t", dim=8, initializer=init.get("random_normal", mean=0.5, stddev=0.1), seed=7)
    np.testing.assert_array_equal(again.pull(np.array([3, 19999], dtype=np.int64)), rows[[3, 19999]])


def test_xdls_normal_initializer_says_what_ports_instead() -> None:
    with pytest.raises(AttributeError, match="RandomNormal, VarianceScaling .*and UniformUnitScaling"):
        xdl.Normal  # noqa: B018
