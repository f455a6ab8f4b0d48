"""Checking a declared sweep's predicate before it ever reaches the database.

A predicate from a config file is SQL that reaper composes into its batch statements
(``... WHERE (<predicate>) ...``). Before that, it is parsed with pglast (PostgreSQL's own
parser, libpg_query) and must be one boolean expression over the sweep's table:

- one expression: no ``;``, no second statement, no comment (a ``--`` could swallow the
  closing parenthesis reaper puts after it), parentheses balanced inside the predicate itself
  (so ``x) OR (y`` cannot reach outside the ``(...)`` that reaper wraps it in);
- read-only: no INSERT/UPDATE/DELETE/MERGE anywhere (a data-modifying CTE in a subquery), no
  ``SELECT ... FOR UPDATE`` or ``SELECT INTO`` in a subquery, no function on
  :data:`DENIED_FUNCTIONS` or starting with one of :data:`DENIED_FUNCTION_PREFIXES`;
- parameters: only ``%(name)s`` with a declared cutoff name, each declared cutoff used, ``%%``
  for a literal ``%`` (psycopg's rule), no positional ``%s`` or ``$1``;
- over the table: a qualified column outside a subquery names the sweep's table.

What the parser cannot know (that a column exists, that the expression is boolean, what a
user-defined function does) the database tells on the first dry run or ``reaper check``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Set

from pglast import ast, enums, parse_sql, parser

# Functions with side effects (or that sleep, signal, read files, or run SQL text), denied in
# a predicate whatever their schema. Sources: PostgreSQL 16 docs, "System Administration
# Functions", "Sequence Manipulation Functions", "Advisory Lock Functions", "XML functions"
# (query_to_xml and friends run the SQL text they are given), and the contrib modules dblink,
# adminpack, pg_prewarm, pg_stat_statements and pg_visibility. A deny list is best effort: a
# user-defined function can do anything, and the privileges of the role reaper runs as are
# the real boundary.
DENIED_FUNCTIONS = frozenset(
    {
        "pg_sleep",
        "pg_sleep_for",
        "pg_sleep_until",
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "pg_promote",
        "pg_switch_wal",
        "pg_create_restore_point",
        "pg_log_backend_memory_contexts",
        "pg_notify",
        "pg_logical_emit_message",
        "pg_import_system_collations",
        "pg_current_xact_id",
        "set_config",
        "nextval",
        "setval",
        "query_to_xml",
        # Text search functions that take a query as text and run it.
        "ts_stat",
        "ts_rewrite",
        "query_to_xmlschema",
        "query_to_xml_and_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "table_to_xml",
        "table_to_xml_and_xmlschema",
        "schema_to_xml",
        "schema_to_xml_and_xmlschema",
        "database_to_xml",
        "database_to_xml_and_xmlschema",
        "pg_read_file",
        "pg_read_binary_file",
        "pg_ls_dir",
        "pg_stat_file",
        "pg_file_write",
        "pg_file_rename",
        "pg_file_unlink",
        "pg_file_sync",
        "pg_export_snapshot",
        "pg_prewarm",
        "pg_stat_statements_reset",
        "pg_truncate_visibility_map",
    }
)
DENIED_FUNCTION_PREFIXES = (
    "dblink",
    "lo_",
    "pg_advisory",
    "pg_try_advisory",
    "txid_",
    "pg_backup_",
    "pg_start_backup",
    "pg_stop_backup",
    "pg_create_",
    "pg_drop_replication_slot",
    "pg_replication_origin_",
    "pg_replication_slot_advance",
    "pg_logical_slot_",
    "pg_stat_reset",
    "pg_ls_",
    "pg_wal_replay_",
)

# psycopg's placeholder grammar: "%%", "%(name)s", "%s", or "%" then anything.
_PLACEHOLDER = re.compile(r"%(?:%|\(([^)]*)\)(.)?|(.)|$)", re.DOTALL)
_WRITES = (ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt, ast.MergeStmt)
# Raw-parse nodes that can never be a boolean: a predicate that is one of these is a typo.
_NOT_BOOLEAN = (ast.A_ArrayExpr, ast.RowExpr, ast.A_Indirection, ast.CollateClause)


class PredicateError(ValueError):
    """The predicate is not one read-only boolean expression over the table."""


def placeholders(predicate: str) -> tuple[str, list[str], int]:
    """``(text, names, uses)``: the predicate with each ``%(name)s`` replaced by ``$N`` and
    each ``%%`` by ``%`` (what the server sees), the names in order of first use, and how
    many placeholders there are.

    Raises:
        PredicateError: a positional ``%s``, a lone ``%``, or a format other than ``s``.
    """
    names: list[str] = []
    out: list[str] = []
    pos = uses = 0
    for m in _PLACEHOLDER.finditer(predicate):
        out.append(predicate[pos : m.start()])
        pos = m.end()
        whole, name, fmt, other = m.group(0), m.group(1), m.group(2), m.group(3)
        if whole == "%%":
            out.append("%")
        elif name is not None and fmt == "s" and name:
            if name not in names:
                names.append(name)
            uses += 1
            out.append(f"${names.index(name) + 1}")
        elif name is not None:
            raise PredicateError(f"{whole!r} is not a parameter; write %({name})s")
        elif other == "s":
            raise PredicateError(
                "positional parameter %s is not allowed; name the cutoff, e.g. %(cutoff)s"
            )
        else:
            raise PredicateError(
                f"a lone % at character {m.start() + 1}; write %% for a literal % "
                "(e.g. LIKE 'w-%%')"
            )
    out.append(predicate[pos:])
    return "".join(out), names, uses


def check(predicate: str, table: str, cutoffs: Set[str]) -> None:
    """Accept ``predicate`` as the eligibility predicate of a sweep over ``table`` whose
    cutoffs are the named parameters ``cutoffs``, or say in one line why not.

    Args:
        predicate: SQL boolean expression, parameters as ``%(name)s``.
        table: ``name`` or ``schema.name``.
        cutoffs: the parameter names the sweep's retentions provide.

    Raises:
        PredicateError: one line, without the predicate's text repeated in full.
    """
    if not predicate.strip():
        raise PredicateError("is empty; write a boolean SQL expression over the table")
    text, names, uses = placeholders(predicate)
    unknown = [n for n in names if n not in cutoffs]
    if unknown:
        raise PredicateError(
            f"uses parameter %({unknown[0]})s, which no retention declares; declared: "
            + (", ".join(f"%({c})s" for c in sorted(cutoffs)) or "none")
        )
    unused = sorted(set(cutoffs) - set(names))
    if unused:
        raise PredicateError(
            f"does not use the cutoff %({unused[0]})s; compare a timestamp column with it "
            "or remove that retention"
        )
    _check_tokens(text, uses)
    # Each line break keeps a trailing construct from touching the wrapper (comments are
    # already refused; this is belt and braces).
    wrapped_prefix = "SELECT FROM t WHERE (\n"
    try:
        statements = parse_sql(wrapped_prefix + text + "\n)")
    except parser.ParseError as exc:
        message = str(exc.args[0]) if exc.args else str(exc)
        raise PredicateError(f"is not valid SQL: {message}") from None
    if len(statements) != 1 or not isinstance(statements[0].stmt, ast.SelectStmt):
        raise PredicateError("must be one boolean expression, not a statement")
    stmt = statements[0].stmt
    extra = [
        slot
        for slot in ("groupClause", "havingClause", "sortClause", "limitCount", "limitOffset",
                     "lockingClause", "windowClause", "withClause", "intoClause")
        if getattr(stmt, slot, None)
    ]
    if extra or stmt.op != enums.SetOperation.SETOP_NONE or stmt.whereClause is None:
        raise PredicateError("must be one boolean expression (no clauses after it)")
    where = stmt.whereClause
    if isinstance(where, _NOT_BOOLEAN) or (
        isinstance(where, ast.A_Const) and not isinstance(where.val, ast.Boolean)
    ):
        raise PredicateError("is not a boolean expression (a constant, array or row)")
    _check_nodes(where, table)


def _check_tokens(text: str, params: int) -> None:
    try:
        tokens = parser.scan(text)
    except parser.ParseError as exc:
        message = str(exc.args[0]) if exc.args else str(exc)
        raise PredicateError(f"is not valid SQL: {message}") from None
    depth = 0
    seen_params = 0
    for i, tok in enumerate(tokens):
        if tok.name in ("SQL_COMMENT", "C_COMMENT"):
            raise PredicateError("contains a comment (-- or /* */); remove it")
        if tok.name == "ASCII_59":
            if any(t.name != "ASCII_59" for t in tokens[i + 1 :]):
                raise PredicateError(
                    "contains a second statement after ';'; a predicate is one expression"
                )
            raise PredicateError("ends with a semicolon; remove it (a predicate is no statement)")
        if tok.name == "PARAM":
            seen_params += 1
        elif tok.name == "ASCII_40":
            depth += 1
        elif tok.name == "ASCII_41":
            depth -= 1
            if depth < 0:
                raise PredicateError("closes a parenthesis it did not open")
    if depth:
        raise PredicateError("leaves a parenthesis open")
    # Every PARAM token should be one that placeholders() made; a user's own $1 is one more.
    if seen_params != params:
        raise PredicateError(
            "uses a positional parameter ($1); name the cutoff instead, e.g. %(cutoff)s"
        )


def _children(node: ast.Node) -> Iterator[object]:
    for slot in getattr(type(node), "__slots__", ()):
        yield getattr(node, slot, None)


def _walk(value: object, in_subquery: bool) -> Iterator[tuple[ast.Node, bool]]:
    if isinstance(value, list | tuple):
        for item in value:
            yield from _walk(item, in_subquery)
    elif isinstance(value, ast.Node):
        yield value, in_subquery
        inner = in_subquery or isinstance(value, ast.SelectStmt)
        for child in _children(value):
            yield from _walk(child, inner)


def _function_name(node: ast.FuncCall) -> str:
    parts = [getattr(p, "sval", "") for p in node.funcname or ()]
    return str(parts[-1]).lower() if parts else ""


def _denied(name: str) -> bool:
    return name in DENIED_FUNCTIONS or name.startswith(DENIED_FUNCTION_PREFIXES)


def _check_nodes(where: ast.Node, table: str) -> None:
    table_names = {table.lower(), table.rsplit(".", 1)[-1].lower()}
    for node, in_subquery in _walk(where, False):
        if isinstance(node, _WRITES):
            kind = type(node).__name__.removesuffix("Stmt").upper()
            raise PredicateError(
                f"contains {kind} (a data-modifying subquery or CTE); a predicate only reads"
            )
        if isinstance(node, ast.SelectStmt) and (node.lockingClause or node.intoClause):
            raise PredicateError("contains SELECT ... FOR UPDATE/SHARE or INTO; remove it")
        if isinstance(node, ast.FuncCall) and _denied(_function_name(node)):
            raise PredicateError(
                f"calls {_function_name(node)}(), which has side effects; reaper refuses it"
            )
        if isinstance(node, ast.ColumnRef) and not in_subquery:
            fields = [getattr(f, "sval", None) for f in node.fields or ()]
            if len(fields) >= 2 and all(isinstance(f, str) for f in fields[:-1]):
                qualifier = ".".join(str(f) for f in fields[:-1]).lower()
                if qualifier not in table_names:
                    raise PredicateError(
                        f"names column {'.'.join(str(f) for f in fields)} of another "
                        f"table; outside a subquery, columns belong to {table}"
                    )
