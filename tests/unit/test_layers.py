"""The package's layering, checked on its source (docs/design/layers.md): every module sits in a room, a room
imports only rooms below it (module-level, function-local and type-only imports alike), importing a module runs
nothing of a room above it (a package's ``__init__`` runs before its modules: the root's before every one), no
import circle of any kind between modules, and every remote call goes through the one proxy
(xdl_ec.ps.remote.Remote)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterable, List, Set

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
    "plan",
    "benchmark",
    "cli",
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


def _package(name: str) -> str:
    """The package relative imports in module ``name`` start from."""
    return name if (PACKAGE / Path(*name.split(".")[1:]) / "__init__.py").exists() else name.rsplit(".", 1)[0]


def _imported(node: ast.AST, package: str, modules: Dict[str, ast.Module]) -> Set[str]:
    """The xdl_ec modules one import statement names (``from P import m`` names module P.m when it is one)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.startswith("xdl_ec")}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    if not module.startswith("xdl_ec"):
        return set()
    submodules = {f"{module}.{a.name}" for a in node.names} & (set(modules) | NATIVE)
    return submodules | ({module} if len(submodules) < len(node.names) else set())


def _imports(name: str, tree: ast.Module, modules: Dict[str, ast.Module]) -> Set[str]:
    """The xdl_ec modules ``name`` imports anywhere in its source (resolving relative imports)."""
    package = _package(name)
    return {m for node in ast.walk(tree) for m in _imported(node, package, modules)} - {name}


def _load_time_statements(body: Iterable[ast.stmt]) -> Iterable[ast.stmt]:
    """The statements that run when a module is imported: not function bodies (they run when called), not the
    ``if TYPE_CHECKING:`` branch (type checkers read it, Python does not)."""
    for node in body:
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _load_time_statements(node.orelse)
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            yield from _load_time_statements(getattr(node, field, []))


def _parents(module: str) -> Set[str]:
    """The packages Python imports (runs the ``__init__`` of) before ``module``: ``xdl_ec`` for every one."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _loads(name: str, modules: Dict[str, ast.Module]) -> Set[str]:
    """The xdl_ec modules ``name``'s own load-time statements import, with the packages above each."""
    if name not in modules:
        return set()
    package = _package(name)
    found = set()
    for node in _load_time_statements(modules[name].body):
        found |= {m for m in _imported(node, package, modules) for m in (m, *_parents(m))}
    return found - {name}


def _runs(name: str, modules: Dict[str, ast.Module]) -> Set[str]:
    """Every xdl_ec module that ``import name`` runs, transitively: load-time imports and the packages above each."""
    seen: Set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        for module in (_parents(current) | _loads(current, modules)) - seen - {name}:
            seen.add(module)
            todo.append(module)
    return seen


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ROOMS) else "xdl_ec"


def test_every_module_sits_in_a_room_and_imports_only_rooms_below() -> None:
    modules = _modules()
    root_modules = {"xdl_ec", "xdl_ec.__main__", "xdl_ec.cli", "xdl_ec.optim", "xdl_ec.init", "xdl_ec.keras"}
    root_modules |= {"xdl_ec.codec"}
    homeless = sorted(m for m in modules if _room(m) == "xdl_ec" and m not in root_modules)
    assert homeless == [], "modules outside the rooms: give each a room (docs/design/layers.md)"
    upward: List[str] = []
    for name, tree in modules.items():
        rank = ROOMS.index(_room(name))
        for imported in sorted(_imports(name, tree, modules) - NATIVE):
            if ROOMS.index(_room(imported)) > rank:
                upward.append(f"{name} -> {imported}")
    assert upward == []


def _upward_runs(modules: Dict[str, ast.Module]) -> List[str]:
    """Modules whose import runs a module of a room above theirs. The root package runs first for every module, so
    what it runs is checked apart (:func:`test_the_root_runs_nothing_of_ours`) and not charged to each module."""
    for_everyone = _runs("xdl_ec", modules) | {"xdl_ec"}
    upward = []
    for name in modules:
        rank = ROOMS.index(_room(name))
        for module in sorted(_runs(name, modules) - for_everyone - NATIVE):
            if ROOMS.index(_room(module)) > rank:
                upward.append(f"{name} runs {module}")
    return upward


def test_importing_a_module_runs_nothing_of_a_room_above_it() -> None:
    assert _upward_runs(_modules()) == []


def test_the_root_runs_nothing_of_ours() -> None:
    """Every import of a module in the package runs the root's ``__init__`` first: it loads its public names on
    first use, and at import only modules that themselves import nothing of ours (TF's start-up quieting)."""
    modules = _modules()
    heavy = {m: sorted(_loads(m, modules) - _parents(m) - NATIVE) for m in _runs("xdl_ec", modules)}
    assert {m: loads for m, loads in heavy.items() if loads} == {}


def test_the_checks_see_what_a_package_init_runs() -> None:
    """``from xdl_ec import _core`` in a low room runs the root's ``__init__``, and whatever that imports."""
    fake = {
        "xdl_ec": ast.parse("from xdl_ec.job import job\nif TYPE_CHECKING:\n    from xdl_ec.xdl import api\n"),
        "xdl_ec.job.job": ast.parse("def f():\n    from xdl_ec.xdl import api\n"),
        "xdl_ec.xdl.api": ast.parse(""),
        "xdl_ec.sparse.table": ast.parse("from xdl_ec import _core\n"),
    }
    assert _runs("xdl_ec.sparse.table", fake) == {
        "xdl_ec",
        "xdl_ec.sparse",
        "xdl_ec._core",
        "xdl_ec.job",
        "xdl_ec.job.job",
    }
    assert "xdl_ec.sparse.table runs xdl_ec.job.job" not in _upward_runs(fake)  # the root's runs: checked apart
    fake["xdl_ec"] = ast.parse("")
    fake["xdl_ec.sparse"] = ast.parse("from xdl_ec.job import job\n")
    assert "xdl_ec.sparse.table runs xdl_ec.job.job" in _upward_runs(fake)


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
