"""Validated hyper-parameters: the shared base of the optimizer and initializer settings."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict


class HyperParameters:
    """Base of frozen dataclasses whose fields map onto a ``_core`` config struct of the same names."""

    kind: Any = None
    core_names: Dict[str, str] = {}  # field name -> core config field name where they differ

    def _fill(self, config: Any) -> Any:
        config.kind = self.kind
        for field in dataclasses.fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            setattr(config, self.core_names.get(field.name, field.name), getattr(self, field.name))
        config.validate()
        return config
