"""A declared sweep can only delete by age and can run no code.

The predicates of a former release that a tester used to delete rows whatever their age, or
to run code (a function, an operator, a cast, a view), are SQL text: every one is refused at
load, before any connection (exit 2, one line). What a declaration compiles to is bounded by
a cutoff in every branch by construction: checked here by parsing the compiled SQL of every
shape a declaration can take.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pglast
import psycopg
import pytest
from pglast import ast
from pglast.enums import BoolExprType

from reaper.config.connection import connection_settings
from reaper.config.load import load_config
from reaper.errors import ConfigError
from reaper.sqltext.declared import Filter, Reference, Rule, compile_declaration
from tests.support import BUILTIN_SWEEPS, keys, run_reaper

# Every test here declares tables, functions or roles of its own: a database of its own each.
pytestmark = pytest.mark.fresh_db

OLD = "now() - interval '90 days'"
SQL_TEXT = "[sweeps.members] predicate: SQL text is no longer accepted"


def _seed(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, expires_at, banned) VALUES"
        f" ('garbage-old', {OLD}, NULL, false),"
        f" ('keep-old-banned', {OLD}, NULL, true),"
        " ('keep-young', now() - interval '1 day', NULL, false),"
        " ('keep-young-banned', now() - interval '1 day', NULL, true)"
    )


ALL_NODES = {"garbage-old", "keep-old-banned", "keep-young", "keep-young-banned"}


def _config(tmp_path: Path, predicate: str) -> Path:
    path = tmp_path / "reaper.toml"
    escaped = predicate.replace("\\", "\\\\").replace('"', '\\"')
    path.write_text(
        '[sweeps.members]\ntable = "public.nodes"\nreason = "stale"\n'
        f'predicate = "{escaped}"\nretention = "30d"\n'
    )
    return path


# The predicates that a former release's checkers refused (or had to refuse), by kind.
REFUSED_SHAPES = [
    # (predicate, the part the message names)
    ("enrolled_at < %(cutoff)s OR true", "`TRUE` is not bounded"),
    ("%(cutoff)s IS NOT NULL", "`%(cutoff)s IS NOT NULL`"),
    ("enrolled_at < %(cutoff)s OR NOT banned", "`NOT banned` is not bounded"),
    ("enrolled_at < %(cutoff)s + interval '100 years'", "wraps a cutoff"),
    ("enrolled_at < greatest(%(cutoff)s, now())", "wraps a cutoff"),
    ("enrolled_at < %(cutoff)s::date + 36500", "wraps a cutoff"),
    ("NOT (enrolled_at >= %(cutoff)s)", "`NOT enrolled_at >= %(cutoff)s`"),
    ("(enrolled_at < %(cutoff)s) IS NOT FALSE", "IS NOT FALSE"),
    ("CASE WHEN banned THEN false ELSE enrolled_at < %(cutoff)s OR true END", "CASE WHEN"),
    ("coalesce(enrolled_at < %(cutoff)s, true)", "COALESCE("),
    ("now() < %(cutoff)s", "names no column of nodes"),
    ("'-infinity'::timestamptz < %(cutoff)s", "names no column of nodes"),
    ("(SELECT min(enrolled_at) FROM nodes) < %(cutoff)s", "compares a subquery"),
    ("enrolled_at > %(cutoff)s", "`enrolled_at > %(cutoff)s`"),
    ("enrolled_at = %(cutoff)s OR true", "`enrolled_at = %(cutoff)s`"),
    ("enrolled_at < %(cutoff)s AND %(cutoff)s IS NOT NULL", "`%(cutoff)s IS NOT NULL`"),
    ("enrolled_at OPERATOR(pg_catalog.<) %(cutoff)s", "OPERATOR(pg_catalog.<)"),
    ("(enrolled_at < %(cutoff)s OR banned) OR peer_id LIKE 'k%%'", "`banned` is not bounded"),
    ("enrolled_at < %(cutoff)s OR (banned AND peer_id IS NOT NULL)", "is not bounded"),
    # The column side must be a row's own value: anything else can shift it to any age.
    ("least(enrolled_at, '-infinity') < %(cutoff)s", "`'-infinity'` can shift a row's age"),
    ("enrolled_at - interval '100 years' < %(cutoff)s", "can shift a row's age"),
    (
        "(CASE WHEN peer_id <> '' THEN '-infinity'::timestamptz ELSE enrolled_at END) < %(cutoff)s",
        "can shift a row's age",
    ),
    (
        "(CASE WHEN banned THEN enrolled_at ELSE '-infinity' END) < %(cutoff)s",
        "can shift a row's age",
    ),
    ("coalesce(expires_at, '-infinity') < %(cutoff)s", "`'-infinity'` can shift"),
    ("coalesce(expires_at, least(enrolled_at, now())) < %(cutoff)s", "`now()` can shift"),
    ("greatest(expires_at, enrolled_at + interval '1 day') < %(cutoff)s", "can shift"),
    ("enrolled_at::date < %(cutoff)s", "can shift a row's age"),
    ("enrolled_at::timestamptz < %(cutoff)s", "can shift a row's age"),
    ("date_trunc('day', enrolled_at) < %(cutoff)s", "can shift a row's age"),
    ("-(-enrolled_at) < %(cutoff)s OR false", "can shift"),
    ("enrolled_at < %(cutoff)s OR coalesce(expires_at, NULL) < %(cutoff)s", "can shift"),
]

REFUSED_BY_CATALOG = [
    # (predicate, the object the message names)
    ("enrolled_at < %(cutoff)s AND NOT innocent(peer_id)", "function innocent(text)"),
    ("enrolled_at < %(cutoff)s AND NOT public.innocent(peer_id)", "public.innocent"),
    (
        "enrolled_at < %(cutoff)s AND is_old(enrolled_at) < now()",
        "function is_old(timestamp with time zone)",
    ),
    ("enrolled_at < %(cutoff)s AND peer_id === 'garbage-old'", "operator ===(text,text)"),
    ("enrolled_at < %(cutoff)s AND upper(peer_id) <> ''", "function public.upper(text)"),
    ("enrolled_at < %(cutoff)s AND peer_id::peer IS NOT NULL", "type peer"),
    ("enrolled_at < %(cutoff)s AND random() < 2", "is volatile"),
    (
        "enrolled_at < %(cutoff)s AND clock_timestamp() > enrolled_at",
        "function clock_timestamp(), which is volatile",
    ),
    (
        "enrolled_at < %(cutoff)s AND peer_id NOT IN (SELECT peer_id FROM banned_peers)",
        'relation "banned_peers"',
    ),
]

USER_TYPE_PREDICATES = [
    # (predicate, the part the message names)
    ("c < %(cutoff)s", "column w.c, which is of type wrap"),
    ("c::timestamptz < %(cutoff)s", "can shift a row's age"),
    ("created_at < %(cutoff)s AND c < now()", "column w.c, which is of type wrap"),
    ("created_at < %(cutoff)s AND c::timestamptz < now()", "column w.c"),
    ("created_at < %(cutoff)s AND (c).t < now()", "column w.c"),
    ("created_at < %(cutoff)s AND d < now()", "column w.d, which is of type stamp"),
    ("created_at < %(cutoff)s AND w IS NOT NULL", "column w.c"),
    ("created_at < %(cutoff)s AND w::text <> ''", "column w.c"),
    ("created_at < %(cutoff)s AND EXISTS (SELECT FROM w w2 WHERE w2.c < now())", "column w.c"),
    ("created_at < %(cutoff)s AND EXISTS (SELECT * FROM w w2 WHERE w2.id = w.id)", "column w.c"),
    ("created_at < %(cutoff)s AND created_at::stamp IS NOT NULL", "type stamp"),
]


FORMER = [p for p, _ in REFUSED_SHAPES + REFUSED_BY_CATALOG + USER_TYPE_PREDICATES]


@pytest.mark.parametrize("predicate", FORMER)
def test_every_former_predicate_is_refused_at_load(predicate: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(
            {},
            {
                "sweeps": {
                    "members": {
                        "table": "public.nodes",
                        "reason": "stale",
                        "predicate": predicate,
                        "retention": "30d",
                    }
                }
            },
        )
    assert str(exc.value).startswith(f"config file: {SQL_TEXT}; ")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "predicate",
    ["enrolled_at < %(cutoff)s OR true", "enrolled_at < %(cutoff)s AND NOT innocent(peer_id)"],
)
def test_o01_cli_refuses_sql_text_in_every_command(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, predicate: str
) -> None:
    """O01: exit 2, one line; every row (banned members included) stays."""
    _seed(conn)
    config = _config(tmp_path, predicate)
    for args in (("run-once",), ("run-once", "--dry-run"), ("status",), ("check",)):
        run = run_reaper(*args, "--config", str(config), env={"REAPER_DSN": dsn})
        assert run.code == 2, (args, run.stderr)
        assert len(run.stderr_lines) == 1, run.stderr
        assert SQL_TEXT in run.stderr
    assert keys(conn, "nodes") == ALL_NODES


def test_the_daemon_refuses_to_start(dsn: str, tmp_path: Path) -> None:
    config = _config(tmp_path, "enrolled_at < %(cutoff)s AND NOT innocent(peer_id)")
    run = run_reaper(
        "run",
        "--config",
        str(config),
        "--listen",
        "127.0.0.1:0",
        env={"REAPER_DSN": dsn},
        timeout=60,
    )
    assert run.code == 2, run.stderr
    assert SQL_TEXT in run.stderr


# -- bounded by construction -----------------------------------------------------------------


def _branches(node: Any) -> list[Any]:
    if isinstance(node, ast.BoolExpr) and node.boolop == BoolExprType.OR_EXPR:
        return [b for a in node.args for b in _branches(a)]
    return [node]


def _conjuncts(node: Any) -> list[Any]:
    if isinstance(node, ast.BoolExpr) and node.boolop == BoolExprType.AND_EXPR:
        return [c for a in node.args for c in _conjuncts(a)]
    return [node]


def _bounded(node: Any) -> bool:
    """Every OR branch holds an AND-ed `expression OPERATOR(pg_catalog.<) $n`, or an AND-ed
    OR of branches that each do."""
    for branch in _branches(node):
        parts = _conjuncts(branch)
        if any(
            isinstance(p, ast.A_Expr)
            and [n.sval for n in p.name] == ["pg_catalog", "<"]
            and isinstance(p.rexpr, ast.ParamRef)
            for p in parts
        ):
            continue
        if any(
            isinstance(p, ast.BoolExpr) and p.boolop == BoolExprType.OR_EXPR and _bounded(p)
            for p in parts
        ):
            continue
        return False
    return True


FILTERS = [
    (),
    (
        Filter("kind", "eq", ("a", "b")),
        Filter("flag", "ne", (True,)),
        Filter("note", "null"),
        Filter("x", "not_null"),
    ),
]
AGES = [("a",), ("a", "b"), ("a", "b", "c")]


def test_every_declared_shape_is_bounded_by_a_cutoff(conn: psycopg.Connection[Any]) -> None:
    rules = [
        Rule(age, when, where)
        for age, when, where in itertools.product(AGES, FILTERS[:1] + FILTERS[1:], FILTERS)
    ]
    for n in (1, 2, 3):
        for chosen in itertools.combinations(rules, n):
            for refs in ((), (Reference("public", "o", "c", "id"),)):
                predicate = compile_declaration("public", "t", list(chosen), refs)
                text = predicate.where.as_string(conn)
                for i, name in enumerate(predicate.cutoffs, 1):
                    text = text.replace(f"%({name})s", f"${i}")
                where = pglast.parse_sql(f"SELECT 1 FROM t WHERE {text}")[0].stmt.whereClause
                assert _bounded(where), text


def test_builtin_sweeps_compose_from_their_reviewed_files(
    dsn: str, make_settings: Callable[..., Any]
) -> None:
    from reaper.db import Database

    settings = make_settings()
    with Database(connection_settings(settings)) as db, db.session() as session:
        for sweep in BUILTIN_SWEEPS:
            # Reviewed text, or a declaration compiled as a config file's is (the request
            # sweep's), whose reads the session checks against the catalog.
            assert bool(sweep.predicate.text) != bool(sweep.predicate.reads), sweep.name
            session.statements(sweep.predicate)
