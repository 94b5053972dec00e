"""The example jobs under examples/, for the benches: each imported by its file name with examples/ on ``sys.path``
(as ``python examples/NAME.py`` would put it), so its classes and functions pickle by name. The benches import this
module from beside them (``python -P`` too); they need nothing from tests/."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str) -> ModuleType:
    """examples/<name>.py as the module ``name``."""
    if not (EXAMPLES / f"{name}.py").is_file():
        raise ValueError(f"no example {name!r} in {EXAMPLES}")
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)
