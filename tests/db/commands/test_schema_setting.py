"""A control plane whose tables live in another schema than public: ``schema`` names it once
for the built-in sweeps, and every command reads and deletes there, whatever the role's
search_path, while same-named tables in public keep every row.

The database holds the reference schema twice, both seeded with the demo's garbage and live
rows: in ``controlplane`` (the control plane's) and in ``public`` (a decoy).
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from reaper import sqltext
from reaper.dev import demo
from reaper.sqltext.sqlinfo import shipped_indexes
from tests.support import login_as, small_sizes
from tests.support.ops import run_cli, run_json

pytestmark = pytest.mark.fresh_db

SCHEMA = "controlplane"


def _in(dsn: str, schema: str) -> str:
    return make_conninfo(dsn, options=f'-c search_path="{schema}"')


def _load(dsn: str, schema: str) -> str:
    """The reference schema and its indexes in ``schema`` of ``dsn``, seeded, and public's
    copy seeded too."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    with psycopg.connect(_in(dsn, schema), autocommit=True) as conn:
        # The file names its tables in public, the reference schema's.
        there = sql.Identifier(schema).as_string(conn) + "."
        for stmt in sqltext.statements("schema.sql"):
            conn.execute(stmt.replace("public.", there))  # type: ignore[arg-type]
        for spec in shipped_indexes(schema):
            conn.execute(spec.statement)  # type: ignore[arg-type]
    demo.seed(_in(dsn, schema), small_sizes())
    demo.seed(dsn, small_sizes())
    return dsn


@pytest.fixture
def two(dsn: str) -> str:
    """``dsn``, its control plane's tables and indexes in schema controlplane, both copies
    seeded."""
    return _load(dsn, SCHEMA)


def _census(dsn: str, schema: str) -> dict[str, dict[str, int]]:
    with psycopg.connect(_in(dsn, schema), autocommit=True) as conn:
        return demo.count_kinds(conn)


def _reaper_role(dsn: str, schema: str = SCHEMA) -> str:
    """grants.sql for the tables of ``schema``, as the owner; the reaper role's DSN, whose
    search_path puts public's same-named tables first."""
    with psycopg.connect(dsn, autocommit=True, options=f"-c reaper.schema={schema}") as conn:
        for stmt in sqltext.statements("grants.sql"):
            conn.execute(stmt)  # type: ignore[arg-type]
        conn.execute("GRANT USAGE ON SCHEMA public TO reaper")
        conn.execute("GRANT SELECT, DELETE ON ALL TABLES IN SCHEMA public TO reaper")
        dbname = conn.info.dbname
        conn.execute(f'ALTER ROLE reaper IN DATABASE "{dbname}" SET search_path = public')
    return login_as(dsn, "reaper")


