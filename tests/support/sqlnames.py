"""The SQL that a person runs with reaper's files or docs, and the names it resolves.

Each script reaper ships for a person to run (``sql/grants.sql``, ``sql/schema.sql``,
``sql/indexes.sql``, ``examples/*.sql``) and each statement the docs show (a ``sql`` block,
an indented or inline statement, the argument of ``psql -c``), read with pglast, PostgreSQL's
own parser: which functions, operators, types and tables it names, with or without a schema
(the bodies of its ``DO`` blocks included). What it names without a schema is found through
the caller's ``search_path``: tests/unit/project/test_sql_files.py requires each such script
to pin that path first, and tests/db/project/test_sql_files.py plants a copy of every
function and operator it names, in ``public`` and in the caller's own schema.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pglast
from pglast import ast
from pglast.enums import A_Expr_Kind, ObjectType, TransactionStmtKind

ROOT = Path(__file__).resolve().parents[2]
# The scripts a person runs (the tests' own loaders run them too).
SCRIPTS = ("sql/grants.sql", "sql/schema.sql", "sql/indexes.sql", "examples/token-table.sql")
# Where statements are shown to a person.
PAGES = ("README.md", "docs/**/*.md", "deploy/**/*.md")
# What an inline code span that is a statement starts with.
_STATEMENT = re.compile(
    r"^(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|GRANT|REVOKE|SET|RESET|COMMIT|ROLLBACK|"
    r"BEGIN|VACUUM|ANALYZE|REINDEX|TRUNCATE|COPY|DO|WITH|EXPLAIN|CALL|COMMENT)\b",
    re.IGNORECASE,
)
# The operators a construct calls by name: BETWEEN compares with >= and <=.
_BETWEEN = (">=", "<=")


@dataclass(frozen=True)
class Snippet:
    """SQL a person is told to run: where it is shown, and its text."""

    where: str
    text: str


@dataclass
class Names:
    """What a snippet names: ``(schema or None, name)``; functions with their argument
    count."""

    functions: set[tuple[str | None, str, int]] = field(default_factory=set)
    operators: set[tuple[str | None, str]] = field(default_factory=set)
    types: set[tuple[str | None, str]] = field(default_factory=set)
    relations: set[tuple[str | None, str]] = field(default_factory=set)

    def through_the_path(self) -> list[str]:
        """Each name found through the caller's search_path (no schema given)."""
        return sorted(
            [f"function {n}()" for s, n, _ in self.functions if s is None]
            + [f"operator {n}" for s, n in self.operators if s is None]
            + [f"type {n}" for s, n in self.types if s is None]
            + [f"table {n}" for s, n in self.relations if s is None]
        )


def scripts() -> list[Snippet]:
    return [Snippet(name, (ROOT / name).read_text("utf-8")) for name in SCRIPTS]


def page_snippets(text: str, where: str = "") -> list[Snippet]:
    """Every statement ``text`` (Markdown) shows: ``sql`` blocks whole, indented blocks and
    inline code spans that parse as SQL, and the argument of each ``psql -c``."""
    out: list[Snippet] = []
    fence: str | None = None
    block: list[str] = []
    indented: list[str] = []
    prose: list[str] = []

    def flush_indented() -> None:
        # An indented block may hold several commands, a blank line apart.
        for part in re.split(r"\n\s*\n", "\n".join(indented)):
            if part.strip():
                out.extend(_code(where, part))
        indented.clear()

    blank = True
    for line in text.splitlines():
        if fence is not None:
            if line.lstrip().startswith("```"):
                body = "\n".join(block)
                out.extend(
                    [Snippet(where, body)]
                    if fence in ("sql", "postgresql")
                    else _shell(where, body)
                )
                fence, block = None, []
            else:
                block.append(line)
            continue
        if line.lstrip().startswith("```"):
            flush_indented()
            fence = line.lstrip()[3:].strip().lower()
            continue
        if line.startswith("    ") and (blank or indented) and line.strip():
            indented.append(line[4:])
        elif indented and not line.strip():
            indented.append("")
        elif line.strip() or not indented:
            flush_indented()
            prose.append(line)
        blank = not line.strip()
    flush_indented()
    for span in re.findall(r"`([^`\n]+)`", "\n".join(prose)):
        out.extend(_code(where, span, inline=True))
    return out


def _code(where: str, text: str, inline: bool = False) -> list[Snippet]:
    """``text`` as SQL if it parses as such, else the ``psql -c`` arguments in it."""
    if not inline or _STATEMENT.match(text.strip()):
        try:
            if pglast.parse_sql(text):
                return [Snippet(where, text)]
        except pglast.parser.ParseError:
            pass
    return _shell(where, text)


def _shell(where: str, text: str) -> list[Snippet]:
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        if "psql" not in line:
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        out += [Snippet(where, w) for a, w in itertools.pairwise(words) if a == "-c"]
    return [s for s in out if not s.text.startswith("\\")]  # a psql meta-command


def pages() -> list[Snippet]:
    out = []
    for pattern in PAGES:
        for path in sorted(ROOT.glob(pattern)):
            where = str(path.relative_to(ROOT))
            out.extend(page_snippets(path.read_text("utf-8"), where))
    return out


