"""A sweep's eligibility predicate, composed by reaper: from a declaration (data) for the
sweeps of the config file, from the package's reviewed SQL files for the built-ins.

A ``[sweeps.NAME]`` table declares what makes a row garbage as data (:class:`Rule`,
:class:`Filter`, :class:`Reference`); :func:`compile_declaration` turns it into SQL with
:mod:`psycopg.sql` alone: every name a :class:`~psycopg.sql.Identifier`, every value a
:class:`~psycopg.sql.Literal` cast to a ``pg_catalog`` type, every operator written
``OPERATOR(pg_catalog.<)``, so that no text of the config file reaches the server and no
operator, function or cast that another role created can be picked by name resolution.
Each rule is an OR of arms that each compare an age column with the rule's cutoff, so every
row the predicate matches is older than a cutoff by construction.

Columns of the swept table are written unqualified: PostgreSQL resolves an unqualified name
to a column (never to a function, as it may ``t.name``). A reference guard reads the other
table's column through a sub-select that renames it, for the same reason.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from psycopg import sql

from reaper import sqltext
from reaper.sqltext.names import TableName, quote_ident

# The cutoff parameters a declaration's rules get: CUTOFF_PREFIX + rule number (1, 2, ...).
# No engine statement names a parameter with this prefix (a test reads every SQL file).
CUTOFF_PREFIX = "rule_cutoff_"
# Schemas whose tables are never a sweep's target (nor read by a reference guard).
CATALOG_SCHEMAS = ("pg_catalog", "information_schema")
CATALOG_SCHEMA_PREFIXES = ("pg_",)  # pg_toast, pg_temp_N, pg_toast_temp_N: reserved names
# The name a reference guard gives the other table's column (see the module docstring).
_REF_COLUMN = "reaper_referrer"

Value = str | int | bool


def is_catalog_schema(schema: str) -> bool:
    """True for ``pg_catalog``, ``information_schema`` and every ``pg_*`` schema
    (``pg_toast``, ``pg_temp_3``): PostgreSQL reserves these names for itself."""
    return schema in CATALOG_SCHEMAS or schema.startswith(CATALOG_SCHEMA_PREFIXES)


@dataclass(frozen=True)
class Filter:
    """One condition on a column of the swept table.

    Attributes:
        column: the column's name, as PostgreSQL names it (case kept).
        op: ``eq`` (``=``, or IN for several values), ``ne`` (``<>``, or NOT IN), ``null``
            (IS NULL) or ``not_null`` (IS NOT NULL).
        values: the values compared with (none for ``null`` and ``not_null``); all of one
            type: text, integer or boolean.
    """

    column: str
    op: str
    values: tuple[Value, ...] = ()


@dataclass(frozen=True)
class Rule:
    """One way a row becomes garbage: its age is older than ``now() - retention``.

    Attributes:
        age: the age columns, in order: the row's age is the first that is not NULL (one
            column: that column; a row whose age is NULL is never garbage by this rule).
        age_when: conditions under which the age counts at all, composed into the compared
            expression itself, ``(CASE WHEN conditions THEN age END)``, so that an index on
            that expression serves the rule (the same rows as ``where``).
        where: conditions AND-ed to the rule.
    """

    age: tuple[str, ...]
    age_when: tuple[Filter, ...] = ()
    where: tuple[Filter, ...] = ()


@dataclass(frozen=True)
class Reference:
    """Keep a row while ``table.column`` (another table, schema-qualified) equals its
    ``key`` column."""

    schema: str
    table: str
    column: str
    key: str


@dataclass(frozen=True)
class Arm:
    """One arm of a predicate that is an OR of disjoint arms: the rows it matches are those of
    ``where``, ordered by ``age`` (the expression it compares with its cutoff), which one
    index serves as an ordered range.

    Attributes:
        where: the arm's predicate, whole (it holds the predicate's other conjuncts too).
        age: the expression the arm compares with its cutoff; on the arm's rows it is the
            predicate's ``since`` (the first age that is not NULL), so the arm's first row in
            its order is its oldest.
    """

    where: sql.Composable
    age: sql.Composable


@dataclass(frozen=True)
class Predicate:
    """A sweep's eligibility predicate, composed.

    Attributes:
        table: the swept table.
        where: the boolean expression over the table's columns; its cutoffs are the named
            parameters ``cutoffs``.
        cutoffs: its cutoff parameter names, in order (the first is the backlog gauge's).
        since: the moment the first cutoff's retention started counting for a row, for
            ``reaper_backlog_oldest_seconds`` (None: no such gauge).
        ages: the expressions compared with a cutoff (the oldest eligible row is the least).
        columns: the swept table's columns it names (``reaper check`` requires them).
        age_columns: the columns among ``columns`` whose value is compared with a cutoff.
        tables_read: the swept table then every other table it reads.
        key_column: a declaration's, set when its predicate is exactly ``column < cutoff``
            (a partition wholly below the cutoff is wholly eligible); a built-in's reviewed
            ``text`` is read by :func:`reaper.engine.partitions.key_bound` instead.
        text: the SQL text of a built-in's reviewed file (None for a declaration).
        reads: a declaration's ``(table, column)`` pairs, every column it names, for
            :meth:`reaper.db.Session.statements` to check against the catalog (empty for
            reviewed text).
        arms: when ``where`` is an OR of arms that no row matches two of (a rule of several
            age columns: arm ``i`` holds ``age[j] IS NULL`` for every ``j < i`` and
            ``age[i] < cutoff``), each arm; the statements that want the first ``n``
            eligible rows read each arm as its own ordered index range, ``n`` at most
            (:class:`reaper.db.SweepStatements`), where ``WHERE (a OR b) LIMIT n`` is a
            BitmapOr that reads every eligible entry before the ``LIMIT``. Empty: one range.
        proof: a built-in's partition proof as :func:`reaper.engine.partitions.key_bound`
            reads its ``text``, kept with the package (:mod:`reaper.sqltext.analysed`):
            ``(column, cutoff parameters)``, or why the text proves no partition eligible.
            None: ``text`` is read when a partition is planned (or there is no text).
        rules: a declaration's rules, as declared (empty for reviewed text), so that
            ``reaper check`` can tell whether two sweeps of one table can match one row.
    """

    table: TableName
    where: sql.Composable
    cutoffs: tuple[str, ...]
    since: sql.Composable | None
    ages: tuple[sql.Composable, ...]
    columns: tuple[str, ...]
    age_columns: tuple[str, ...]
    tables_read: tuple[TableName, ...]
    key_column: str | None = None
    text: str | None = None
    reads: tuple[tuple[TableName, str], ...] = ()
    arms: tuple[Arm, ...] = ()
    proof: tuple[str, tuple[str, ...]] | str | None = None
    rules: tuple[Rule, ...] = ()


def cutoff_name(rule: int) -> str:
    """The cutoff parameter of rule number ``rule`` (from 1)."""
    return f"{CUTOFF_PREFIX}{rule}"


_OP = {op: sql.SQL(f"OPERATOR(pg_catalog.{op})") for op in ("<", "=", "<>")}
_TYPES = {bool: "bool", int: "int8", str: "text"}


def _literal(value: Value) -> sql.Composable:
    # bool before int: a bool is an int in Python.
    kind = bool if isinstance(value, bool) else type(value)
    return sql.SQL("({}::pg_catalog.{})").format(sql.Literal(value), sql.SQL(_TYPES[kind]))


def _filter(f: Filter) -> sql.Composable:
    col = sql.Identifier(f.column)
    if f.op == "null":
        return sql.SQL("{} IS NULL").format(col)
    if f.op == "not_null":
        return sql.SQL("{} IS NOT NULL").format(col)
    op = _OP["=" if f.op == "eq" else "<>"]
    if len(f.values) == 1:
        return sql.SQL("{} {} {}").format(col, op, _literal(f.values[0]))
    values = sql.SQL(", ").join(_literal(v) for v in f.values)
    quantifier = sql.SQL("ANY" if f.op == "eq" else "ALL")
    return sql.SQL("{} {} {} (ARRAY[{}])").format(col, op, quantifier, values)


def _and(parts: Sequence[sql.Composable]) -> sql.Composable:
    return sql.SQL(" AND ").join(sql.SQL("({})").format(p) for p in parts)


def _or(parts: Sequence[sql.Composable]) -> sql.Composable:
    return sql.SQL(" OR ").join(sql.SQL("({})").format(p) for p in parts)


def _rule(
    rule: Rule, cutoff: str
) -> tuple[sql.Composable, list[sql.Composable], list[sql.Composable]]:
    """A rule's predicate, the expressions it compares with its cutoff, and its arms (one
    per age column, disjoint: arm ``i`` holds every earlier age ``IS NULL``, and its own
    age ``< cutoff``, which no NULL satisfies), the rule's ``where`` in none of them."""
    when = _and([_filter(f) for f in rule.age_when]) if rule.age_when else None

    def age(column: str) -> sql.Composable:
        if when is None:
            return sql.Identifier(column)
        return sql.SQL("(CASE WHEN {} THEN {} END)").format(when, sql.Identifier(column))

    ages = [age(c) for c in rule.age]
    arms = []
    for i, expr in enumerate(ages):
        bound = sql.SQL("{} {} {}").format(expr, _OP["<"], sql.Placeholder(cutoff))
        arms.append(_and([sql.SQL("{} IS NULL").format(e) for e in ages[:i]] + [bound]))
    out = arms[0] if len(arms) == 1 else _or(arms)
    if rule.where:
        out = _and([out, *(_filter(f) for f in rule.where)])
    return out, ages, arms