@pytest.mark.parametrize("schema", [SCHEMA, "Ctl_Plane"])
def test_a_run_deletes_in_the_configured_schema_and_nowhere_else(
    dsn: str, schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _load(dsn, schema)
    before = _census(dsn, "public")
    code, rows = run_json(
        capsys,
        "run-once",
        "--dsn",
        _reaper_role(dsn, schema),
        "--schema",
        schema,
        "--max-eligible-fraction",
        "1",
        "--busy-share",
        "1",
    )
    assert code == 0, rows
    assert {r["table"] for r in rows} == {
        f"{schema}.{t}" for t in ("nodes", "enrollment_requests", "bootstrap_tokens", "routers")
    }
    after = _census(dsn, schema)
    assert all(kinds["garbage"] == 0 and kinds["keep"] > 0 for kinds in after.values()), after
    assert _census(dsn, "public") == before


def test_check_finds_the_indexes_of_the_configured_schema(
    two: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = run_json(capsys, "check", "--dsn", _reaper_role(two), "--schema", SCHEMA)
    findings = doc["findings"]
    failed = [f for f in findings if f["status"] == "fail"]
    assert code == 0 and failed == [], failed
    indexes = {f["subject"] for f in findings if f["check"] == "index"}
    assert f"{SCHEMA}.nodes_session_expires_at_idx" in indexes
    assert all(name.startswith(f"{SCHEMA}.") for name in indexes), indexes


def test_status_names_the_schema(two: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, rows = run_json(capsys, "status", "--dsn", _reaper_role(two), "--schema", SCHEMA)
    assert code == 0
    backlog = {r["sweep"]: r for r in rows}
    assert backlog["nodes_silent"]["table"] == f"{SCHEMA}.nodes"
    assert backlog["nodes_silent"]["backlog_rows"] > 0


def test_without_the_schema_the_run_never_reads_the_role_search_path(
    two: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reaper role's search_path names controlplane; the built-in sweeps still read
    public, the configured (default) schema, and say so."""
    with psycopg.connect(two, autocommit=True) as conn:
        conn.execute("CREATE ROLE reaper_pathonly LOGIN")
        try:
            conn.execute(f"GRANT USAGE ON SCHEMA {SCHEMA} TO reaper_pathonly")
            conn.execute(
                f"GRANT SELECT, DELETE ON ALL TABLES IN SCHEMA {SCHEMA} TO reaper_pathonly"
            )
            dbname = conn.info.dbname
            conn.execute(
                f'ALTER ROLE reaper_pathonly IN DATABASE "{dbname}" SET search_path = {SCHEMA}'
            )
            code, out, err = run_cli(
                capsys, "run-once", "--dsn", login_as(two, "reaper_pathonly"), "--busy-share", "1"
            )
            assert code == 1, out + err
            assert _census(two, SCHEMA)["nodes"]["garbage"] > 0
        finally:
            conn.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {SCHEMA} FROM reaper_pathonly")
            conn.execute(f"REVOKE ALL ON SCHEMA {SCHEMA} FROM reaper_pathonly")
            conn.execute(f'ALTER ROLE reaper_pathonly IN DATABASE "{dbname}" RESET ALL')
            conn.execute("DROP ROLE reaper_pathonly")


def test_grants_sql_refuses_a_schema_that_does_not_exist(dsn: str) -> None:
    refused = pytest.raises(psycopg.errors.RaiseException, match="schema nowhere does not exist")
    with psycopg.connect(dsn, autocommit=True, options="-c reaper.schema=nowhere") as conn, refused:
        for stmt in sqltext.statements("grants.sql"):
            conn.execute(stmt)  # type: ignore[arg-type]


def test_a_trigger_function_that_relies_on_the_path_fails_until_it_has_its_own(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Triggers run under reaper's search_path (pg_catalog, pg_temp): a function that names
    a table without its schema fails, and one given its own path (docs/security.md) works."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE audit (router_id text)")
        conn.execute(
            "CREATE FUNCTION audit_delete() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN INSERT INTO audit VALUES (OLD.router_id); RETURN OLD; END $$"
        )
        conn.execute(
            "CREATE TRIGGER audit AFTER DELETE ON routers "
            "FOR EACH ROW EXECUTE FUNCTION audit_delete()"
        )
        conn.execute(
            "INSERT INTO routers (router_id, address, lease_expires_at) "
            "VALUES ('old', '10.0.0.1:4443', now() - interval '60 days')"
        )
        argv = (
            "run-once",
            "--dsn",
            dsn,
            "--sweep",
            "router_leases",
            "--json",
            "--max-eligible-fraction",
            "1",
            "--busy-share",
            "1",
        )
        code, out, _ = run_cli(capsys, *argv)
        assert code == 1 and 'relation \\"audit\\" does not exist' in out
        conn.execute("ALTER FUNCTION audit_delete() SET search_path = public")
        code, out, _ = run_cli(capsys, *argv)
        assert code == 0, out
        assert conn.execute("SELECT router_id FROM audit").fetchall() == [("old",)]
