"""The reaper role of grants.sql: least privilege, really.

grants.sql runs as the tables' owner (no superuser), twice (it converges, and takes back what an
older version granted); every reaper command then runs as the role; and every statement that
changes data other than by DELETE, or creates anything, is refused. ``reaper check`` warns about
a superuser, a table owner, and a role that can still create temporary tables.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from reaper.dev import demo
from tests.support import login_as, run_reaper, small_sizes
from tests.support.grants import TABLES, left_to_say, run_grants

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db


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


@pytest.mark.parametrize(
    "args",
    [
        ["run-once", "--dry-run"],
        ["run-once", "--strategy", "heap"],
        ["run-once", "--strategy", "index"],
        ["check"],
        ["status"],
        ["indexes", "ensure", "--dry-run"],
    ],
)
def test_every_command_runs_as_the_reaper_role(dsn: str, reaper_only: str, args: list[str]) -> None:
    demo.seed(dsn, small_sizes())
    run = run_reaper(*args, "--dsn", reaper_only)
    assert run.code == 0, run.stdout + run.stderr
    assert "permission denied" not in run.stdout + run.stderr