def _reference(ref: Reference, key_table: str) -> sql.Composable:
    # The other table's column renamed in a sub-select: "ref.column" could resolve to a
    # function of the row if the column were gone; an unqualified name in a select list
    # cannot. The key is the swept table's column, unqualified, and cannot be shadowed: the
    # sub-select exposes _REF_COLUMN alone (a key of that name is refused at load).
    return sql.SQL(
        "NOT EXISTS (SELECT 1 FROM (SELECT {col} AS {alias} FROM {table}) AS {ref} "
        "WHERE {ref}.{alias} {eq} {key})"
    ).format(
        col=sql.Identifier(ref.column),
        alias=sql.Identifier(_REF_COLUMN),
        table=sql.Identifier(ref.schema, ref.table),
        ref=sql.Identifier(_REF_COLUMN + ("_" if key_table == _REF_COLUMN else "")),
        eq=_OP["="],
        key=sql.Identifier(ref.key),
    )


def compile_declaration(
    schema: str,
    table: str,
    rules: Sequence[Rule],
    references: Sequence[Reference] = (),
    *,
    cutoffs: Sequence[str] = (),
) -> Predicate:
    """The predicate of a declared sweep over ``schema.table``:
    ``(rule 1) OR (rule 2) ... AND NOT EXISTS (reference 1) AND ...``, rule ``n`` bounded by
    the cutoff parameter ``cutoffs[n - 1]`` (default :func:`cutoff_name` (n)). A single rule
    of several age columns has :attr:`Predicate.arms`: its arms, each with the rule's
    ``where`` and the references.

    Raises:
        ValueError: no rule, a rule without an age column, a filter without a value, a
            reference whose key is named like the guard's own column.
    """
    if not rules:
        raise ValueError("a declared sweep needs at least one rule")
    if cutoffs and len(cutoffs) != len(rules):
        raise ValueError(f"{len(rules)} rule(s) need as many cutoff names, not {len(cutoffs)}")
    names = list(cutoffs) or [cutoff_name(n) for n in range(1, len(rules) + 1)]
    arms: list[sql.Composable] = []
    ages: list[sql.Composable] = []
    rule_arms: list[sql.Composable] = []
    columns: list[str] = []
    age_columns: list[str] = []
    for n, rule in enumerate(rules, 1):
        if not rule.age:
            raise ValueError(f"rule {n} has no age column")
        for f in (*rule.age_when, *rule.where):
            if f.op in ("eq", "ne") and not f.values:
                raise ValueError(f"rule {n}: column {f.column} is compared with no value")
        arm, rule_ages, rule_arms = _rule(rule, names[n - 1])
        arms.append(arm)
        ages += rule_ages
        age_columns += rule.age
        columns += [*rule.age, *(f.column for f in (*rule.age_when, *rule.where))]
    for ref in references:
        if ref.key == _REF_COLUMN:
            raise ValueError(f"a reference key may not be named {_REF_COLUMN}")
        columns.append(ref.key)
    where = arms[0] if len(arms) == 1 else _or(arms)
    guards = [_reference(r, table) for r in references]
    if references:
        where = _and([where, *guards])
    # Several rules may match one row (no disjoint arms); one rule of one age is one range.
    disjoint: tuple[Arm, ...] = ()
    if len(rules) == 1 and len(rule_arms) > 1:
        conditions = [_filter(f) for f in rules[0].where] + guards
        disjoint = tuple(
            Arm(where=_and([arm, *conditions]) if conditions else arm, age=age)
            for arm, age in zip(rule_arms, ages, strict=True)
        )
    first_ages = ages[: len(rules[0].age)]
    since = (
        first_ages[0]
        if len(first_ages) == 1
        else sql.SQL("COALESCE({})").format(sql.SQL(", ").join(first_ages))
    )
    only = rules[0]
    key_column = (
        only.age[0]
        if len(rules) == 1
        and len(only.age) == 1
        and not only.age_when
        and not only.where
        and not references
        else None
    )
    swept = TableName(schema, table)
    return Predicate(
        table=swept,
        where=where,
        cutoffs=tuple(names),
        since=since,
        ages=tuple(ages),
        columns=tuple(dict.fromkeys(columns)),
        age_columns=tuple(dict.fromkeys(age_columns)),
        tables_read=tuple(
            dict.fromkeys([swept, *(TableName(r.schema, r.table) for r in references)])
        ),
        key_column=key_column,
        reads=tuple(
            dict.fromkeys(
                [(swept, c) for c in columns]
                + [(TableName(r.schema, r.table), r.column) for r in references]
            )
        ),
        arms=disjoint,
        rules=tuple(rules),
    )


