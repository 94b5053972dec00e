"""The package's layering, checked on its source: ps/ never imports ft/ (not even inside a function), no import
circle between modules, and every remote call goes through the one proxy (xdl_ec.ps.remote.Remote)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Set

import xdl_ec

PACKAGE = Path(xdl_ec.__file__).resolve().parent


def _modules() -> Dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = ["xdl_ec", *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(path.read_text(), str(path))
    return out


def _imports(name: str, tree: ast.Module, top_level_only: bool) -> Set[str]:
    """The xdl_ec modules ``name`` imports (resolving relative imports)."""
    package = name if (PACKAGE / Path(*name.split(".")[1:]) / "__init__.py").exists() else name.rsplit(".", 1)[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("xdl_ec")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.startswith("xdl_ec"):
                found.add(module)
                found |= {f"{module}.{a.name}" for a in node.names}
    return found


def test_ps_never_imports_ft() -> None:
    offenders = {name: sorted(i for i in _imports(name, tree, False) if i.startswith("xdl_ec.ft"))
                 for name, tree in _modules().items() if name.startswith("xdl_ec.ps")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_module_level_import_circle() -> None:
    modules = _modules()
    graph = {name: {i for i in _imports(name, tree, True) if i in modules and i != name}
             for name, tree in modules.items()}
    # a package __init__ re-exporting its own modules is not a circle of ties between nouns
    for name in graph:
        graph[name] = {i for i in graph[name] if not name.startswith(i + ".")}
    seen: Dict[str, int] = {}

    def visit(node: str, path: list) -> None:
        seen[node] = 1
        for nxt in graph[node]:
            if seen.get(nxt) == 1:
                raise AssertionError(f"import circle: {' -> '.join(path[path.index(nxt):] + [nxt])}")
            if nxt not in seen:
                visit(nxt, path + [nxt])
        seen[node] = 2

    for name in graph:
        if name not in seen:
            visit(name, [name])


def test_remote_calls_go_through_the_proxy() -> None:
    """``handle.call("method", ...)`` with a literal method name appears only in the proxy and the backends."""
    allowed = {"xdl_ec.ps.remote", "xdl_ec.ps.backend"}
    offenders = []
    for name, tree in _modules().items():
        if name in allowed:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("call", "call_beside") and node.args and \
                    isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                offenders.append(f"{name}:{node.lineno} {node.func.attr}({node.args[0].value!r})")
    assert offenders == []
