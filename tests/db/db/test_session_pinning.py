"""Every reaper session behaves the same whatever the database, the role or an earlier
statement set: the settings of :mod:`reaper.db.pinning` are pinned at connect and again on
every checkout from the pool.

Each hostile setting is set with ``ALTER DATABASE ... SET`` and with ``ALTER ROLE ... IN
DATABASE ... SET`` in a fresh database seeded with the demo's garbage and live rows; every
built-in sweep must then delete exactly the rows it deletes under the defaults, and keep the
rest. The database also holds what another role with CREATE on a schema could leave there:
a schema ``staging`` with same-named copies of the four tables (garbage included), and
functions and operators in ``public`` that shadow built-in ones and record every call. No
case may touch a copy or call one of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from reaper import errors
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.config.sweeps import configured_sweeps, dependency_order
from reaper.db import ConnectionSettings, Database, error_kind
from reaper.db.pinning import FIXED_SETTINGS
from reaper.dev import demo, devserver
from reaper.engine.run import run_sweeps
from tests.support import KEYS, keys, small_sizes
from tests.support.ops import run_cli

# (setting, value) pairs a database or role may carry; each case is one or more of them.
HOSTILE: dict[str, list[tuple[str, str]]] = {
    "standard_conforming_strings": [("standard_conforming_strings", "off")],
    "serializable": [
        ("default_transaction_isolation", "serializable"),
        ("default_transaction_deferrable", "on"),
    ],
    "repeatable_read": [("default_transaction_isolation", "repeatable read")],
    "datestyle": [("DateStyle", "SQL, DMY")],
    "intervalstyle_sql_standard": [("IntervalStyle", "sql_standard")],
    "intervalstyle_iso_8601": [("IntervalStyle", "iso_8601")],
    "timezone": [("TimeZone", "Pacific/Kiritimati")],
    "statement_timeout": [("statement_timeout", "2ms")],
    "lock_timeout": [("lock_timeout", "1ms")],
    "idle_in_transaction": [("idle_in_transaction_session_timeout", "1ms")],
    "extra_float_digits": [("extra_float_digits", "-15")],
    "bytea_output": [("bytea_output", "escape")],
    "row_security_off": [("row_security", "off")],
    "transform_null_equals": [("transform_null_equals", "on")],
    "no_index_scans": [
        ("enable_indexscan", "off"),
        ("enable_bitmapscan", "off"),
        ("enable_tidscan", "off"),
    ],
    "application_name": [("application_name", "tampered")],
    "exit_on_error": [("exit_on_error", "on")],
    "session_replication_role": [("session_replication_role", "replica")],
    "gin_fuzzy_search_limit": [("gin_fuzzy_search_limit", "1")],
    "plan_cache_mode": [("plan_cache_mode", "force_generic_plan")],
    "client_encoding": [("client_encoding", "LATIN1")],
    "xmloption": [("xmloption", "document")],
    "synchronous_commit": [("synchronous_commit", "remote_apply")],
    # The decoy tables first, then the shadowing functions and operators ahead of pg_catalog.
    "search_path": [("search_path", "staging, public, pg_catalog")],
    "search_path_temp_first": [("search_path", "pg_temp, staging, public")],
}
HOSTILE["everything"] = [
    pair
    for name, pairs in HOSTILE.items()
    if name not in ("everything", "repeatable_read", "intervalstyle_iso_8601")
    for pair in pairs
]


def _settings(dsn: str) -> Any:
    # As conftest's: the interlock and the live-traffic pacer off (the seeding connection a
    # moment before is live traffic).
    return build_settings({"dsn": dsn, "max_eligible_fraction": "1", "busy_share": "1"})


# Built-in names another role may shadow in public (a function of an exact argument type wins
# over pg_catalog's polymorphic one; an operator in a schema earlier on the path wins): each
# records its call in public.calls (or, in a read-only transaction, fails with SHADOW_CALLED),
# then answers as pg_catalog's would.
SHADOW_CALLED = "shadow called"
SHADOWS = [
    ("unnest(a text[])", "SETOF text", "RETURN QUERY SELECT pg_catalog.unnest(a)"),
    ("unnest(a tid[])", "SETOF tid", "RETURN QUERY SELECT pg_catalog.unnest(a)"),
    ("now()", "timestamptz", "RETURN pg_catalog.now()"),
    ("set_config(a text, b text, c boolean)", "text", "RETURN pg_catalog.set_config(a, b, c)"),
    ("current_setting(a text)", "text", "RETURN pg_catalog.current_setting(a)"),
    ("pg_backend_pid()", "integer", "RETURN pg_catalog.pg_backend_pid()"),
    ("to_regclass(a text)", "regclass", "RETURN pg_catalog.to_regclass(a)"),
    ("greatest_lt(a timestamptz, b timestamptz)", "boolean", "RETURN a OPERATOR(pg_catalog.<) b"),
    ("tid_eq(a tid, b tid)", "boolean", "RETURN a OPERATOR(pg_catalog.=) b"),
]
OPERATORS = [
    ("<", "timestamptz", "timestamptz", "greatest_lt"),
    ("=", "tid", "tid", "tid_eq"),
]


def _plant_decoys(dsn: str) -> None:
    """Same-named copies of the four tables in schema staging, with the same rows, and the
    shadowing functions and operators of SHADOWS in public."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA staging")
        for table in KEYS:
            conn.execute(
                sql.SQL("CREATE TABLE staging.{t} AS SELECT * FROM public.{t}").format(
                    t=sql.Identifier(table)
                )
            )
        conn.execute("CREATE TABLE public.calls (name text)")
        conn.execute("GRANT INSERT ON public.calls TO PUBLIC")
        for signature, returns, body in SHADOWS:
            name = signature.split("(")[0]
            conn.execute(
                f"CREATE FUNCTION public.{signature} RETURNS {returns} LANGUAGE plpgsql AS $$ "
                "BEGIN IF pg_catalog.current_setting('transaction_read_only') = 'on' THEN "
                f"RAISE EXCEPTION '{SHADOW_CALLED}: {name}'; END IF; "
                f"INSERT INTO public.calls VALUES ('{name}'); {body}; END $$"
            )
        for op, left, right, function in OPERATORS:
            conn.execute(
                f"CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, "
                f"FUNCTION = public.{function})"
            )