@functools.cache
def builtin(name: str, table: TableName, cutoffs: tuple[str, ...]) -> Predicate:
    """The predicate of built-in sweep ``name`` over ``table``: the reviewed files
    ``sql/sweeps/<name>.sql`` and ``sql/since/<name>.sql`` of the package (no text of a
    config file), analysed with pglast for the columns and tables they read. Their other
    tables are written ``{schema}.name``: they live in the swept table's schema.

    The analysis of each file as it ships is kept in :mod:`reaper.sqltext.analysed`, so that
    loading the configuration does not load the parser (about 35 ms of every start); a file
    whose text differs from the one analysed there (an edited file, a table renamed) is
    analysed again here. A unit test re-runs the analysis and compares.
    """
    from reaper.sqltext import analysed

    text, since = sqltext.predicate(name), sqltext.since(name)
    known = analysed.BUILTINS.get(name)
    if (
        known is None
        or known["table"] != table.name
        or known["sha256"] != hashlib.sha256(text.encode()).hexdigest()
    ):
        return reviewed(table, text, cutoffs, since)
    filled = text.replace("{schema}", quote_ident(table.schema))

    def in_schema(schema: str | None, relname: str) -> TableName:
        return TableName(table.schema if schema is None else schema, relname)

    return Predicate(
        table=table,
        where=sql.SQL(filled),
        cutoffs=cutoffs,
        since=sql.SQL(since) if since else None,
        ages=tuple(sql.SQL(e) for e in known["ages"]),
        columns=known["columns"],
        age_columns=known["age_columns"],
        tables_read=tuple(in_schema(*t) for t in known["tables_read"]),
        text=filled,
        proof=known["proof"],
    )


def reviewed(
    table: TableName | str, text: str, cutoffs: tuple[str, ...], since: str = ""
) -> Predicate:
    """A predicate from SQL text that ships with reaper (a built-in sweep; a test or a
    benchmark of its own), never from a config file. ``table``: a :class:`TableName`, or
    ``schema.name`` or ``name`` (in ``public``). ``{schema}`` in ``text`` stands for the
    table's schema, quoted: a table the text reads is named with its schema too."""
    # Imported here: pglast is needed for reviewed text only.
    from reaper.sqltext import sqlinfo

    swept = TableName.parse(table)
    text = text.replace("{schema}", quote_ident(swept.schema))
    expressions = sqlinfo.cutoff_expressions(swept, text)
    age_columns: list[str] = []
    for e in expressions:
        age_columns += [c for c in sqlinfo.columns_used(swept, e) if c not in age_columns]
    return Predicate(
        table=swept,
        where=sql.SQL(text),
        cutoffs=cutoffs,
        since=sql.SQL(since) if since else None,
        ages=tuple(sql.SQL(e) for e in expressions),
        columns=sqlinfo.columns_used(swept, text),
        age_columns=tuple(age_columns),
        tables_read=sqlinfo.tables_read(swept, text),
        text=text,
    )
