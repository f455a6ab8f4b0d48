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

- bounded by a cutoff (:func:`check_bounded`): every row it can match is older than a
  cutoff. Every branch of a top-level OR (ORs nest) holds, as an AND-ed conjunct, a
  comparison ``<expression over the table's columns> < %(NAME)s`` (or ``<=``, or the mirrored
  ``%(NAME)s > expression``) whose parameter side is a bare cutoff parameter and whose other
  side is a bare column of the table, or coalesce/greatest/least of such forms, or
  ``CASE WHEN condition THEN form END`` without ELSE (no constant, arithmetic, cast or
  function: each could move a row's age to anything). A cutoff parameter
  appears nowhere else: not under NOT, IS, CASE, COALESCE or a function, not in arithmetic.

What the parser cannot know (what a function or operator name resolves to) is asked of the
server's catalog (:func:`verify`): only built-in (``pg_catalog``, created by initdb),
immutable or stable functions and operators that are not SECURITY DEFINER may appear, casts
only to built-in types, no cast with a user function between types a built-in value can
take, columns (read anywhere, subqueries included) only of built-in types that are not
domains, subqueries only over tables. Statements are composed only from a
:class:`CheckedPredicate`, which only :func:`verify` builds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence, Set
from dataclasses import dataclass, field
from typing import Protocol

from pglast import ast, enums, parse_sql, parser
from pglast.stream import RawStream

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


def check(
    predicate: str, table: str, cutoffs: Set[str], *, bounded: bool = True
) -> None:
    """Accept ``predicate`` as the eligibility predicate of a sweep over ``table`` whose
    cutoffs are the named parameters ``cutoffs``, or say in one line why not.

    Args:
        predicate: SQL boolean expression, parameters as ``%(name)s``.
        table: ``name`` or ``schema.name``.
        cutoffs: the parameter names the sweep's retentions provide.
        bounded: also require every row it matches to be bounded by a cutoff
            (:func:`check_bounded`); False only for a ``since`` expression, which is
            evaluated on rows the predicate already chose.

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
    if bounded:
        check_bounded(where, table, names)


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


# -- bounded by a cutoff ---------------------------------------------------------------------

_LESS = ("<", "<=")
_GREATER = (">", ">=")
_PART_CHARS = 80


def _sql(node: ast.Node, names: Sequence[str]) -> str:
    """``node`` as SQL text, ``$N`` back to ``%(name)s``, cut to one short line."""
    try:
        text = str(RawStream()(node))
    except Exception:  # pglast cannot print every raw node alone; the kind still helps
        text = type(node).__name__
    text = re.sub(
        r"\$(\d+)",
        lambda m: f"%({names[int(m.group(1)) - 1]})s" if int(m.group(1)) <= len(names)
        else m.group(0),
        text,
    )
    text = " ".join(text.split())
    return text if len(text) <= _PART_CHARS else text[: _PART_CHARS - 3] + "..."


def _nodes(value: object, *, into_sublinks: bool = True) -> Iterator[ast.Node]:
    for node, in_subquery in _walk(value, False):
        if in_subquery and not into_sublinks:
            continue
        yield node


def _has(value: object, kinds: type | tuple[type, ...]) -> bool:
    return any(isinstance(n, kinds) for n in _nodes(value))


def _names_a_column(expr: ast.Node, table: str) -> bool:
    table_names = {table.lower(), table.rsplit(".", 1)[-1].lower()}
    for node, in_subquery in _walk(expr, False):
        if in_subquery or not isinstance(node, ast.ColumnRef):
            continue
        fields = [getattr(f, "sval", None) for f in node.fields or ()]
        if not fields or not isinstance(fields[-1], str):
            continue
        if len(fields) == 1 or ".".join(str(f) for f in fields[:-1]).lower() in table_names:
            return True
    return False


def _comparison(node: ast.Node) -> tuple[ast.Node, ast.Node] | None:
    """``(column side, parameter side)`` of ``a < b`` / ``a <= b`` / ``a > b`` / ``a >= b``
    written with the bare operator (not OPERATOR(schema.op)), oriented so the parameter side
    is the later one; None for anything else."""
    if not isinstance(node, ast.A_Expr) or node.kind != enums.A_Expr_Kind.AEXPR_OP:
        return None
    if not node.name or len(node.name) != 1 or node.lexpr is None or node.rexpr is None:
        return None
    op = getattr(node.name[0], "sval", "")
    left, right = node.lexpr, node.rexpr
    if not isinstance(left, ast.Node) or not isinstance(right, ast.Node):
        return None
    if op in _LESS:
        return left, right
    if op in _GREATER:
        return right, left
    return None


def _bounding(node: ast.Node, table: str, names: Sequence[str]) -> bool:
    """True for ``expr < %(cutoff)s`` (or its mirror) with a bare parameter and an expression
    over the table's columns; raises for a comparison with a cutoff that is almost that."""
    pair = _comparison(node)
    if pair is None:
        return False
    column_side, param_side = pair
    if not isinstance(param_side, ast.ParamRef):
        if _has(param_side, ast.ParamRef):
            raise PredicateError(
                f"wraps a cutoff in an expression in `{_sql(node, names)}`; compare with the "
                "bare parameter, e.g. created_at < %(cutoff)s (change the retention instead)"
            )
        return False
    if _has(column_side, ast.ParamRef):
        raise PredicateError(
            f"has a cutoff on both sides of `{_sql(node, names)}`; compare a column with it"
        )
    if _has(column_side, ast.SubLink):
        raise PredicateError(
            f"compares a subquery with a cutoff in `{_sql(node, names)}`; the side compared "
            "with a cutoff must be an expression over the table's own columns"
        )
    if not _names_a_column(column_side, table):
        raise PredicateError(
            f"compares `{_sql(column_side, names)}` with a cutoff, which names no column of "
            f"{table}: it does not depend on a row's age"
        )
    bad = _unshifted(column_side, table)
    if bad is not None:
        raise PredicateError(
            f"compares `{_sql(column_side, names)}` with a cutoff, and `{_sql(bad, names)}` "
            "can shift a row's age (a constant, arithmetic, a cast or a function); the side "
            "compared with a cutoff must be a bare column of the table, or coalesce/greatest/"
            "least of such columns, or CASE WHEN ... THEN column END (no ELSE)"
        )
    return True


def _is_null(node: object) -> bool:
    return isinstance(node, ast.A_Const) and bool(getattr(node, "isnull", False))


def _unshifted(node: ast.Node, table: str) -> ast.Node | None:
    """None when ``node`` is a value some row holds in a column of ``table``, unchanged (or
    NULL, which matches nothing): a bare column of the table; coalesce, greatest or least
    whose arguments are all such forms; ``CASE WHEN cond THEN form ... END`` without ELSE
    (each result such a form, a row the conditions leave out is NULL). Else the first part
    that is none of those (a constant, arithmetic, a cast or a function can move a row's
    age to anything)."""
    table_names = {table.lower(), table.rsplit(".", 1)[-1].lower()}
    if isinstance(node, ast.ColumnRef):
        fields = [getattr(f, "sval", None) for f in node.fields or ()]
        if fields and all(isinstance(f, str) for f in fields) and (
            len(fields) == 1 or ".".join(str(f) for f in fields[:-1]).lower() in table_names
        ):
            return None
        return node
    if isinstance(node, ast.CoalesceExpr | ast.MinMaxExpr):
        for arg in node.args or ():
            bad = _unshifted(arg, table)
            if bad is not None:
                return bad
        return None
    if isinstance(node, ast.CaseExpr):
        if node.defresult is not None and not _is_null(node.defresult):
            return node.defresult
        for when in node.args or ():
            result = getattr(when, "result", None)
            if _is_null(result):
                continue
            bad = _unshifted(result, table) if isinstance(result, ast.Node) else node
            if bad is not None:
                return bad
        return None
    return node


def _conjuncts(node: ast.Node) -> list[ast.Node]:
    if isinstance(node, ast.BoolExpr) and node.boolop == enums.BoolExprType.AND_EXPR:
        return [c for a in node.args or () for c in _conjuncts(a)]
    return [node]


def _branches(node: ast.Node) -> list[ast.Node]:
    if isinstance(node, ast.BoolExpr) and node.boolop == enums.BoolExprType.OR_EXPR:
        return [b for a in node.args or () for b in _branches(a)]
    return [node]


def _spine_leaves(node: ast.Node) -> Iterator[ast.Node]:
    """The operands of the AND/OR tree at the top of the predicate."""
    if isinstance(node, ast.BoolExpr) and node.boolop in (
        enums.BoolExprType.AND_EXPR, enums.BoolExprType.OR_EXPR
    ):
        for a in node.args or ():
            yield from _spine_leaves(a)
    else:
        yield node


def _is_bounded(node: ast.Node, table: str, names: Sequence[str]) -> ast.Node | None:
    """None when every row ``node`` matches is older than a cutoff; else the first branch
    that is not bounded."""
    for branch in _branches(node):
        conjuncts = _conjuncts(branch)
        if any(_bounding(c, table, names) for c in conjuncts):
            continue
        # An AND-ed OR is bounded when each of its branches is.
        if any(
            isinstance(c, ast.BoolExpr) and c.boolop == enums.BoolExprType.OR_EXPR
            and _is_bounded(c, table, names) is None
            for c in conjuncts
        ):
            continue
        return branch
    return None


def check_bounded(where: ast.Node, table: str, names: Sequence[str]) -> None:
    """Require every row the parsed predicate ``where`` can match to be older than a cutoff
    (the rule in this module's docstring). ``names``: the cutoff parameter names, in the
    order of their ``$N`` numbers.

    Raises:
        PredicateError: one line naming the offending part.
    """
    for leaf in _spine_leaves(where):
        if _bounding(leaf, table, names):
            continue
        if _has(leaf, ast.ParamRef):
            raise PredicateError(
                f"uses a cutoff inside `{_sql(leaf, names)}`; a cutoff may only be the bare "
                "side of `expression < %(cutoff)s` (or <=, or mirrored), AND-ed into every OR "
                "branch, never under NOT, IS, CASE, COALESCE, a function or a subquery"
            )
    branch = _is_bounded(where, table, names)
    if branch is not None:
        raise PredicateError(
            f"can match rows whatever their age: `{_sql(branch, names)}` is not bounded by a "
            "cutoff; every OR branch needs an AND-ed comparison such as "
            "created_at < %(cutoff)s"
        )


# -- verified against the server's catalog ---------------------------------------------------


@dataclass(frozen=True)
class CatalogObjects:
    """What a predicate names that only the server's catalog can resolve.

    Attributes:
        functions: function names, unqualified (a qualified one must be pg_catalog's).
        operators: operator names (``<``, ``~~``, ``@>``).
        types: type names of casts, as SQL text for ``to_regtype``.
        relations: relations its subqueries read, quoted for ``to_regclass``.
        table: the swept table, each part quoted for ``to_regclass``.
        columns: column names it reads (of the table or of a subquery's relations).
        all_columns: it reads every column of those relations (``*``, a whole-row
            reference).
    """

    functions: tuple[str, ...]
    operators: tuple[str, ...]
    types: tuple[str, ...]
    relations: tuple[str, ...]
    table: str = ""
    columns: tuple[str, ...] = ()
    all_columns: bool = False


class Catalog(Protocol):
    """The server side of :func:`verify` (:class:`reaper.db.Session` implements it)."""

    def refused_objects(self, objects: CatalogObjects) -> list[tuple[str, str]]:
        """``(what, why)`` for each object that is not allowed (see :func:`verify`)."""
        ...


_TOKEN = object()
# Operators every predicate may use implicitly (IN, CASE x WHEN, ORDER BY, DISTINCT, BETWEEN).
_IMPLICIT_OPERATORS = ("=", "<>", "<", "<=", ">", ">=")


@dataclass(frozen=True)
class CheckedPredicate:
    """A sweep's predicate (and ``since`` expression) that passed :func:`check` and
    :func:`verify` on the server it runs against: the only form in which reaper composes a
    predicate into a statement. Built by :func:`verify` alone.

    Attributes:
        table: the swept table, as written.
        text: the predicate, parameters as ``%(name)s``.
        since: the sweep's ``since`` expression ("" for none), verified with it.
        cutoffs: its cutoff parameter names, in declaration order.
    """

    table: str
    text: str
    since: str
    cutoffs: tuple[str, ...]
    _token: object = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _TOKEN:
            raise TypeError("a CheckedPredicate is built by reaper.sqltext.predicates.verify alone")


def _quoted(*parts: str) -> str:
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


def catalog_objects(table: str, predicate: str, since: str = "") -> CatalogObjects:
    """The functions, operators, cast types and relations ``predicate`` and ``since`` name.

    Raises:
        PredicateError: a function, operator or type qualified with a schema other than
            pg_catalog, or text that does not parse.
    """
    both = f"({predicate}) AND ({since}) IS NULL" if since else predicate
    text, names, _ = placeholders(both)
    try:
        stmt = parse_sql(f"SELECT FROM t WHERE (\n{text}\n)")[0].stmt
    except parser.ParseError as exc:
        raise PredicateError(f"is not valid SQL: {exc}") from None
    assert isinstance(stmt, ast.SelectStmt)
    functions: list[str] = []
    operators: list[str] = list(_IMPLICIT_OPERATORS)
    types: list[str] = []
    relations: list[str] = []
    columns: list[str] = []
    row_names: set[str] = set()
    all_columns = False

    def add(bucket: list[str], value: str) -> None:
        if value not in bucket:
            bucket.append(value)

    def unqualified(parts: Sequence[object], what: str, node: ast.Node) -> str:
        strings = [str(getattr(p, "sval", "")) for p in parts]
        if len(strings) > 1 and strings[:-1] != ["pg_catalog"]:
            raise PredicateError(
                f"names {what} {'.'.join(strings)} in `{_sql(node, names)}`; only built-in "
                "(pg_catalog) functions, operators and types may appear"
            )
        return strings[-1]

    for node in _nodes(stmt.whereClause):
        if isinstance(node, ast.FuncCall):
            add(functions, unqualified(node.funcname or (), "function", node))
        elif isinstance(node, ast.A_Expr) and node.name:
            op = unqualified(node.name, "operator", node)
            if node.kind == enums.A_Expr_Kind.AEXPR_BETWEEN or op.upper().endswith("BETWEEN"):
                continue  # BETWEEN is >= and <=, among the implicit operators
            add(operators, op)
        elif isinstance(node, ast.SubLink) and node.operName:
            add(operators, unqualified(node.operName, "operator", node))
        elif isinstance(node, ast.TypeCast) and node.typeName is not None:
            type_name = node.typeName
            unqualified(type_name.names or (), "type", node)
            add(types, str(RawStream()(type_name)))
        elif isinstance(node, ast.RangeVar):
            parts = [p for p in (node.schemaname, node.relname) if p]
            add(relations, _quoted(*(str(p) for p in parts)))
            row_names.add(str(node.relname))
            if node.alias is not None:
                row_names.add(str(node.alias.aliasname))
        elif isinstance(node, ast.ColumnRef):
            fields = [getattr(f, "sval", None) for f in node.fields or ()]
            if not fields or not isinstance(fields[-1], str):
                all_columns = True  # t.* or *
            else:
                add(columns, fields[-1])
    row_names.update({table.rsplit(".", 1)[-1], table.rsplit(".", 1)[-1].lower()})
    # A bare name that is a relation's is a whole-row reference: every column is read.
    all_columns = all_columns or any(c in row_names for c in columns)
    return CatalogObjects(
        tuple(functions), tuple(operators), tuple(types), tuple(relations),
        _quoted(*table.split(".", 1)), tuple(columns), all_columns,
    )


def verify(
    catalog: Catalog,
    table: str,
    predicate: str,
    cutoffs: Sequence[str],
    since: str = "",
) -> CheckedPredicate:
    """Check ``predicate`` (:func:`check`, bounded by its cutoffs) and ask ``catalog`` about
    every function, operator, cast type and relation it and ``since`` name: each must be
    built in (``pg_catalog``, created by initdb), immutable or stable, not SECURITY DEFINER
    (operators: their functions), casts only to built-in types (a domain's CHECK runs code),
    subqueries only over tables (a view runs its owner's code), every column read of a
    built-in type that is not a domain, and no cast with a user function between types a
    built-in value can take (it applies implicitly). Every candidate of an unqualified name
    visible on the search path counts when it could take the predicate's (built-in)
    operands: a user function that shadows a built-in one is refused too; one on an
    extension's own types (citext) is not.

    Raises:
        PredicateError: one line naming the offending part or object.
        DatabaseError: the catalog could not be read.
    """
    check(predicate, table, set(cutoffs))
    if since:
        # The same rules but the bound: since is evaluated on rows the predicate chose.
        check(f"({since}) < %({cutoffs[0]})s AND ({predicate})", table, set(cutoffs),
              bounded=False)
    refused = catalog.refused_objects(catalog_objects(table, predicate, since))
    if refused:
        what, why = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise PredicateError(
            f"uses {what}, which {why}{more}; only built-in, side-effect-free functions, "
            "operators and casts, over columns of built-in types, may appear (pg_catalog, "
            "immutable or stable, not SECURITY DEFINER)"
        )
    return CheckedPredicate(table, predicate, since, tuple(cutoffs), _TOKEN)
