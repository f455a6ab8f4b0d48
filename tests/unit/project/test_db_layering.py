"""reaper/db/ imports nothing of the domain: only the bottom (errors, vocab, log), the SQL
files' loader (reaper.sqltext, whose predicate checker the catalog still calls) and itself."""

from __future__ import annotations

import ast
from pathlib import Path

import reaper.db

ALLOWED = ("reaper.errors", "reaper.vocab", "reaper.log", "reaper.sqltext", "reaper.db")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            names |= {base} if base != "reaper" else {f"reaper.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return {n for n in names if n == "reaper" or n.startswith("reaper.")}


def test_db_imports_nothing_of_the_domain() -> None:
    package = Path(reaper.db.__file__).parent
    offending = {
        f"{path.name}: {name}"
        for path in sorted(package.glob("*.py"))
        for name in _imports(path)
        if not any(name == a or name.startswith(a + ".") for a in ALLOWED)
    }
    assert not offending, sorted(offending)
