"""`reaper check`: each finding, against a real PostgreSQL, as the reaper role."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from reaper.cli import open_database
from reaper.commands import checks
from reaper.config.settings import build_settings
from reaper.config.sweeps import Sweep
from reaper.metrics import Metrics
from reaper.sqltext.declared import reviewed
from reaper.sqltext.names import TableName
from tests.support import BUILTIN_SWEEPS
from tests.support.checks import failed, findings_of
from tests.support.ops import (
    apply_grants,
    index_state,
    invalid_by_cancel,
    invalid_by_failed_unique_build,
    run_json,
    spec,
)


@pytest.fixture
def reaper_dsn(dsn: str) -> str:
    return apply_grants(dsn)


@pytest.mark.fresh_db
def test_healthy_schema_passes_as_the_reaper_role(reaper_dsn: str, capsys) -> None:
    code, doc = run_json(capsys, "check", "--dsn", reaper_dsn)
    assert failed(doc) == []
    assert code == 0 and doc["ok"] is True
    # Nothing in the check needed a superuser: it ran as reaper, and said so.
    assert findings_of(doc, check="role")[0] == {
        "sweep": "*",
        "check": "role",
        "status": "pass",
        "subject": "reaper",
        "detail": "not a superuser",
        "fix": None,
    }
    assert findings_of(doc, check="advisory_lock")[0]["status"] == "pass"
    assert findings_of(doc, check="server_version")[0]["status"] == "pass"
    # Every enabled sweep is covered, every declared index named.
    assert {f["sweep"] for f in doc["findings"]} == {"*"} | {s.name for s in BUILTIN_SWEEPS}
    assert {f["subject"] for f in findings_of(doc, check="index")} == {
        i for s in BUILTIN_SWEEPS for i in s.indexes
    }


def test_a_superuser_fails_the_role_check(dsn: str, capsys) -> None:
    """A superuser bypasses every grant and row-level security policy."""
    code, doc = run_json(capsys, "check", "--dsn", dsn, "--sweep", "router_leases")
    assert code == 1
    assert findings_of(doc, check="role")[0]["status"] == "fail"
    assert [f[1] for f in failed(doc)] == ["role"]


@pytest.mark.fresh_db
def test_invalid_index_from_a_cancelled_build_is_reported_repaired_and_passes(
    dsn: str, reaper_dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    invalid_by_cancel(dsn, spec("nodes_session_expires_at_idx"))
    assert index_state(conn, "nodes_session_expires_at_idx") == (False, False)

    code, doc = run_json(capsys, "check", "--dsn", reaper_dsn)
    assert code == 1
    bad = findings_of(
        doc, sweep="nodes_session", check="index", subject="nodes_session_expires_at_idx"
    )
    assert bad and bad[0]["status"] == "fail"
    assert "INVALID" in bad[0]["detail"]
    assert bad[0]["fix"] == "reaper indexes ensure"
    # Only the sweep that relies on it fails on it (the other nodes sweeps see it as a broken
    # index on a table they read, and say so too).
    assert ("nodes_session", "index", "nodes_session_expires_at_idx") in failed(doc)

    code, actions = run_json(capsys, "indexes", "ensure", "--dsn", dsn)
    assert code == 0
    rebuilt = next(a for a in actions if a["index"] == "nodes_session_expires_at_idx")
    assert (rebuilt["action"], rebuilt["outcome"]) == ("rebuild", "done")
    assert index_state(conn, "nodes_session_expires_at_idx") == (True, True)

    code, doc = run_json(capsys, "check", "--dsn", reaper_dsn)
    assert (code, failed(doc)) == (0, [])


@pytest.mark.fresh_db
def test_invalid_index_from_a_failed_unique_build_is_rebuilt_as_declared(
    dsn: str, reaper_dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    invalid_by_failed_unique_build(
        dsn,
        spec("routers_lease_expires_at_idx"),
        "INSERT INTO routers (router_id, address, lease_expires_at) "
        "VALUES ('a', 'x', '2026-01-01'), ('b', 'y', '2026-01-01')",
    )
    assert index_state(conn, "routers_lease_expires_at_idx") == (False, False)
    code, doc = run_json(capsys, "check", "--dsn", reaper_dsn, "--sweep", "router_leases")
    assert code == 1
    assert failed(doc) == [("router_leases", "index", "routers_lease_expires_at_idx")]

    code, _ = run_json(capsys, "indexes", "ensure", "--dsn", dsn)
    assert code == 0
    assert index_state(conn, "routers_lease_expires_at_idx") == (True, True)
    unique = conn.execute(
        "SELECT indisunique FROM pg_index "
        "WHERE indexrelid = 'routers_lease_expires_at_idx'::regclass"
    ).fetchone()
    assert unique == (False,)
    code, doc = run_json(capsys, "check", "--dsn", reaper_dsn, "--sweep", "router_leases")
    assert code == 0


@pytest.mark.fresh_db
def test_dropped_index_and_unindexed_foreign_key(
    dsn: str, reaper_dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    conn.execute("DROP INDEX enrollment_requests_token_id_age_idx")
    code, doc = run_json(capsys, "check", "--dsn", reaper_dsn, "--sweep", "bootstrap_tokens")
    assert code == 1
    fk = findings_of(doc, check="foreign_key_index")
    assert [(f["status"], f["subject"]) for f in fk] == [("fail", "enrollment_requests (token_id)")]
    assert fk[0]["fix"] == "CREATE INDEX CONCURRENTLY ON enrollment_requests (token_id)"
    missing = findings_of(doc, check="index", subject="enrollment_requests_token_id_age_idx")
    assert missing[0]["status"] == "fail" and "does not exist" in missing[0]["detail"]
    assert (
        findings_of(doc, check="index", subject="bootstrap_tokens_expires_at_idx")[0]["status"]
        == "pass"
    )


def _seed_routers(conn: psycopg.Connection[Any], live: int, expired: int) -> None:
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) "
        "SELECT 'live-' || i, 'addr', now() + interval '1 day' FROM generate_series(1, %s) i",
        (live,),
    )
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) "
        "SELECT 'old-' || i, 'addr', now() - interval '90 days' FROM generate_series(1, %s) i",
        (expired,),
    )
    conn.execute("ANALYZE routers")


@pytest.mark.fresh_db
def test_plan_uses_the_index_and_a_seq_scan_of_a_large_table_fails(
    dsn: str, reaper_dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    _seed_routers(conn, live=20_000, expired=20)
    args = ("check", "--dsn", reaper_dsn, "--sweep", "router_leases")
    code, doc = run_json(capsys, *args, "--seq-scan-max-rows", "1000")
    plan = findings_of(doc, check="plan")[0]
    assert (code, plan["status"]) == (0, "pass")
    assert "routers_lease_expires_at_idx" in plan["detail"]

    conn.execute("DROP INDEX routers_lease_expires_at_idx")
    code, doc = run_json(capsys, *args, "--seq-scan-max-rows", "1000")
    plan = findings_of(doc, check="plan")[0]
    assert (code, plan["status"]) == (1, "fail")
    assert "Seq Scan of routers (20,020 rows > seq_scan_max_rows 1,000)" in plan["detail"]
    # Below the threshold a scan is what the planner should do: not a failure.
    code, doc = run_json(capsys, *args, "--seq-scan-max-rows", "100000")
    assert findings_of(doc, check="plan")[0]["status"] == "pass"


@pytest.mark.fresh_db
def test_a_large_backlog_scan_passes_when_the_index_would_serve(
    dsn: str, reaper_dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    # Half the table is garbage: a plain plan would scan (LIMIT, many matches); the batch runs
    # with sequential scans off and the index serves it: not a failure.
    _seed_routers(conn, live=10_000, expired=10_000)
    code, doc = run_json(
        capsys,
        "check",
        "--dsn",
        reaper_dsn,
        "--sweep",
        "router_leases",
        "--seq-scan-max-rows",
        "1000",
    )
    plan = findings_of(doc, check="plan")[0]
    assert plan["status"] == "pass", plan
    assert code == 0


@pytest.mark.fresh_db
def test_missing_privilege_names_it_and_the_grant(
    dsn: str, reaper_dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    conn.execute("REVOKE DELETE ON routers FROM reaper")
    conn.execute("REVOKE SELECT ON bootstrap_tokens FROM reaper")
    # Batches take no row lock: UPDATE is never needed, on any table.
    for column, table in (
        ("peer_id", "nodes"),
        ("router_id", "routers"),
        ("id", "enrollment_requests"),
        ("id", "bootstrap_tokens"),
    ):
        conn.execute(f"REVOKE UPDATE ({column}) ON {table} FROM reaper")
    code, doc = run_json(capsys, "check", "--dsn", reaper_dsn)
    assert code == 1
    privs = [
        (f["sweep"], f["subject"], f["fix"])
        for f in findings_of(doc, check="privileges", status="fail")
    ]
    assert (
        "router_leases",
        "DELETE on routers",
        "GRANT DELETE ON public.routers TO reaper",
    ) in privs
    assert not [p for p in privs if p[1].startswith("UPDATE")], privs
    # The ephemeral requests' predicate reads the tokens: that sweep needs SELECT there too.
    assert (
        "enrollment_requests_ephemeral",
        "SELECT on bootstrap_tokens",
        "GRANT SELECT ON public.bootstrap_tokens TO reaper",
    ) in privs
    assert (
        "bootstrap_tokens",
        "SELECT on bootstrap_tokens",
        "GRANT SELECT ON public.bootstrap_tokens TO reaper",
    ) in privs


def test_missing_table_and_column_of_a_declared_sweep(dsn: str) -> None:
    settings = build_settings({"dsn": dsn})
    sweeps = [
        Sweep(
            "gone",
            TableName.parse("no_such_table"),
            "x",
            reviewed("no_such_table", "at < %(cutoff)s", ("cutoff",)),
            {"cutoff": timedelta(days=30)},
        ),
        Sweep(
            "renamed",
            TableName.parse("routers"),
            "x",
            reviewed("routers", "lease_ends < %(cutoff)s", ("cutoff",)),
            {"cutoff": timedelta(days=30)},
        ),
    ]
    db = open_database(settings)
    with db:
        findings = checks.run_checks(db, sweeps, settings)
    bad = {(f.sweep, f.check): f.detail for f in checks.failures(findings)}
    assert bad[("gone", "table")] == "the table does not exist"
    assert "lease_ends" in bad[("renamed", "columns")]
    # A sweep that declares no index and whose plan cannot be made has nothing more to say.
    assert not [f for f in findings if f.sweep == "gone" and f.check != "table"]


@pytest.mark.fresh_db
def test_check_failures_gauge(dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("DROP INDEX nodes_session_expires_at_idx")
    settings = build_settings({"dsn": dsn})
    registry = CollectorRegistry()
    metrics = Metrics(BUILTIN_SWEEPS, registry)
    db = open_database(settings)
    with db:
        checks.report(checks.run_checks(db, BUILTIN_SWEEPS, settings), metrics)

    def value(sweep: str, check: str) -> float | None:
        return registry.get_sample_value("reaper_check_failures", {"sweep": sweep, "check": check})

    assert value("nodes_session", "index") == 1
    assert value("nodes_silent", "index") == 0
    assert value("*", "advisory_lock") == 0
    conn.execute(spec("nodes_session_expires_at_idx").statement)
    with open_database(settings) as db:
        checks.report(checks.run_checks(db, BUILTIN_SWEEPS, settings), metrics)
    assert value("nodes_session", "index") == 0


@pytest.mark.fresh_db
def test_run_once_strict_refuses_to_sweep_on_a_failed_check(
    dsn: str, reaper_dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    from tests.support.ops import run_cli

    _seed_routers(conn, live=1, expired=3)
    conn.execute("DROP INDEX routers_lease_expires_at_idx")
    conn.execute("REVOKE DELETE ON routers FROM reaper")
    code, _, err = run_cli(
        capsys, "run-once", "--dsn", reaper_dsn, "--strict", "--sweep", "router_leases"
    )
    assert code == 1
    assert "check(s) failed; nothing swept" in err
    assert "lacks DELETE on table routers" in err
    assert conn.execute("SELECT count(*) FROM routers").fetchone() == (4,)
    conn.execute("GRANT DELETE ON public.routers TO reaper")
    conn.execute(spec("routers_lease_expires_at_idx").statement)
    code, _, err = run_cli(
        capsys, "run-once", "--dsn", reaper_dsn, "--strict", "--sweep", "router_leases"
    )
    assert code == 0, err
    assert conn.execute("SELECT count(*) FROM routers").fetchone() == (1,)


@pytest.mark.fresh_db
def test_a_partitioned_table_is_checked_through_its_partitions(
    dsn: str, conn: psycopg.Connection[Any], capsys, tmp_path
) -> None:
    conn.execute(
        """
        CREATE TABLE ev (id bigint, created_at timestamptz NOT NULL)
            PARTITION BY RANGE (created_at);
        CREATE TABLE ev_a PARTITION OF ev FOR VALUES FROM ('2000-01-01') TO ('2026-06-01');
        CREATE TABLE ev_b PARTITION OF ev FOR VALUES FROM ('2026-06-01') TO ('2200-01-01');
        CREATE INDEX ev_created_at_idx ON ev (created_at);
        INSERT INTO ev SELECT g, now() - interval '1 hour' - (g % 20) * interval '1 second'
        FROM generate_series(1, 20000) g;
        INSERT INTO ev SELECT g, now() - interval '400 days' FROM generate_series(1, 20) g;
        ANALYZE ev;
        """
    )
    config = tmp_path / "reaper.toml"
    config.write_text(
        '[sweeps.events]\ntable = "public.ev"\nreason = "old"\n'
        'age = "created_at"\nretention = "30d"\n'
    )
    args = (
        "check",
        "--dsn",
        dsn,
        "--config",
        str(config),
        "--sweep",
        "events",
        "--seq-scan-max-rows",
        "1000",
    )
    code, doc = run_json(capsys, *args)
    plan = findings_of(doc, check="plan")[0]
    assert plan["status"] == "pass", plan["detail"]
    assert [f[1] for f in failed(doc)] == ["role"]  # connected as a superuser
    # The plan reads each partition through its own index (PostgreSQL names it after the
    # partition): the batch is planned as it runs, sequential scans off.
    assert {f["subject"] for f in findings_of(doc, check="index")} == {
        "ev_a_created_at_idx",
        "ev_b_created_at_idx",
    }

    code, status = run_json(
        capsys, "status", "--dsn", dsn, "--config", str(config), "--sweep", "events"
    )
    assert [(r["backlog_rows"], r["estimated_rows"]) for r in status] == [(20, 20020)]
    assert status[0]["total_bytes"] > 16384

    conn.execute("DROP INDEX ev_created_at_idx")
    code, doc = run_json(capsys, *args)
    plan = findings_of(doc, check="plan")[0]
    assert (code, plan["status"]) == (1, "fail")
    assert "20,020 rows > seq_scan_max_rows 1,000" in plan["detail"]


@pytest.mark.fresh_db
@pytest.mark.parametrize("table", ["Weird Table", 'Quote"d', "public.MixedCase"])
def test_check_and_status_quote_the_table_as_the_sweep_does(
    dsn: str, conn: psycopg.Connection[Any], table: str
) -> None:
    from psycopg import sql

    from reaper.commands import status

    ident = sql.Identifier(*table.split(".", 1))
    conn.execute(sql.SQL("CREATE TABLE {} (created_at timestamptz NOT NULL)").format(ident))
    conn.execute(sql.SQL("CREATE INDEX ON {} (created_at)").format(ident))
    settings = build_settings({"dsn": dsn})
    sweep = Sweep(
        "odd",
        TableName.parse(table),
        "x",
        reviewed(table, "created_at < %(cutoff)s", ("cutoff",)),
        {"cutoff": timedelta(days=30)},
    )
    with open_database(settings) as db:
        findings = checks.run_checks(db, [sweep], settings)
        rows = status.sweep_status(db, [sweep], settings)
    assert [f.check for f in checks.failures(findings)] == ["role"]  # a superuser
    assert [r.error for r in rows] == [None]
