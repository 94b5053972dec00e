"""XDL's VarianceScaling and UniformUnitScaling become the row initializer TF 1's arithmetic gives a table of shape
[feature_dim, emb_dim] (issue #50); a bad setting is a clear error."""

from __future__ import annotations

import math

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


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: xdl.VarianceScaling(distribution="untruncated_normal"), "an untruncated normal is not among"),
        (lambda: xdl.VarianceScaling(mode="fan"), r"mode must be one of \('fan_in', 'fan_out', 'fan_avg'\)"),
        (lambda: xdl.VarianceScaling(scale=0.0), "scale must be a positive number"),
        (lambda: xdl.VarianceScaling(seed=3), r"seed the table instead: xdl_ec.xdl.embedding\(..., seed=N\)"),
        (lambda: xdl.UniformUnitScaling(factor=-1.0), "factor must be a positive number"),
    ],
)
def test_bad_settings_say_what_is_wrong(make, message: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=message):
        make()


def test_normal_initializers_say_what_ports_instead() -> None:
    with pytest.raises(AttributeError, match="VarianceScaling .*and UniformUnitScaling"):
        xdl.RandomNormal  # noqa: B018