def _decoys_untouched(dsn: str) -> None:
    with psycopg.connect(
        dsn, autocommit=True, options="-c search_path=pg_catalog -c statement_timeout=0"
    ) as conn:
        conn.execute("SET ROLE NONE")
        for table in KEYS:
            copy, real = (
                conn.execute(
                    sql.SQL("SELECT count(*) FROM {}.{}").format(
                        sql.Identifier(schema), sql.Identifier(table)
                    )
                ).fetchone()
                for schema in ("staging", "public")
            )
            assert copy is not None and real is not None
            assert copy[0] > real[0], table  # the copy kept its garbage
        assert conn.execute("SELECT name FROM public.calls").fetchall() == []


@pytest.fixture
def fresh(pg_server: str, template_db: str) -> Iterator[str]:
    """A fresh database with the reference schema and the demo's rows (garbage and live), and
    the decoys of :func:`_plant_decoys`."""
    dsn = devserver.create_database(pg_server, template=template_db)
    try:
        demo.seed(dsn, small_sizes())
        _plant_decoys(dsn)
        yield dsn
    finally:
        devserver.drop_database(dsn)


def _sweep_all(dsn: str, decoys: bool = True) -> tuple[dict[str, set[str]], dict[str, int]]:
    """Run every built-in sweep once; the keys left in each table, and rows deleted per sweep.
    ``decoys``: the database has those of :func:`_plant_decoys`, which must be untouched."""
    settings = _settings(dsn)
    sweeps = dependency_order(configured_sweeps(settings))
    with Database(connection_settings(settings)) as db:
        results = run_sweeps(db, sweeps, engine_options(settings))
    for r in results:
        assert r.outcome == "success", (r.sweep, r.error_type, r.error)
    # The test's own look, as the role it logged in as, under no hostile timeout or path.
    with psycopg.connect(
        dsn, autocommit=True, options="-c statement_timeout=0 -c search_path=public"
    ) as conn:
        conn.execute("SET ROLE NONE")
        left = {table: keys(conn, table) for table in KEYS}
    if decoys:
        _decoys_untouched(dsn)
    return left, {r.sweep: r.rows for r in results}


