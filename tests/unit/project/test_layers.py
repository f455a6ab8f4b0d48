"""The package's layers, read from the source: imports point down only, and no two modules
import each other, directly or through others (docs/architecture.md draws the layers)."""

from __future__ import annotations

import ast
from pathlib import Path

import reaper

ROOT = Path(reaper.__file__).parent
# Lower imports nothing higher. dev (the demo and the tests' server) sits beside commands.
LAYERS = {
    "errors": 0,
    "vocab": 0,
    "log": 0,
    "": 0,
    "sqltext": 1,
    "db": 2,
    "config": 3,
    "metrics": 4,
    "engine": 5,
    "commands": 6,
    "dev": 6,
    "daemon": 7,
    "cli": 8,
    "__main__": 9,
}


def _modules() -> dict[str, set[str]]:
    """Module -> the reaper modules it imports (anywhere in its body)."""
    names = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(("reaper", *parts)).removesuffix(".__init__")] = path
    out: dict[str, set[str]] = {}
    for mod, path in names.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("reaper"):
                base = str(node.module)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    imported.add(full if full in names else base)
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name.startswith("reaper")}
        out[mod] = {m for m in imported if m in names and m != mod}
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_imports_point_down_only() -> None:
    upward = sorted(
        (mod, dep)
        for mod, deps in _modules().items()
        for dep in deps
        if LAYERS[_layer(dep)] > LAYERS[_layer(mod)]
    )
    assert upward == []


def test_every_package_has_a_layer() -> None:
    assert {_layer(m) for m in _modules()} <= set(LAYERS)


def test_no_import_cycles() -> None:
    graph = _modules()
    # A package's __init__ that only documents it imports nothing; a module importing its own
    # package's __init__ (reaper.sqltext, the SQL loader) is an ordinary edge.
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod)
    assert cycles == []


def test_the_engine_takes_its_options_not_the_settings() -> None:
    """The engine reads :class:`reaper.config.engine.EngineOptions`, built once from the
    settings outside it: no engine module imports the settings module."""
    offenders = sorted(
        mod
        for mod, deps in _modules().items()
        if mod.startswith("reaper.engine") and "reaper.config.settings" in deps
    )
    assert offenders == []
    assert "reaper.config.engine" in _modules()["reaper.engine.context"]
