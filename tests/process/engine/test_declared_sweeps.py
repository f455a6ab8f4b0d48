"""Declared sweeps are data: each shape deletes exactly the rows its rules say, and no
declaration can make reaper call a function, an operator or a cast that another role made.

Against a real PostgreSQL. The routes by which an accepted SQL predicate once ran code
(an enum literal, a whole-row argument, attribute notation, an operator on user types, a
domain, SQL/JSON syntax, a row-level security policy) are each tried: a declaration either
cannot say them (the key does not exist, SQL text is refused at load: exit 2, one line), or
says a name that PostgreSQL resolves to a column or to nothing (the sweep fails alone and
nothing runs).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from reaper import sqltext
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.config.sweeps import configured_sweeps
from reaper.db import Database
from reaper.engine.run import run_sweeps
from reaper.sqltext import declared
from reaper.sqltext.declared import Filter, Reference, Rule, compile_declaration
from tests.support import enabled, run_reaper
from tests.support.ops import apply_grants

# Every test here declares tables, functions or roles of its own: a database of its own each.
pytestmark = pytest.mark.fresh_db

ITEMS = """
CREATE TABLE public.items (
    id int PRIMARY KEY, key text NOT NULL, kind text, flag boolean, note text,
    created_at timestamptz, resolved_at timestamptz
);
CREATE TABLE public.refs (item_id int);
INSERT INTO public.items
SELECT v.id, v.key, v.kind, v.flag, v.note,
       now() - v.created * interval '1 day', now() - v.resolved * interval '1 day'