def names(text: str) -> Names:
    """What ``text`` (one or more statements) names, its DO blocks' bodies included."""
    found = Names()
    for node in _walk(pglast.parse_sql(text)):
        _note(node, found)
    return found


def pins_first(text: str) -> bool:
    """Whether ``text`` opens by pinning its search_path to pg_catalog alone: BEGIN, then
    SET LOCAL search_path = pg_catalog, pg_temp (or pg_catalog.set_config of the same)."""
    stmts = [s.stmt for s in pglast.parse_sql(text)]
    if (
        len(stmts) >= 2
        and isinstance(stmts[0], ast.TransactionStmt)
        and stmts[0].kind
        in (TransactionStmtKind.TRANS_STMT_BEGIN, TransactionStmtKind.TRANS_STMT_START)
        and isinstance(stmts[1], ast.VariableSetStmt)
        and stmts[1].name == "search_path"
        and stmts[1].is_local
    ):
        values = [a.val.sval for a in stmts[1].args or () if isinstance(a, ast.A_Const)]
        return values in (["pg_catalog", "pg_temp"], ["pg_catalog"])
    if stmts and isinstance(stmts[0], ast.SelectStmt):
        calls = [n for n in _walk(stmts[:1]) if isinstance(n, ast.FuncCall)]
        if len(calls) == 1 and _qualified(calls[0].funcname) == ("pg_catalog", "set_config"):
            args = [a.val.sval for a in calls[0].args or () if isinstance(a, ast.A_Const)]
            return args[:2] in (
                ["search_path", "pg_catalog, pg_temp"],
                ["search_path", "pg_catalog"],
            )
    return False


def _qualified(parts: Any) -> tuple[str | None, str]:
    values = [p.sval for p in parts]
    return (values[-2] if len(values) > 1 else None), values[-1]


def _walk(root: Any) -> Iterator[ast.Node]:
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, (list, tuple)):
            stack.extend(node)
        elif isinstance(node, ast.Node):
            yield node
            stack.extend(getattr(node, attr, None) for attr in node.__slots__)
            if isinstance(node, ast.DoStmt):
                stack.extend(_plpgsql(node))


def _plpgsql(node: ast.DoStmt) -> list[ast.Node]:
    """The statements and expressions of a DO block's body, parsed."""
    body = next(str(a.arg.sval) for a in node.args if a.defname == "as")
    tree = pglast.parse_plpgsql(
        f"CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $reaper_body${body}$reaper_body$"
    )
    out: list[ast.Node] = []
    for query, mode in _expressions(tree):
        if mode == 0:
            out.extend(pglast.parse_sql(query))
        else:  # an expression, or an assignment's "target := expression"
            out.extend(pglast.parse_sql("SELECT " + query.split(":=", 1)[-1]))
    # A variable's declared type is found through the path too.
    out.extend(
        pglast.parse_sql(f"SELECT NULL::{t}")
        for t in re.findall(r'"typname": "([^"]+)"', json.dumps(tree))
        if t not in ("UNKNOWN",)
    )
    return out


def _expressions(tree: Any) -> Iterator[tuple[str, int]]:
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            expr = node.get("PLpgSQL_expr")
            if isinstance(expr, dict) and "query" in expr:
                yield expr["query"], int(expr.get("parseMode", 0))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _note(node: ast.Node, found: Names) -> None:
    if isinstance(node, ast.FuncCall):
        schema, name = _qualified(node.funcname)
        found.functions.add((schema, name, len(node.args or ())))
    elif isinstance(node, ast.ObjectWithArgs) and node.objname:
        schema, name = _qualified(node.objname)
        found.functions.add((schema, name, len(node.objargs or ())))
    elif isinstance(node, ast.A_Expr) and node.name:
        schema, name = _qualified(node.name)
        if node.kind in (
            A_Expr_Kind.AEXPR_BETWEEN,
            A_Expr_Kind.AEXPR_NOT_BETWEEN,
            A_Expr_Kind.AEXPR_BETWEEN_SYM,
            A_Expr_Kind.AEXPR_NOT_BETWEEN_SYM,
        ):
            found.operators.update((schema, op) for op in _BETWEEN)
        else:
            found.operators.add((schema, name))
    elif isinstance(node, ast.SubLink) and node.operName:
        found.operators.add(_qualified(node.operName))
    elif isinstance(node, ast.CaseExpr) and node.arg is not None:
        found.operators.add((None, "="))  # CASE x WHEN v compares with =
    elif isinstance(node, ast.TypeName) and node.names:
        found.types.add(_qualified(node.names))
    elif isinstance(node, ast.RangeVar):
        found.relations.add((node.schemaname or None, node.relname))
    elif isinstance(node, ast.DropStmt) and node.removeType in _RELATIONS:
        found.relations.update(_qualified(obj) for obj in node.objects or ())


# What DROP names as a relation.
_RELATIONS = (
    ObjectType.OBJECT_TABLE,
    ObjectType.OBJECT_INDEX,
    ObjectType.OBJECT_VIEW,
    ObjectType.OBJECT_MATVIEW,
    ObjectType.OBJECT_SEQUENCE,
    ObjectType.OBJECT_FOREIGN_TABLE,
)
