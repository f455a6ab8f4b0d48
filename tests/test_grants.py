"""The reaper role of grants.sql: the sweeps run as it, it can do nothing else, and a missing
privilege is named with its table."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from reaper import demo
from reaper.cli import open_database
from reaper.runner import run_sweeps
from reaper.settings import build_settings
from reaper.sweeps import BUILTIN_SWEEPS
from tests.ops_helpers import apply_grants
from tests.test_status import small_sizes


@pytest.fixture
def reaper_dsn(dsn: str) -> str:
    return apply_grants(dsn)


def test_every_sweep_runs_as_the_reaper_role(dsn: str, reaper_dsn: str) -> None:
    demo.seed(dsn, small_sizes())
    before = demo.census(dsn)
    settings = build_settings({"dsn": reaper_dsn, "batch_size": 50})
    with open_database(settings) as db:
        results = run_sweeps(db, BUILTIN_SWEEPS, settings)
    assert [(r.sweep, r.outcome, r.error) for r in results] == [
        (s.name, "success", None) for s in BUILTIN_SWEEPS
    ]
    after = demo.census(dsn)
    for table, counts in after.items():
        assert counts["garbage"] == 0, table
        assert counts["keep"] == before[table]["keep"], table


def test_every_sweep_runs_without_any_update_privilege(dsn: str, reaper_dsn: str) -> None:
    """Batches take no row lock (FOR UPDATE needs UPDATE): SELECT and DELETE are enough."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("nodes", "routers", "enrollment_requests", "bootstrap_tokens"):
            conn.execute(f"REVOKE UPDATE ON {table} FROM reaper")
            for (column,) in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                " AND NOT attisdropped", (table,)
            ).fetchall():
                conn.execute(f"REVOKE UPDATE ({column}) ON {table} FROM reaper")
        row = conn.execute(
            "SELECT count(*) FROM information_schema.column_privileges"
            " WHERE grantee = 'reaper' AND privilege_type = 'UPDATE'"
        ).fetchone()
        assert row == (0,)
    demo.seed(dsn, small_sizes())
    before = demo.census(dsn)
    settings = build_settings({"dsn": reaper_dsn, "batch_size": 50})
    with open_database(settings) as db:
        results = run_sweeps(db, BUILTIN_SWEEPS, settings)
    assert [(r.sweep, r.outcome, r.error) for r in results] == [
        (s.name, "success", None) for s in BUILTIN_SWEEPS
    ]
    after = demo.census(dsn)
    for table, counts in after.items():
        assert counts["garbage"] == 0, table
        assert counts["keep"] == before[table]["keep"], table


def test_the_role_is_no_superuser_and_has_no_ddl(reaper_dsn: str) -> None:
    with psycopg.connect(reaper_dsn, autocommit=True) as conn:
        assert conn.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles "
            "WHERE rolname = current_user"
        ).fetchone() == (False, False, False)
        for stmt in (
            "CREATE TABLE public.x (i int)",
            "CREATE INDEX ON routers (address)",
            "INSERT INTO routers (router_id, address, lease_expires_at) VALUES ('r', 'a', now())",
            "UPDATE routers SET address = 'b'",
            "TRUNCATE routers",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(stmt)


def test_missing_privilege_names_it_and_the_table_and_the_rest_goes_on(
    dsn: str, reaper_dsn: str, conn: psycopg.Connection[Any]
) -> None:
    demo.seed(dsn, small_sizes())
    conn.execute("REVOKE DELETE ON nodes FROM reaper")
    conn.execute("REVOKE SELECT ON enrollment_requests FROM reaper")
    settings = build_settings({"dsn": reaper_dsn})
    with open_database(settings) as db:
        results = {r.sweep: r for r in run_sweeps(db, BUILTIN_SWEEPS, settings)}
    for name in ("nodes_session", "nodes_silent", "nodes_ephemeral"):
        assert results[name].outcome == "failure"
        assert results[name].error == (
            "nodes: permission denied for table nodes: role reaper lacks DELETE on table nodes "
            "(grant it: GRANT DELETE ON nodes TO reaper; see reaper/sql/grants.sql)"
        )
    # The token sweep reads the requests (its anti-join): it names that table.
    assert "lacks SELECT on table enrollment_requests" in str(results["bootstrap_tokens"].error)
    assert results["router_leases"].outcome == "success"
    assert results["router_leases"].rows > 0
