"""What reaper learns by parsing its own SQL (with pglast, PostgreSQL's own parser): the
indexes that ``indexes.sql`` declares, the tables a sweep's statement reads, and the columns
its predicate compares with a cutoff.

Nothing here talks to a database; :mod:`reaper.commands.checks`, :mod:`reaper.commands.indexes` and
:mod:`reaper.commands.status` ask these questions so that they work for any sweep, built in or
declared in a config file, without a list of tables written by hand.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from reaper import sqltext
from reaper.errors import ConfigError
from reaper.sqltext.names import TableName

PARAM = re.compile(r"%\((\w+)\)s")

# pglast (about 25 ms to import) is imported by the functions that parse: the built-in
# sweeps' analysis ships as data (reaper.sqltext.analysed), so that a run whose
# configuration declares no sweep and whose commands parse no index loads no parser, and
# IndexSpec alone loads nothing.


@dataclass(frozen=True)
class IndexSpec:
    """One index of ``indexes.sql``.

    Attributes:
        name: the index's name (unqualified; it lives in its table's schema).
        table: the table (an unqualified name in the file: of the schema asked for).
        unique: a UNIQUE index.
        statement: the ``CREATE INDEX`` statement, its table schema-qualified (plain, for
            tests and the demo).
        concurrent_statement: the same, ``CONCURRENTLY`` and ``IF NOT EXISTS``, for
            ``reaper indexes ensure``.
    """

    name: str
    table: TableName
    unique: bool
    statement: str
    concurrent_statement: str


def parse_index_statement(
    statement: str, schema: str = "public", *, instead_of: str | None = None
) -> IndexSpec:
    """Parse one ``CREATE INDEX`` statement; a table it names without a schema, or in schema
    ``instead_of``, is ``schema``'s.

    Raises:
        ConfigError: not a single named CREATE INDEX statement.
    """
    import pglast
    from pglast import ast
    from pglast.stream import RawStream

    try:
        stmts = pglast.parse_sql(statement)
    except pglast.parser.ParseError as exc:
        raise ConfigError(f"cannot parse index statement: {exc}") from None
    if len(stmts) != 1 or not isinstance(stmts[0].stmt, ast.IndexStmt):
        raise ConfigError(f"not a single CREATE INDEX statement: {statement[:80]!r}")
    node = stmts[0].stmt
    if not node.idxname:
        raise ConfigError(f"an index in indexes.sql has no name: {statement[:80]!r}")
    rel = node.relation
    assert rel is not None  # the grammar requires ON table
    if not rel.schemaname or rel.schemaname == instead_of:
        rel.schemaname = schema
    table = TableName(str(rel.schemaname), str(rel.relname))
    plain = RawStream()(node)
    node.concurrent = True
    node.if_not_exists = True
    concurrent = RawStream()(node)
    return IndexSpec(
        name=str(node.idxname),
        table=table,
        unique=bool(node.unique),
        statement=str(plain),
        concurrent_statement=str(concurrent),
    )


@functools.cache
def shipped_indexes(schema: str = "public") -> tuple[IndexSpec, ...]:
    """The indexes of ``sql/indexes.sql``, in file order, on the tables of ``schema`` (the
    file names those of the reference schema, ``public``)."""
    return tuple(
        parse_index_statement(s, schema, instead_of="public") for s in sqltext.body("indexes.sql")
    )


class PredicateSyntaxError(ValueError):
    """A predicate that PostgreSQL's parser does not read (the message is pglast's)."""


def parse_select(
    predicate: str, table: str = "t", *, unescape_percent: bool = True
) -> tuple[Any, list[str]]:
    """``predicate`` parsed by pglast as the WHERE clause of ``SELECT 1 FROM table``: the
    statement's node, and the names of its ``%(name)s`` placeholders in order of first use
    (each became ``$N``, N its place in that list); ``%%`` is read as ``%`` unless
    ``unescape_percent`` is false (text that is rendered back into a psycopg statement). The
    one place reaper reads its SQL text with pglast.

    Raises:
        PredicateSyntaxError: the text does not parse.
    """
    import pglast

    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    # The table quoted part by part, as the batch statements quote it (psycopg.sql.Identifier).
    quoted = ".".join('"' + part.replace('"', '""') + '"' for part in table.split(".", 1))
    where = PARAM.sub(number, predicate)
    if unescape_percent:
        where = where.replace("%%", "%")
    try:
        return pglast.parse_sql(f"SELECT 1 FROM {quoted} WHERE ({where})")[0].stmt, names
    except pglast.parser.ParseError as exc:
        raise PredicateSyntaxError(str(exc)) from None


def _parse_predicate(table: TableName, predicate: str) -> Any:
    try:
        select, _ = parse_select(predicate, table.qualified, unescape_percent=False)
    except PredicateSyntaxError as exc:
        raise ConfigError(f"cannot parse the predicate on {table}: {exc}") from None
    return select


def _walk(node: Any, *, into_sublinks: bool = True) -> Iterator[Any]:
    from pglast import ast

    if isinstance(node, tuple | list):
        for item in node:
            yield from _walk(item, into_sublinks=into_sublinks)
        return
    if not isinstance(node, ast.Node):
        return
    yield node
    if isinstance(node, ast.SubLink) and not into_sublinks:
        return
    for name in node:
        yield from _walk(getattr(node, name), into_sublinks=into_sublinks)


def deeper_than(node: Any, limit: int) -> bool:
    """Whether the parse tree under ``node`` nests more than ``limit`` nodes deep: read by a
    loop, so a tree of any depth is measured without recursion."""
    from pglast import ast

    stack: list[tuple[Any, int]] = [(node, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, tuple | list):
            stack.extend((child, depth) for child in item)
        elif isinstance(item, ast.Node):
            if depth > limit:
                return True
            stack.extend((getattr(item, name), depth + 1) for name in item)
    return False


def tables_read(table: TableName, predicate: str) -> tuple[TableName, ...]:
    """Every table the statement ``SELECT ... FROM table WHERE predicate`` reads: ``table``
    first, then those of the predicate's subqueries, without repeats.

    Raises:
        ConfigError: the predicate does not parse, or names a table without its schema
            (the session's search_path is ``pg_catalog``: no table is found by it).
    """
    from pglast import ast

    out = [table]
    select = _parse_predicate(table, predicate)
    for node in _walk(select.whereClause):
        if isinstance(node, ast.RangeVar):
            if not node.schemaname:
                raise ConfigError(
                    f"the predicate on {table} reads table {node.relname} without its schema; "
                    f"write {{schema}}.{node.relname} (the swept table's schema) or schema.name"
                )
            name = TableName(str(node.schemaname), str(node.relname))
            if name not in out:
                out.append(name)
    return tuple(out)


def cutoff_expressions(table: TableName, predicate: str) -> tuple[str, ...]:
    """The expressions over the swept table that the predicate compares with a cutoff
    (``expr < %(cutoff)s`` or ``%(cutoff)s > expr``: a column, or an expression such as
    ``CASE WHEN token_type = 'worker' THEN updated_at END``), as SQL text, in order, without
    repeats; subqueries (other tables) are not looked into. The oldest eligible row is the
    least of these.

    Raises:
        ConfigError: the predicate does not parse.
    """
    from pglast import ast
    from pglast.enums import A_Expr_Kind
    from pglast.stream import RawStream

    select = _parse_predicate(table, predicate)
    out: list[str] = []
    for node in _walk(select.whereClause, into_sublinks=False):
        if not isinstance(node, ast.A_Expr) or node.kind != A_Expr_Kind.AEXPR_OP:
            continue
        op = node.name[-1].sval if node.name else ""
        left, right = node.lexpr, node.rexpr
        expr: Any = None
        if op in ("<", "<=") and isinstance(right, ast.ParamRef):
            expr = left
        elif op in (">", ">=") and isinstance(left, ast.ParamRef):
            expr = right
        if expr is None or any(isinstance(n, ast.ParamRef | ast.SubLink) for n in _walk(expr)):
            continue
        text = str(RawStream()(expr))
        if text not in out:
            out.append(text)
    return tuple(out)


def columns_used(table: TableName, predicate: str) -> tuple[str, ...]:
    """The swept table's columns that the predicate names outside its subqueries (unqualified,
    or qualified by the table's name), in order, without repeats.

    Raises:
        ConfigError: the predicate does not parse.
    """
    from pglast import ast

    relname = table.name
    select = _parse_predicate(table, predicate)
    out: list[str] = []
    for node in _walk(select.whereClause, into_sublinks=False):
        if not isinstance(node, ast.ColumnRef):
            continue
        parts = [str(f.sval) for f in node.fields or () if isinstance(f, ast.String)]
        if not parts or (len(parts) > 1 and parts[-2] != relname):
            continue
        if parts[-1] not in out:
            out.append(parts[-1])
    return tuple(out)