@pytest.fixture(scope="module")
def baseline(pg_server: str, template_db: str) -> tuple[dict[str, set[str]], dict[str, int]]:
    """What the sweeps delete and keep under the server's defaults."""
    dsn = devserver.create_database(pg_server, template=template_db)
    try:
        demo.seed(dsn, small_sizes())
        left, rows = _sweep_all(dsn, decoys=False)
    finally:
        devserver.drop_database(dsn)
    assert all(n > 0 for n in rows.values()), rows  # every sweep had garbage to delete
    return left, rows


def _set(dsn: str, level: str, pairs: list[tuple[str, str]], extra_role: str | None) -> None:
    name = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        for setting, value in pairs:
            # A list setting takes its elements unquoted ('a, b' would be one schema).
            given = sql.SQL(value) if setting == "search_path" else sql.Literal(value)
            if level == "database":
                stmt = sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(name), sql.Identifier(setting), given
                )
            else:
                stmt = sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} SET {} = {}").format(
                    sql.Identifier(name), sql.Identifier(setting), given
                )
            conn.execute(stmt)
        if extra_role:
            # The role reaper logs in as switches to another one at connect.
            target = (
                sql.SQL("ALTER DATABASE {}").format(sql.Identifier(name))
                if level == "database"
                else sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {}").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("{} SET role = {}").format(target, sql.Literal(extra_role)))


@pytest.mark.slow
@pytest.mark.parametrize("level", ["database", "role"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_setting_changes_nothing_a_sweep_does(
    fresh: str,
    level: str,
    case: str,
    baseline: tuple[dict[str, set[str]], dict[str, int]],
) -> None:
    _set(fresh, level, HOSTILE[case], None)
    assert _sweep_all(fresh) == baseline


@pytest.mark.slow
@pytest.mark.parametrize("level", ["database", "role"])
def test_a_role_switch_at_connect_is_undone(
    fresh: str,
    level: str,
    baseline: tuple[dict[str, set[str]], dict[str, int]],
) -> None:
    """``ALTER ... SET role = other``: every statement would run as a role that may not
    delete anything; reaper acts as the role it logged in as."""
    other = f"reaper_nobody_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(fresh, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(other)))
        conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(other)))
    try:
        _set(fresh, level, [], other)
        with psycopg.connect(fresh, autocommit=True) as conn:  # the role switch is real
            assert conn.execute("SELECT current_user").fetchone() == (other,)
        assert _sweep_all(fresh) == baseline
    finally:
        devserver.drop_database(fresh)
        with psycopg.connect(devserver.with_dbname(fresh, "postgres"), autocommit=True) as c:
            c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(other)))


# What a statement of one checkout may change, and what the next checkout must see again.
TAMPER = {
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    "application_name": "tampered",
    "standard_conforming_strings": "off",
    "default_transaction_isolation": "serializable",
    "DateStyle": "SQL, DMY",
    "IntervalStyle": "sql_standard",
    "TimeZone": "Asia/Kathmandu",
    "extra_float_digits": "-15",
    "bytea_output": "escape",
    "row_security": "off",
    "enable_indexscan": "off",
    "exit_on_error": "on",
    "search_path": "staging, public",
    "default_transaction_read_only": "on",
}