FROM (VALUES
    (1, 'a-old',     'a', true,  'x',  40, NULL),
    (2, 'a-young',   'a', true,  'x',   5, NULL),
    (3, 'b-old',     'b', false, NULL, 40, NULL),
    (4, 'c-old',     'c', true,  'x',  40, NULL),
    (5, 'a-old-ref', 'a', true,  'x',  40, NULL),
    (6, 'res-old',   'a', true,  'x',  50,   40),
    (7, 'res-young', 'a', true,  'x',  50,    5),
    (8, 'b-mid',     'b', false, NULL, 15, NULL)
) AS v (id, key, kind, flag, note, created, resolved);
INSERT INTO public.refs VALUES (5);
"""
ALL_ITEMS = {"a-old", "a-young", "b-old", "c-old", "a-old-ref", "res-old", "res-young", "b-mid"}
OLD_BY_CREATION = {"a-old", "b-old", "c-old", "a-old-ref", "res-old", "res-young"}

# (case, the [sweeps.items] keys beside table and reason, the rows it must delete)
SHAPES: list[tuple[str, dict[str, Any], set[str]]] = [
    ("one arm", {"age": "created_at", "retention": "30d"}, OLD_BY_CREATION),
    # resolved_at < c OR (resolved_at IS NULL AND created_at < c): res-young was resolved
    # 5 days ago, however old its creation.
    (
        "coalesce arms",
        {"age": ["resolved_at", "created_at"], "retention": "30d"},
        OLD_BY_CREATION - {"res-young"},
    ),
    (
        "rules with their own retentions",
        {
            "rule": [
                {"age": "created_at", "where": {"kind": "a"}, "retention": "30d"},
                {"age": "created_at", "where": {"kind": "b"}, "retention": "10d"},
            ]
        },
        {"a-old", "a-old-ref", "res-old", "res-young", "b-old", "b-mid"},
    ),
    (
        "IN, boolean, IS NULL and IS NOT NULL",
        {
            "age": "created_at",
            "retention": "30d",
            "where": {"kind": ["a", "b"], "flag": True},
            "is_null": ["resolved_at"],
            "not_null": ["note"],
        },
        {"a-old", "a-old-ref"},
    ),
    # A NULL note matches no NOT IN: b-old stays.
    (
        "NOT and NOT IN",
        {"age": "created_at", "retention": "30d", "where_not": {"kind": "a", "note": ["y", "z"]}},
        {"c-old"},
    ),
    (
        "keep while referenced",
        {
            "age": "created_at",
            "retention": "30d",
            "keep_referenced": [{"table": "public.refs", "column": "item_id"}],
        },
        OLD_BY_CREATION - {"a-old-ref"},
    ),
    (
        "age when",
        {"age": "created_at", "age_when": {"kind": "b"}, "retention": "10d"},
        {"b-old", "b-mid"},
    ),
]


def items(conn: psycopg.Connection[Any]) -> set[str]:
    return {r[0] for r in conn.execute("SELECT key FROM public.items")}


def items_sweep(dsn: str, body: dict[str, Any]) -> Any:
    return build_settings(
        {"dsn": dsn, "max_eligible_fraction": "1"},
        {
            "sweeps": {
                "items": {
                    "table": "public.items",
                    "reason": "old",
                    **body,
                }
            }
        },
    )


@pytest.mark.parametrize(
    ("body", "gone"), [(b, g) for _, b, g in SHAPES], ids=[c for c, _, _ in SHAPES]
)
@pytest.mark.parametrize("strategy", ["heap", "index"])
def test_each_shape_deletes_exactly_its_rows(
    dsn: str,
    conn: psycopg.Connection[Any],
    database: Database,
    body: dict[str, Any],
    gone: set[str],
    strategy: str,
) -> None:
    conn.execute(ITEMS)
    settings = items_sweep(dsn, {**body, "strategy": strategy})
    (dry,) = run_sweeps(
        database, enabled(settings, ["items"]), engine_options(settings), dry_run=True
    )
    assert (dry.outcome, dry.rows) == ("success", len(gone)), dry.error
    assert items(conn) == ALL_ITEMS
    (result,) = run_sweeps(database, enabled(settings, ["items"]), engine_options(settings))
    assert (result.outcome, result.rows) == ("success", len(gone)), result.error
    assert items(conn) == ALL_ITEMS - gone


def test_a_mixed_case_quoted_schema_and_table_are_the_ones_swept(
    dsn: str, conn: psycopg.Connection[Any], database: Database
) -> None:
    conn.execute("""
        CREATE SCHEMA "Audit Log";
        CREATE TABLE "Audit Log"."Events" ("Created At" timestamptz, "Kind" text);
        CREATE SCHEMA audit_log;
        CREATE TABLE audit_log.events ("Created At" timestamptz, "Kind" text);
        INSERT INTO "Audit Log"."Events" VALUES
            (now() - interval '40 days', 'x'), (now() - interval '40 days', 'y'),
            (now() - interval '1 day', 'x');
        INSERT INTO audit_log.events SELECT * FROM "Audit Log"."Events";
    """)
    settings = build_settings(
        {"dsn": dsn, "max_eligible_fraction": "1"},
        {
            "sweeps": {
                "ev": {
                    "table": "Audit Log.Events",
                    "reason": "old",
                    "age": "Created At",
                    "where": {"Kind": "x"},
                    "retention": "30d",
                }
            }
        },
    )
    (result,) = run_sweeps(database, enabled(settings, ["ev"]), engine_options(settings))
    assert (result.outcome, result.rows) == ("success", 1), result.error
    assert conn.execute('SELECT count(*) FROM "Audit Log"."Events"').fetchone() == (2,)
    assert conn.execute("SELECT count(*) FROM audit_log.events").fetchone() == (3,)


# -- what the compiler writes ------------------------------------------------------------------


def test_the_compiled_predicate_names_only_pg_catalog_operators_and_quoted_names(
    conn: psycopg.Connection[Any],
) -> None:
    predicate = compile_declaration(
        "public",
        "items",
        [
            Rule(
                ("resolved_at", "created_at"),
                (Filter("kind", "eq", ("b",)),),
                (
                    Filter("flag", "eq", (True,)),
                    Filter("kind", "ne", ("a", "b")),
                    Filter("note", "null"),
                ),
            ),
            Rule(("created_at",)),
        ],
        [Reference("public", "refs", "item_id", "id")],
    )
    text = predicate.where.as_string(conn)
    assert predicate.cutoffs == ("rule_cutoff_1", "rule_cutoff_2")
    # Every comparison is a pg_catalog operator; nothing else names a function or type but
    # the literals' pg_catalog casts.
    for op in ("<", "=", "<>"):
        assert f" {op} " not in text.replace(f"OPERATOR(pg_catalog.{op})", "")
    assert text.count("OPERATOR(pg_catalog.<) %(rule_cutoff_1)s") == 2
    assert text.count("OPERATOR(pg_catalog.<) %(rule_cutoff_2)s") == 1
    assert "::pg_catalog.text" in text and "::pg_catalog.bool" in text
    assert '"public"."refs"' in text


def test_no_engine_statement_uses_the_cutoff_namespace() -> None:
    """The compiler's cutoff parameters cannot collide with the engine's own (limit, skip,
    percent, batch_size ...)."""
    for name in sqltext.all_files():
        assert f"%({declared.CUTOFF_PREFIX}" not in sqltext.read(name), name


# -- routes to code ------------------------------------------------------------------------------

SIDE_EFFECTS = """
CREATE TABLE public.side_effects (what text);
GRANT INSERT ON public.side_effects TO PUBLIC;
CREATE TABLE public.secrets (id int);
INSERT INTO public.secrets SELECT generate_series(1, 10);
"""


@pytest.fixture
def mallory(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[str]:
    """Another role of the same database, allowed to create in schema public (as PUBLIC was
    before PostgreSQL 15): the name of the role."""
    role = f"mallory_{uuid.uuid4().hex[:8]}"
    conn.execute(SIDE_EFFECTS)
    conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
    conn.execute(sql.SQL("GRANT CREATE, USAGE ON SCHEMA public TO {}").format(sql.Identifier(role)))
    try:
        yield role
    finally:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def as_role(conn: psycopg.Connection[Any], role: str, ddl: str) -> None:
    with conn.transaction():
        conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
        conn.execute(ddl)


def side_effects(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute("SELECT what FROM public.side_effects")]


STAMPED = """
CREATE FUNCTION public.check_label(text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.side_effects VALUES ('domain check'); RETURN true; END $$;
CREATE DOMAIN public.stamp AS timestamptz;
CREATE DOMAIN public.label AS text CHECK (public.check_label(VALUE));
CREATE TABLE public.stamped (key text, at public.stamp, kind public.label);
INSERT INTO public.stamped VALUES
    ('go-a', now() - interval '40 days', 'a'), ('go-b', now() - interval '40 days', 'b'),
    ('stay-c', now() - interval '40 days', 'c'), ('stay-young', now(), 'a');
"""
HOSTILE = """
CREATE FUNCTION public.always(a timestamptz, b timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.side_effects VALUES ('operator'); RETURN true; END $$;
CREATE FUNCTION public.always_ts(a public.stamp, b timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.side_effects VALUES ('stamp operator'); RETURN true; END $$;
CREATE FUNCTION public.always_label(a public.label, b text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.side_effects VALUES ('label operator'); RETURN true; END $$;
CREATE OPERATOR public.< (FUNCTION = public.always, LEFTARG = timestamptz,
                          RIGHTARG = timestamptz);
CREATE OPERATOR public.< (FUNCTION = public.always_ts, LEFTARG = public.stamp,
                          RIGHTARG = timestamptz);
CREATE OPERATOR public.= (FUNCTION = public.always_label, LEFTARG = public.label,
                          RIGHTARG = text);
CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.side_effects VALUES ('unnest'); RETURN NEXT 'a'; END $$;
"""


def test_operators_and_functions_of_another_role_are_never_called(
    dsn: str, conn: psycopg.Connection[Any], database: Database, mallory: str
) -> None:
    """Operators on the user's types (exact matches, which an unqualified `<` or `=` would
    pick), a shadowing `<` on timestamptz and a public.unnest(text[]): the sweep deletes the
    rows its declaration says, and none of them runs, in a dry run, a real run and the
    gauges' status."""
    conn.execute(STAMPED)
    conn.execute("TRUNCATE public.side_effects")
    as_role(conn, mallory, HOSTILE)
    settings = build_settings(
        {"dsn": dsn, "max_eligible_fraction": "1"},
        {
            "sweeps": {
                "st": {
                    "table": "public.stamped",
                    "reason": "old",
                    "age": "at",
                    "retention": "30d",
                    "where": {"kind": ["a", "b"]},
                }
            }
        },
    )
    from reaper.commands import status

    (row,) = status.sweep_status(database, enabled(settings, ["st"]), settings)
    assert row.error is None and row.backlog_rows == 2
    (dry,) = run_sweeps(database, enabled(settings, ["st"]), engine_options(settings), dry_run=True)
    assert (dry.outcome, dry.rows) == ("success", 2), dry.error
    (result,) = run_sweeps(database, enabled(settings, ["st"]), engine_options(settings))
    assert (result.outcome, result.rows) == ("success", 2), result.error
    assert {r[0] for r in conn.execute("SELECT key FROM public.stamped")} == {
        "stay-c",
        "stay-young",
    }
    assert side_effects(conn) == []


# (case, [sweeps.m] keys, the words of the sweep's failure): names that are no column.
NO_SUCH_COLUMN = [
    # Attribute notation: m.evil_ts would call public.evil_ts(m); an unqualified name is a
    # column or nothing.
    ("attribute notation", {"age": "evil_ts"}, 'evil_ts\\" does not exist'),
    # The table's own name unqualified is a whole-row reference: no pg_catalog.< takes it.
    ("whole row", {"age": "members"}, "operator does not exist"),
    ("text of a call", {"age": "created_at", "where": {"evil_ts(members)": 1}}, "does not exist"),
]
MEMBERS = """
CREATE TYPE public.mood AS ENUM ('happy', 'sad');
CREATE TABLE public.members (key text, created_at timestamptz, mood public.mood);
INSERT INTO public.members VALUES ('old', now() - interval '40 days', 'happy'),
                                  ('young', now(), 'sad');
"""
MEMBER_TRAPS = """
CREATE FUNCTION public.evil_ts(public.members) RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.side_effects VALUES ('evil_ts'); DELETE FROM public.secrets;
RETURN '-infinity'; END $$;
CREATE FUNCTION public.row_lt(public.members, timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.side_effects VALUES ('row_lt'); RETURN true; END $$;
CREATE OPERATOR public.< (FUNCTION = public.row_lt, LEFTARG = public.members,
                          RIGHTARG = timestamptz);
CREATE FUNCTION public.mood_eq(public.mood, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.side_effects VALUES ('mood_eq'); RETURN true; END $$;
CREATE OPERATOR public.= (FUNCTION = public.mood_eq, LEFTARG = public.mood, RIGHTARG = text);
"""


def _members_config(tmp_path: Path, body: dict[str, Any]) -> Path:
    lines = ["[sweeps.m]", 'table = "public.members"', 'reason = "old"', 'retention = "30d"']
    for key, value in body.items():
        if isinstance(value, dict):
            inner = ", ".join(
                f'"{k}" = {v if isinstance(v, int) else json.dumps(v)}' for k, v in value.items()
            )
            lines.append(f"{key} = {{ {inner} }}")
        else:
            lines.append(f'{key} = "{value}"')
    path = tmp_path / f"{uuid.uuid4().hex[:6]}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("body", "words"), [(b, w) for _, b, w in NO_SUCH_COLUMN], ids=[c for c, _, _ in NO_SUCH_COLUMN]
)
def test_a_name_that_is_no_column_fails_the_sweep_and_runs_nothing(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    mallory: str,
    body: dict[str, Any],
    words: str,
) -> None:
    conn.execute(MEMBERS)
    as_role(conn, mallory, MEMBER_TRAPS)
    config = _members_config(tmp_path, body)
    for args in (("run-once", "--dry-run"), ("run-once",), ("status",)):
        run = run_reaper(
            *args, "--json", "--sweep", "m", "--config", str(config), env={"REAPER_DSN": dsn}
        )
        assert run.code == 1, (args, run.stderr)
        assert words in run.stdout + run.stderr, (args, run.stdout, run.stderr)
    assert side_effects(conn) == []
    assert conn.execute("SELECT count(*) FROM public.secrets").fetchone() == (10,)
    assert conn.execute("SELECT count(*) FROM public.members").fetchone() == (2,)


USER_TYPES = """
CREATE TYPE public.wrap AS (t timestamptz);
CREATE FUNCTION public.wrap_ts(public.wrap) RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.side_effects VALUES ('cast'); RETURN '-infinity'; END $$;
CREATE CAST (public.wrap AS timestamptz) WITH FUNCTION public.wrap_ts(public.wrap)
    AS IMPLICIT;
ALTER TABLE public.members ADD COLUMN c public.wrap;
UPDATE public.members SET c = ROW(now())::public.wrap;
CREATE VIEW public.member_refs AS SELECT key FROM public.members WHERE public.spy_view(key);
"""


# (case, [sweeps.m] keys, what the one line names)
USER_TYPE_DECLARATIONS = [
    # A composite column meets pg_catalog.< through the user's implicit cast.
    ("implicit cast of a composite", {"age": "c"}, "column c is of type public.wrap"),
    # An enum compared with a text literal, where the user's = (mood, text) waits.
    (
        "enum literal",
        {"age": "created_at", "where": {"mood": "happy"}},
        "column mood is of type public.mood",
    ),
    # A view runs its owner's code for every row it is read for.
    (
        "a view as the referencing table",
        {
            "age": "created_at",
            "keep_referenced": {"table": "public.member_refs", "column": "key", "key": "key"},
        },
        "table member_refs is not a table",
    ),
]


@pytest.mark.parametrize(
    ("body", "named"),
    [(b, n) for _, b, n in USER_TYPE_DECLARATIONS],
    ids=[c for c, _, _ in USER_TYPE_DECLARATIONS],
)
def test_columns_of_user_types_and_views_are_refused_before_any_statement(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    mallory: str,
    body: dict[str, Any],
    named: str,
) -> None:
    conn.execute(MEMBERS)
    as_role(conn, mallory, MEMBER_TRAPS)
    conn.execute("""
        CREATE FUNCTION public.spy_view(text) RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO public.side_effects VALUES ('view'); RETURN true; END $$;""")
    conn.execute(USER_TYPES)
    conn.execute("TRUNCATE public.side_effects")
    config = _members_config(tmp_path, body)
    for args in (("run-once", "--dry-run"), ("run-once",), ("status",)):
        run = run_reaper(*args, "--sweep", "m", "--config", str(config), env={"REAPER_DSN": dsn})
        assert run.code == 2, (args, run.stderr)
        assert len(run.stderr_lines) == 1 and named in run.stderr, run.stderr
    assert side_effects(conn) == []
    assert conn.execute("SELECT count(*) FROM public.members").fetchone() == (2,)


# SQL text that once ran code or read another table, and keys that do not exist: refused at
# load, before any connection.
LEGACY = [
    ("security definer", "enrolled_at < %(cutoff)s AND NOT public.innocent(peer_id)"),
    ("attribute notation", "nodes.evil_ts < %(cutoff)s"),
    ("whole row", "public.is_old(nodes) AND enrolled_at < %(cutoff)s"),
    ("enum literal", "public.f('happy') AND enrolled_at < %(cutoff)s"),
    (
        "column definition list",
        "EXISTS (SELECT 1 FROM json_to_record('{}') AS r(a public.d)) AND enrolled_at < %(cutoff)s",
    ),
    (
        "SQL/JSON",
        "JSON_EXISTS(jsonb '{}', '$.a' PASSING peer_id AS x) AND enrolled_at < %(cutoff)s",
    ),
    (
        "temporary files",
        "enrolled_at < %(cutoff)s AND (SELECT count(*) FROM "
        "generate_series(1, 100000000) a ORDER BY 1 LIMIT 1) > 0",
    ),
]


@pytest.mark.parametrize("predicate", [p for _, p in LEGACY], ids=[c for c, _ in LEGACY])
def test_sql_text_is_refused_at_load_in_every_command(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, predicate: str
) -> None:
    config = tmp_path / "reaper.toml"
    escaped = predicate.replace('"', '\\"')
    config.write_text(
        f'[sweeps.members]\ntable = "public.nodes"\nreason = "stale"\n'
        f'predicate = "{escaped}"\nretention = "30d"\n'
    )
    before = conn.execute("SELECT count(*) FROM nodes").fetchone()
    for args in (("run-once", "--dry-run"), ("run-once",), ("status",), ("check",)):
        run = run_reaper(*args, "--config", str(config), env={"REAPER_DSN": dsn})
        assert run.code == 2, (args, run.stderr)
        assert len(run.stderr_lines) == 1, run.stderr
        assert "[sweeps.members] predicate: SQL text is no longer accepted" in run.stderr
    assert conn.execute("SELECT count(*) FROM nodes").fetchone() == before


@pytest.mark.parametrize("key", ["columns", "from", "function", "sql", "expression"])
def test_a_declaration_has_no_key_for_code(tmp_path: Path, key: str) -> None:
    config = tmp_path / "reaper.toml"
    config.write_text(
        '[sweeps.members]\ntable = "public.nodes"\nreason = "stale"\nage = "enrolled_at"\n'
        f'retention = "30d"\n{key} = "x"\n'
    )
    run = run_reaper(
        "run-once", "--config", str(config), env={"REAPER_DSN": "postgresql://x@127.0.0.1:1/x"}
    )
    assert run.code == 2 and len(run.stderr_lines) == 1, run.stderr
    assert f"unknown key(s) {key}" in run.stderr


@pytest.mark.parametrize(
    "table",
    ["pg_catalog.pg_class", "information_schema.tables", "pg_toast.pg_toast_2619", "pg_temp_1.t"],
)
def test_a_catalog_table_is_never_a_target(tmp_path: Path, table: str) -> None:
    config = tmp_path / "reaper.toml"
    config.write_text(
        f'[sweeps.cat]\ntable = "{table}"\nreason = "old"\nage = "x"\nretention = "1d"\n'
    )
    run = run_reaper(
        "run-once",
        "--dry-run",
        "--config",
        str(config),
        env={"REAPER_DSN": "postgresql://x@127.0.0.1:1/x"},
    )
    assert run.code == 2 and len(run.stderr_lines) == 1, run.stderr
    assert f"[sweeps.cat] table: {table} is a table of the system catalog" in run.stderr


# -- row-level security and the superuser --------------------------------------------------------

GUARDED = """
CREATE TABLE public.guarded (key text, created_at timestamptz);
INSERT INTO public.guarded VALUES ('old', now() - interval '40 days'), ('young', now());
CREATE FUNCTION public.spy(k text) RETURNS boolean SECURITY DEFINER LANGUAGE plpgsql AS $$
BEGIN DELETE FROM public.secrets; INSERT INTO public.side_effects VALUES ('policy');
RETURN true; END $$;
ALTER TABLE public.guarded ENABLE ROW LEVEL SECURITY;
CREATE POLICY everyone ON public.guarded USING (public.spy(key));
GRANT SELECT, DELETE ON public.guarded TO reaper;
"""


def test_a_dry_run_on_a_table_with_a_policy_deletes_nothing(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, mallory: str
) -> None:
    """The table's policy runs its owner's function for every row reaper reads (PostgreSQL
    applies it to any role that is not the owner nor a superuser), and that function writes:
    the dry run, read-only, fails in one line that says why, and no row changes."""
    reaper_dsn = apply_grants(dsn)
    conn.execute(GUARDED)
    config = tmp_path / "reaper.toml"
    config.write_text(
        '[sweeps.g]\ntable = "public.guarded"\nreason = "old"\n'
        'age = "created_at"\nretention = "30d"\nmax_eligible_fraction = 1\n'
    )
    run = run_reaper(
        "run-once",
        "--dry-run",
        "--json",
        "--config",
        str(config),
        "--sweep",
        "g",
        env={"REAPER_DSN": reaper_dsn},
    )
    assert run.code == 1, run.stderr
    (result,) = run.json()
    assert result["error_type"] == "WriteInRead", result
    assert "nothing was written" in result["error"]
    assert conn.execute("SELECT count(*) FROM public.guarded").fetchone() == (2,)


def test_a_policy_function_cannot_write_during_a_dry_run(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, mallory: str
) -> None:
    reaper_dsn = apply_grants(dsn)
    conn.execute(GUARDED)
    config = tmp_path / "reaper.toml"
    config.write_text(
        '[sweeps.g]\ntable = "public.guarded"\nreason = "old"\n'
        'age = "created_at"\nretention = "30d"\n'
    )
    run_reaper(
        "run-once",
        "--dry-run",
        "--config",
        str(config),
        "--sweep",
        "g",
        env={"REAPER_DSN": reaper_dsn},
    )
    assert conn.execute("SELECT count(*) FROM public.secrets").fetchone() == (10,)


def test_a_superuser_is_warned_at_start_and_fails_check(dsn: str, tmp_path: Path) -> None:
    run = run_reaper("run-once", "--dry-run", "--sweep", "router_leases", env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    warnings = [e for e in run.events() if e.get("event") == "superuser_role"]
    assert len(warnings) == 1 and warnings[0]["level"] == "warning", run.stderr
    check = run_reaper("check", "--json", "--sweep", "router_leases", env={"REAPER_DSN": dsn})
    assert check.code == 1
    role = [f for f in check.json()["findings"] if f["check"] == "role"]
    assert role[0]["status"] == "fail" and "superuser" in role[0]["detail"]
    # The role of grants.sql is no superuser: no warning.
    reaper_dsn = apply_grants(dsn)
    quiet = run_reaper(
        "run-once", "--dry-run", "--sweep", "router_leases", env={"REAPER_DSN": reaper_dsn}
    )
    assert quiet.code == 0, quiet.stderr
    assert not [e for e in quiet.events() if e.get("event") == "superuser_role"]


def test_every_declared_sweep_of_the_example_compiles_from_data() -> None:
    from reaper import cli

    example = Path(__file__).resolve().parents[3] / "examples" / "token-table.toml"
    sweeps = [s for s in cli.load(example, {}).sweeps if not s.builtin]
    assert [s.name for s in sweeps] == ["worker_tokens", "machine_tokens"]
    assert all(s.predicate.text is None for s in sweeps)  # no SQL text: composed
    assert [s.name for s in configured_sweeps(build_settings({}))][:1] == ["nodes_session"]


OLD_TOKEN_EXAMPLE = """
[sweeps.worker_tokens]
table = "public.token"
reason = "worker_stale"
predicate = "(CASE WHEN token_type = 'worker' THEN updated_at END) < %(cutoff)s"
retention = "30d"

[sweeps.machine_tokens]
table = "public.token"
reason = "machine_inactive"
predicate = "(CASE WHEN token_type = 'machine' AND NOT active THEN created_at END) < %(cutoff)s"
retention = "90d"
"""
MIGRATION = (
    "reaper: reaper.toml: [sweeps.{name}] predicate: SQL text is no longer accepted; replace "
    "predicate and retention with: {new}"
)


def test_the_token_example_s_former_predicates_are_refused_with_their_declarations(
    tmp_path: Path,
) -> None:
    """The line docs/custom-sweeps.md shows, for each of the example's former sweeps."""
    nowhere = {"REAPER_DSN": "postgresql://x@127.0.0.1:1/x"}
    (tmp_path / "reaper.toml").write_text(OLD_TOKEN_EXAMPLE)
    run = run_reaper("run-once", "--config", "reaper.toml", env=nowhere, cwd=tmp_path)
    assert run.code == 2 and run.stderr_lines == [
        MIGRATION.format(
            name="worker_tokens",
            new='age = "updated_at", age_when = { token_type = "worker" }, retention = "30d"',
        )
    ], run.stderr
    machine = OLD_TOKEN_EXAMPLE[OLD_TOKEN_EXAMPLE.index("[sweeps.machine_tokens]") :]
    (tmp_path / "reaper.toml").write_text(machine)
    run = run_reaper("run-once", "--config", "reaper.toml", env=nowhere, cwd=tmp_path)
    assert run.code == 2 and run.stderr_lines == [
        MIGRATION.format(
            name="machine_tokens",
            new='age = "created_at", age_when = { token_type = "machine", active = false }, '
            'retention = "90d"',
        )
    ], run.stderr


def test_the_documented_dry_run_of_the_example(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """`reaper run-once --config examples/token-table.toml --dry-run --sweep worker_tokens`,
    as docs/custom-sweeps.md shows it, counts and deletes nothing."""
    root = Path(__file__).resolve().parents[3]
    conn.execute((root / "examples" / "token-table.sql").read_text())
    conn.execute("""
        INSERT INTO token (external_id, key, token_type, workspace_id, updated_at) VALUES
            (gen_random_uuid(), 'stale', 'worker', 1, now() - interval '31 days'),
            (gen_random_uuid(), 'fresh', 'worker', 1, now()),
            (gen_random_uuid(), 'other', 'machine', 1, now() - interval '31 days')""")
    run = run_reaper(
        "run-once",
        "--config",
        "examples/token-table.toml",
        "--dry-run",
        "--sweep",
        "worker_tokens",
        "--json",
        env={"REAPER_DSN": dsn},
        cwd=root,
    )
    assert run.code == 0, run.stderr
    assert run.json()[0]["rows"] == 1
    assert conn.execute("SELECT count(*) FROM token").fetchone() == (3,)
