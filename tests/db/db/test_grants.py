"""The reaper role of grants.sql: least privilege, really.

grants.sql runs as the tables' owner (no superuser), twice (it converges, and takes back what an
older version granted); every reaper command then runs as the role; and every statement that
changes data other than by DELETE, or creates anything, is refused. ``reaper check`` warns about
a superuser, a table owner, and a role that can still create temporary tables.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from reaper import sqltext
from reaper.cli import open_database
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.dev import demo
from reaper.engine.run import run_sweeps
from tests.support import BUILTIN_SWEEPS, login_as, small_sizes, sweeps_of
from tests.support.grants import TABLES, left_to_say, run_grants
from tests.support.ops import apply_grants, run_json

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db


# Each statement the reaper role must be refused, on the demo schema.
FORBIDDEN = [
    "UPDATE nodes SET peer_id = 'x' || peer_id",
    "UPDATE routers SET router_id = router_id",
    "UPDATE enrollment_requests SET peer_id = peer_id",
    "UPDATE bootstrap_tokens SET token_hash = token_hash",
    "INSERT INTO routers (router_id, address, lease_expires_at) VALUES ('r', 'a', now())",
    "TRUNCATE routers",
    "TRUNCATE nodes CASCADE",
    "CREATE TABLE public.reaper_owns (i int)",
    "CREATE TEMPORARY TABLE reaper_temp (i int)",
    "CREATE INDEX ON routers (address)",
    "ALTER TABLE routers ADD COLUMN x int",
    "DROP TABLE routers",
    "CREATE TRIGGER t BEFORE DELETE ON routers "
    "EXECUTE FUNCTION suppress_redundant_updates_trigger()",
    "SELECT * FROM routers FOR UPDATE",
    "SELECT * FROM nodes FOR NO KEY UPDATE",
    "CREATE SCHEMA reaper_schema",
    "CREATE FUNCTION public.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "COPY routers FROM STDIN",
]


@pytest.fixture
def owner_dsn(dsn: str) -> Iterator[str]:
    """The DSN of a role that owns the demo tables and is no superuser (nor may create roles);
    role reaper exists (an administrator's one-time step where the owner cannot create it)."""
    dbname = str(conninfo_to_dict(dsn)["dbname"])
    owner = f"owner_{dbname}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEROLE").format(sql.Identifier(owner))
        )
        for table in TABLES:
            admin.execute(
                sql.SQL("ALTER TABLE {} OWNER TO {}").format(
                    sql.Identifier(table), sql.Identifier(owner)
                )
            )
        admin.execute(
            "DO $$ BEGIN CREATE ROLE reaper LOGIN; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        # An older grants.sql gave UPDATE on the key columns: the new one takes it back.
        admin.execute("GRANT UPDATE (peer_id) ON nodes TO reaper")
        admin.execute("GRANT UPDATE (router_id), INSERT ON routers TO reaper")
    try:
        yield login_as(dsn, owner)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("REASSIGN OWNED BY {} TO postgres").format(sql.Identifier(owner)))
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(owner)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(owner)))


@pytest.fixture
def reaper_only(dsn: str, owner_dsn: str) -> str:
    """grants.sql applied twice by the owner, TEMPORARY revoked from PUBLIC on this test's
    database (the operator's call, made here): the DSN of the reaper role."""
    run_grants(owner_dsn)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC").format(
                sql.Identifier(str(conninfo_to_dict(dsn)["dbname"]))
            )
        )
    assert run_grants(owner_dsn) == left_to_say(dsn)  # nothing else left to say
    return login_as(dsn, "reaper")


def privileges(conn: psycopg.Connection[Any], table: str) -> dict[str, bool]:
    out = {}
    for p in ("SELECT", "DELETE", "INSERT", "UPDATE", "TRUNCATE", "REFERENCES", "TRIGGER"):
        column = p in ("SELECT", "INSERT", "UPDATE", "REFERENCES")  # column-level privileges
        row = conn.execute(
            "SELECT has_table_privilege('reaper', %s, %s),"
            " %s AND has_any_column_privilege('reaper', %s, %s)",
            (table, p, column, table, p if column else "SELECT"),
        ).fetchone()
        assert row is not None
        out[p] = bool(row[0] or row[1])
    return out


def test_grants_sql_runs_twice_as_the_owner_and_grants_select_and_delete_only(
    owner_dsn: str, conn: psycopg.Connection[Any]
) -> None:
    first = run_grants(owner_dsn)
    second = run_grants(owner_dsn)
    # PUBLIC still holds TEMPORARY here: said, both times, not fixed behind the operator's back.
    assert any("temporary tables" in n for n in first) and first == second
    for table in TABLES:
        assert privileges(conn, table) == {
            "SELECT": True,
            "DELETE": True,
            "INSERT": False,
            "UPDATE": False,
            "TRUNCATE": False,
            "REFERENCES": False,
            "TRIGGER": False,
        }, table


def test_grants_sql_says_who_must_create_the_role(dsn: str) -> None:
    """Without the role and without CREATEROLE, the owner is told what to ask for."""
    text = next(s for s in sqltext.statements("grants.sql") if "CREATE ROLE" in s)
    assert "CREATE ROLE reaper LOGIN" in text and "CREATEROLE" not in text.split("THEN")[0]
    assert re.search(r"may not create roles", text)