def _show(session: Any, name: str) -> str:
    return str(session.scalar(sql.SQL("SELECT current_setting({})").format(sql.Literal(name))))


def test_a_setting_a_statement_changed_does_not_reach_the_next_checkout(dsn: str) -> None:
    cs = ConnectionSettings(dsn=dsn)
    expected = {name: cs.pinned()[name] for name in TAMPER if name in cs.pinned()}
    with Database(cs, max_connections=1) as db:
        with db.session() as session:
            pid = session.backend_pid
            assert _show(session, "search_path") == "pg_catalog, pg_temp"
            pinned_now = {name: _show(session, name) for name in expected}
            for name, value in TAMPER.items():
                session.execute(
                    sql.SQL("SELECT set_config({}, {}, false)").format(
                        sql.Literal(name), sql.Literal(value)
                    )
                )
            assert _show(session, "application_name") == "tampered"
        for _ in range(2):
            with db.session() as session:
                assert session.backend_pid == pid  # the same pooled connection
                assert {name: _show(session, name) for name in expected} == pinned_now
                assert _show(session, "search_path") == "pg_catalog, pg_temp"
                assert _show(session, "default_transaction_read_only") == "off"
                with session._conn.transaction():
                    assert _show(session, "transaction_isolation") == "read committed"
                    assert _show(session, "transaction_read_only") == "off"
                for name, value in TAMPER.items():
                    session.execute(
                        sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
                    )
    # The values as the server shows them (10s for 10000ms, ...) are those of the pin.
    assert pinned_now["application_name"] == "reaper"
    assert pinned_now["standard_conforming_strings"] == "on"
    assert pinned_now["DateStyle"] == FIXED_SETTINGS["DateStyle"]


def test_a_read_only_session_refuses_writes_and_the_next_one_may_write(dsn: str) -> None:
    with Database(ConnectionSettings(dsn=dsn), max_connections=1) as db:
        with db.session(read_only=True) as session:
            assert _show(session, "transaction_read_only") == "on"
            with pytest.raises(errors.ReadOnlyDatabase):
                session.execute("DELETE FROM public.routers")
            # Inside an explicit transaction too.
            with (
                pytest.raises(errors.ReadOnlyDatabase),
                session._errors(),
                session._conn.transaction(),
            ):
                session._conn.execute("DELETE FROM public.routers")
        with db.session() as session:
            assert _show(session, "transaction_read_only") == "off"
            session.execute("DELETE FROM public.routers")


@pytest.mark.parametrize(
    ("sqlstate", "kind"),
    [
        ("40001", errors.TransactionConflict),
        ("40P01", errors.TransactionConflict),
        ("55000", errors.TableProblem),
        ("55006", errors.TableProblem),
        ("42P01", errors.ObjectMissing),
        ("42883", errors.ObjectMissing),
        ("42501", errors.PrivilegeMissing),
        ("23503", errors.ForeignKeyConflict),
        ("23001", errors.ForeignKeyConflict),  # ON DELETE RESTRICT, PostgreSQL 18
        ("23505", errors.DatabaseError),
        ("22012", errors.DatabaseError),
        ("54000", errors.DatabaseError),
        ("25006", errors.ReadOnlyDatabase),
        ("55P03", errors.LockTimeout),
        ("08006", errors.ConnectionFailed),
        ("53300", errors.ConnectionFailed),
        ("53200", errors.ConnectionFailed),
        ("53100", errors.TableProblem),
        ("57000", errors.ConnectionFailed),
        ("57P01", errors.ConnectionFailed),
        ("57P03", errors.ConnectionFailed),
        ("58030", errors.TableProblem),
        ("XX001", errors.TableProblem),
    ],
)
def test_an_error_is_a_connection_failure_only_by_its_class(
    database: Database,
    sqlstate: str,
    kind: type[errors.DatabaseError],
) -> None:
    """The server raises each SQLSTATE in a statement; only the connection's and the
    server's own classes are ConnectionFailed (which turns /readyz to 503); a table's own
    (object state, damaged files, its disk full) is a TableProblem."""
    with database.session() as session, pytest.raises(errors.DatabaseError) as caught:
        session.execute(
            sql.SQL("DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = {}; END $$").format(
                sql.Literal(sqlstate)
            )
        )
    assert type(caught.value) is kind, (sqlstate, type(caught.value))
    assert caught.value.sqlstate == sqlstate
    with database.session() as session:
        assert session.scalar("SELECT 1") == 1  # the pool's connection is usable again


