"""Small deterministic parameter-server runs shared by the fault-tolerance tests, and their failure-free
references (each configuration trained once per test session)."""

from __future__ import annotations

import os
from typing import Any, Dict, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.ps import ClusterConfig, PSTrainer  # noqa: E402
from xdl_ec.trainer import TrainConfig  # noqa: E402

_REFERENCES: Dict[Tuple, Dict[str, Any]] = {}


def small_config(**overrides: Any) -> TrainConfig:
    """Seconds-long synthetic runs: 64-sample batches, dim 8, Adam (optimizer state in every record)."""
    base = dict(synthetic=True, synthetic_rows=3000, batch_size=64, steps=10, deterministic=True, progress=False,
                seed=5, emb_dim=8, optimizer="adam")
    base.update(overrides)
    return TrainConfig(**base)


def reference(servers: int, workers: int, **overrides: Any) -> Dict[str, Any]:
    """The report of the failure-free run of ``small_config(**overrides)`` on ``servers`` x ``workers``."""
    key = (servers, workers, tuple(sorted(overrides.items())))
    if key not in _REFERENCES:
        _REFERENCES[key] = PSTrainer(small_config(**overrides), ClusterConfig(servers=servers, workers=workers)).run()
    return _REFERENCES[key]