@pytest.mark.parametrize("statement", FORBIDDEN)
def test_every_forbidden_statement_is_refused(reaper_only: str, statement: str) -> None:
    with (
        psycopg.connect(reaper_only, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        if statement.startswith("COPY"):
            with conn.cursor().copy(statement) as copy:
                copy.write_row(("r", "a", "2020-01-01"))
        else:
            conn.execute(statement)


def test_what_the_role_may_do(reaper_only: str, dsn: str) -> None:
    demo.seed(dsn, small_sizes())
    with psycopg.connect(reaper_only, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
        conn.execute("DELETE FROM routers WHERE router_id LIKE 'garbage-%'")
        # The optimistic heap-walk batch's way of skipping a row a writer holds: no row lock.
        conn.execute("SELECT pg_try_advisory_lock(1), pg_advisory_unlock_all()")


def test_every_sweep_runs_as_the_reaper_role(dsn: str, reaper_only: str) -> None:
    demo.seed(dsn, small_sizes())
    before = demo.census(dsn)
    settings = build_settings({"dsn": reaper_only, "batch_size": 50})
    with open_database(settings) as db:
        results = run_sweeps(db, tuple(sweeps_of(settings).values()), engine_options(settings))
    assert [(r.sweep, r.outcome, r.error) for r in results] == [
        (s.name, "success", None) for s in BUILTIN_SWEEPS
    ]
    after = demo.census(dsn)
    for table, counts in after.items():
        assert counts["garbage"] == 0, table
        assert counts["keep"] == before[table]["keep"], table


def test_check_agrees_with_the_batches_about_update(reaper_only: str, capsys) -> None:
    """SELECT and DELETE are all the check asks for, and all the batches need."""
    code, doc = run_json(capsys, "check", "--dsn", reaper_only)
    assert not [f for f in doc["findings"] if f["subject"].startswith("UPDATE on")]
    assert code == 0, [f for f in doc["findings"] if f["status"] == "fail"]


def test_check_fails_a_superuser_and_warns_about_an_owner_and_temporary_tables(
    dsn: str, owner_dsn: str, capsys
) -> None:
    run_grants(owner_dsn)
    _, as_superuser = run_json(capsys, "check", "--dsn", dsn, "--sweep", "router_leases")
    assert any(
        f["check"] == "role" and f["status"] == "fail" and "superuser" in f["detail"]
        for f in as_superuser["findings"]
    )
    _, as_owner = run_json(capsys, "check", "--dsn", owner_dsn, "--sweep", "router_leases")
    assert any(
        f["check"] == "privileges" and f["status"] == "warn" and "owns table routers" in f["detail"]
        for f in as_owner["findings"]
    ), as_owner
    _, as_reaper = run_json(
        capsys, "check", "--dsn", login_as(dsn, "reaper"), "--sweep", "router_leases"
    )
    temp = [f for f in as_reaper["findings"] if f["subject"].startswith("TEMPORARY on")]
    assert temp and temp[0]["status"] == "warn" and "REVOKE TEMPORARY" in temp[0]["fix"]
    assert not any("owns table" in f["detail"] for f in as_reaper["findings"])


def test_check_is_quiet_about_temporary_tables_once_revoked(reaper_only: str, capsys) -> None:
    _, doc = run_json(capsys, "check", "--dsn", reaper_only, "--sweep", "router_leases")
    assert not [f for f in doc["findings"] if f["subject"].startswith("TEMPORARY on")]


def test_missing_privilege_names_it_and_the_table_and_the_rest_goes_on(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    reaper_dsn = apply_grants(dsn)
    demo.seed(dsn, small_sizes())
    conn.execute("REVOKE DELETE ON nodes FROM reaper")
    conn.execute("REVOKE SELECT ON enrollment_requests FROM reaper")
    settings = build_settings({"dsn": reaper_dsn})
    with open_database(settings) as db:
        results = {
            r.sweep: r
            for r in run_sweeps(db, tuple(sweeps_of(settings).values()), engine_options(settings))
        }
    for name in ("nodes_session", "nodes_silent", "nodes_ephemeral"):
        assert results[name].outcome == "failure"
        assert results[name].error == (
            "nodes: permission denied for table nodes: role reaper lacks DELETE on table nodes "
            f"(grant it: GRANT DELETE ON public.nodes TO reaper; see {sqltext.where('grants.sql')})"
        )
    # The token sweep reads the requests (its anti-join): it names that table.
    assert "lacks SELECT on table enrollment_requests" in str(results["bootstrap_tokens"].error)
    assert results["router_leases"].outcome == "success"
    assert results["router_leases"].rows > 0


def test_every_sweep_runs_without_any_update_privilege(dsn: str) -> None:
    """Batches take no row lock (FOR UPDATE needs UPDATE): SELECT and DELETE are enough."""
    reaper_dsn = apply_grants(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("nodes", "routers", "enrollment_requests", "bootstrap_tokens"):
            conn.execute(f"REVOKE UPDATE ON {table} FROM reaper")
            for (column,) in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                " AND NOT attisdropped",
                (table,),
            ).fetchall():
                conn.execute(f"REVOKE UPDATE ({column}) ON {table} FROM reaper")
        row = conn.execute(
            "SELECT count(*) FROM information_schema.column_privileges"
            " WHERE grantee = 'reaper' AND privilege_type = 'UPDATE'"
            " AND table_catalog = current_database()"
        ).fetchone()
        assert row == (0,)
    demo.seed(dsn, small_sizes())
    before = demo.census(dsn)
    settings = build_settings({"dsn": reaper_dsn, "batch_size": 50})
    with open_database(settings) as db:
        results = run_sweeps(db, tuple(sweeps_of(settings).values()), engine_options(settings))
    assert [(r.sweep, r.outcome, r.error) for r in results] == [
        (s.name, "success", None) for s in BUILTIN_SWEEPS
    ]
    after = demo.census(dsn)
    for table, counts in after.items():
        assert counts["garbage"] == 0, table
        assert counts["keep"] == before[table]["keep"], table