@pytest.mark.parametrize(
    ("sqlstate", "kind"),
    [
        (None, errors.DatabaseError),
        ("40001", errors.TransactionConflict),
        ("40P01", errors.TransactionConflict),
        ("40003", errors.TransactionConflict),
        ("08000", errors.ConnectionFailed),
        ("08P01", errors.ConnectionFailed),
        ("28P01", errors.ConnectionFailed),
        ("3D000", errors.ConnectionFailed),
        ("57P02", errors.ConnectionFailed),
        ("57P04", errors.ConnectionFailed),
        ("57P05", errors.ConnectionFailed),
        ("25P03", errors.ConnectionFailed),
        ("57000", errors.ConnectionFailed),
        ("57P03", errors.ConnectionFailed),
        ("53000", errors.ConnectionFailed),
        ("53200", errors.ConnectionFailed),
        ("53300", errors.ConnectionFailed),
        ("57014", errors.StatementCanceled),
        ("55P03", errors.LockTimeout),
        ("55000", errors.TableProblem),
        ("55006", errors.TableProblem),
        ("53100", errors.TableProblem),
        ("53400", errors.TableProblem),
        ("58030", errors.TableProblem),
        ("XX000", errors.TableProblem),
        ("XX001", errors.TableProblem),
        ("XX002", errors.TableProblem),
        ("42601", errors.DatabaseError),
        ("23505", errors.DatabaseError),
    ],
)
def test_error_kind_by_sqlstate(sqlstate: str | None, kind: type[errors.DatabaseError]) -> None:
    assert error_kind(sqlstate) is kind
    assert error_kind(None, connection_gone=True) is errors.ConnectionFailed


@pytest.mark.parametrize(
    "sqlstate",
    [
        "40001",
        "40P01",
        "55000",
        "55006",
        "42P01",
        "42501",
        "23505",
        "53100",
        "58030",
        "XX001",
    ],
)
def test_a_statement_s_own_error_is_no_outage(sqlstate: str) -> None:
    """/readyz turns 503 on an outage only: one table's serialization failure, deadlock or
    object in use leaves the daemon ready."""
    from reaper.daemon.policy import is_outage

    assert not is_outage(error_kind(sqlstate).__name__)
    assert is_outage(error_kind("08006").__name__)
    assert is_outage(error_kind("57P01").__name__)


@pytest.mark.parametrize("level", ["database", "role"])
def test_reads_never_call_a_shadowing_function_or_read_a_decoy(
    fresh: str, level: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """check, status and a dry run read the catalog and the tables: under a search_path that
    puts the decoys and the shadowing functions first, they answer about public's tables and
    call nothing of public's."""
    _set(fresh, level, HOSTILE["search_path"], None)
    for argv in (["check"], ["status"], ["run-once", "--dry-run"]):
        code, out, err = run_cli(capsys, *argv, "--dsn", fresh, "--json")
        assert code == (1 if argv == ["check"] else 0), (argv, err)  # check fails a superuser
        assert "staging" not in out and SHADOW_CALLED not in out + err, argv
    with psycopg.connect(fresh, autocommit=True, options="-c search_path=pg_catalog") as conn:
        assert conn.execute("SELECT name FROM public.calls").fetchall() == []
