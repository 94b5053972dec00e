"""The package's layering, checked on its source (docs/design/layers.md): every module sits in a room, a room
imports only rooms below it (module-level, function-local and type-only imports alike), no import circle of any
kind between modules, and every remote call goes through the one proxy (xdl_ec.ps.remote.Remote)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

import xdl_ec

PACKAGE = Path(xdl_ec.__file__).resolve().parent
#: the rooms, lowest first; "xdl_ec" is the root (public names, the CLI, the public namespaces)
ROOMS = [
    "settings",
    "sparse",
    "net",
    "data",
    "tf",
    "models",
    "model",
    "keep",
    "ps",
    "ft",
    "job",
    "builtin",
    "xdl",
    "benchmark",
    "xdl_ec",
]
#: the compiled modules: the core's binding and the TF ops' library, below every room
NATIVE = {"xdl_ec._core", "xdl_ec._tf_ops"}


def _modules() -> Dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = ["xdl_ec", *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(path.read_text(), str(path))
    return out


def _imports(name: str, tree: ast.Module, modules: Dict[str, ast.Module]) -> Set[str]:
    """The xdl_ec modules ``name`` imports anywhere in its source (resolving relative imports; ``from P import m``
    names module P.m when it is one)."""
    package = name if (PACKAGE / Path(*name.split(".")[1:]) / "__init__.py").exists() else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("xdl_ec")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not module.startswith("xdl_ec"):
                continue
            submodules = {f"{module}.{a.name}" for a in node.names} & (set(modules) | NATIVE)
            found |= submodules or {module}
            if len(submodules) < len(node.names):
                found.add(module)
    return found - {name}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ROOMS) else "xdl_ec"


def test_every_module_sits_in_a_room_and_imports_only_rooms_below() -> None:
    modules = _modules()
    root_modules = {"xdl_ec", "xdl_ec.__main__", "xdl_ec.cli", "xdl_ec.optim", "xdl_ec.init", "xdl_ec.keras"}
    homeless = sorted(m for m in modules if _room(m) == "xdl_ec" and m not in root_modules)
    assert homeless == [], "modules outside the rooms: give each a room (docs/design/layers.md)"
    upward: List[str] = []
    for name, tree in modules.items():
        rank = ROOMS.index(_room(name))
        for imported in sorted(_imports(name, tree, modules) - NATIVE):
            if ROOMS.index(_room(imported)) > rank:
                upward.append(f"{name} -> {imported}")
    assert upward == []


def test_no_import_circle_of_any_kind() -> None:
    modules = _modules()
    graph = {name: {i for i in _imports(name, tree, modules) if i in modules} for name, tree in modules.items()}
    # a package __init__ re-exporting its own modules is not a circle of ties between nouns
    for name in graph:
        graph[name] = {i for i in graph[name] if not name.startswith(i + ".")}
    seen: Dict[str, int] = {}

    def visit(node: str, path: list) -> None:
        seen[node] = 1
        for nxt in sorted(graph[node]):
            if seen.get(nxt) == 1:
                raise AssertionError(f"import circle: {' -> '.join(path[path.index(nxt) :] + [nxt])}")
            if nxt not in seen:
                visit(nxt, path + [nxt])
        seen[node] = 2

    for name in sorted(graph):
        if name not in seen:
            visit(name, [name])


def test_the_checks_see_function_local_imports() -> None:
    """A function-local import counts: the checks above read every import in a module, not only its top level."""
    tree = ast.parse("def f():\n    from ..ft import factory\n")
    assert "xdl_ec.ft.factory" in _imports("xdl_ec.ps.worker", tree, {"xdl_ec.ft.factory": tree})
    assert _room("xdl_ec.ft.factory") == "ft" and ROOMS.index("ft") > ROOMS.index("ps")


def test_remote_calls_go_through_the_proxy() -> None:
    """``handle.call("method", ...)`` with a literal method name appears only in the proxy and the backends."""
    allowed = {"xdl_ec.ps.remote", "xdl_ec.ps.backend"}
    offenders = []
    for name, tree in _modules().items():
        if name in allowed:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("call", "call_beside")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                offenders.append(f"{name}:{node.lineno} {node.func.attr}({node.args[0].value!r})")
    assert offenders == []
