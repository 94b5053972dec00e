"""RunSettings: what every process of a run sets the same way, so that its roles' initial rows and TF agree."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What every process of a run sets the same way: the ``seed`` of its rows' initialisers and TF, and whether
    TF runs ``deterministic`` (the same seed then gives the same ``model_digest``)."""

    seed: int = 0
    deterministic: bool = False
