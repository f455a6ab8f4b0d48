"""What every start of ``reaper`` imports, read from the source: the command line's module
body, and the module bodies of the reaper modules it imports there, reach none of the heavy
packages (the database driver, the SQL parser, rich, the metrics client, the scheduler,
structlog). Each command imports those itself, so ``reaper --version`` and a usage error pay
for none of them. tests/process/commands/test_startup.py checks the same in a fresh
interpreter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import reaper

ROOT = Path(reaper.__file__).parent
HEAVY = {
    "pglast",
    "rich",
    "psycopg",
    "psycopg_pool",
    "prometheus_client",
    "apscheduler",
    "structlog",
}


def _path(module: str) -> Path | None:
    """The source of reaper module ``module`` (None: not one of reaper's)."""
    parts = module.split(".")[1:]
    module_file = ROOT.joinpath(*parts).with_suffix(".py")
    for candidate in (module_file, ROOT.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _executed_imports(body: list[ast.stmt]) -> set[str]:
    """The modules that the statements run at import time import: the module body, its
    class bodies and branches, not its functions nor an ``if TYPE_CHECKING:`` block."""
    out: set[str] = set()
    for node in body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.If):
            if not _type_checking(node.test):
                out |= _executed_imports(node.body)
            out |= _executed_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                out |= _executed_imports(part)
        elif isinstance(node, ast.ClassDef | ast.With):
            out |= _executed_imports(node.body)
    return out


def _reached(start: str) -> dict[str, list[str]]:
    """Every module imported when ``start`` is, through reaper's module bodies: module -> the
    chain of imports that reaches it."""
    chains: dict[str, list[str]] = {start: [start]}
    todo = [start]
    while todo:
        module = todo.pop()
        path = _path(module)
        if path is None:
            continue
        names = _executed_imports(ast.parse(path.read_text("utf-8")).body)
        # Importing a.b.c runs the bodies of a and a.b first.
        parents = {".".join(n.split(".")[:i]) for n in names for i in range(1, n.count(".") + 1)}
        for name in sorted(names | parents):
            if name not in chains:
                chains[name] = [*chains[module], name]
                todo.append(name)
    return chains


def test_the_command_line_imports_no_heavy_package_at_start() -> None:
    heavy = {
        name: " -> ".join(chain)
        for name, chain in _reached("reaper.cli").items()
        if name.split(".")[0] in HEAVY
    }
    assert heavy == {}


def test_the_reading_sees_an_import_in_a_module_body() -> None:
    # The reading itself: the engine does import the driver at start, through reaper.db.
    reached = _reached("reaper.engine.run")
    assert "psycopg" in reached
    assert reached["structlog"][:2] == ["reaper.engine.run", "structlog"]


def test_the_reading_skips_functions_and_type_checking_blocks() -> None:
    body = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "if TYPE_CHECKING:\n    import rich\n"
        "def f():\n    import pglast\n"
        "class C:\n    import psycopg\n"
        "try:\n    import structlog\nexcept ImportError:\n    pass\n"
    ).body
    assert _executed_imports(body) == {
        "typing",
        "typing.TYPE_CHECKING",
        "json",
        "psycopg",
        "structlog",
    }


@pytest.mark.parametrize(
    ("start", "kept_out"),
    [
        # Loading the configuration: the built-in sweeps' analysis ships as data.
        ("reaper.config.load", {"pglast", "rich"}),
        # A run: the engine and its partition proofs parse no SQL text of a built-in; the
        # metrics client is loaded by the Metrics a run is given, if any.
        ("reaper.engine.run", {"pglast", "rich", "prometheus_client"}),
        ("reaper.metrics", {"prometheus_client"}),
        ("reaper.sqltext.sqlinfo", {"pglast"}),
        # Its progress: bars are drawn on a terminal only.
        ("reaper.commands.progress", {"pglast", "rich"}),
        # Logging: structlog is loaded when configured, never by the module.
        ("reaper.log", {"structlog", "rich"}),
    ],
)
def test_what_a_run_loads_leaves_the_parser_rich_and_metrics_to_who_uses_them(
    start: str, kept_out: set[str]
) -> None:
    reached = {
        name: " -> ".join(chain)
        for name, chain in _reached(start).items()
        if name.split(".")[0] in kept_out
    }
    assert reached == {}
