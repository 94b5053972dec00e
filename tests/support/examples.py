"""The example jobs under examples/, imported by path (they are scripts, not part of the package)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from support.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"


def load_example(name: str) -> ModuleType:
    """examples/<name>.py as a module (registered in sys.modules, so its dataclasses and pickling work)."""
    module_name = f"xdl_ec_example_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]
