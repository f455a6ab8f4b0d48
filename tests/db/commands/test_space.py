"""Deleted is not freed: ``status``, ``check`` and the daemon's gauges say how many dead rows
of a swept table wait and what holds them, on a real PostgreSQL: an open transaction here;
a replication slot and a prepared transaction in tests/process/commands/test_space_holders.py."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg import sql

from reaper.commands import space
from reaper.config.settings import build_settings
from reaper.daemon.scheduler import Daemon
from reaper.db import Database
from reaper.sqltext.names import TableName
from tests.support import login_as, sweeps_of
from tests.support.daemon import seed_routers
from tests.support.ops import run_cli, run_json
from tests.support.space import (
    GARBAGE,
    KEEP,
    dead_rows_counted,
    held_snapshot,
    space_of,
    sweep_routers,
    vacuum_routers,
)


def test_an_open_transaction_is_named_as_what_keeps_the_deleted_rows(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with held_snapshot(dsn) as pid:
        sweep_routers(capsys, dsn)
        # The rows are gone for every reader, and still on disk: the vacuum left them.
        assert conn.execute(
            "SELECT count(*) FROM routers WHERE router_id LIKE 'garbage-%'"
        ).fetchone() == (0,)
        code, status = run_json(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
        assert code == 0
        space = space_of(status)
        assert space["dead_rows"] == GARBAGE
        assert space["autovacuum_threshold"] < GARBAGE
        assert space["last_vacuum"] is not None
        assert space["verdict"] == "held"
        holder = space["horizon_holder"]
        assert (holder["kind"], holder["name"]) == ("transaction", str(pid))
        assert holder["application_name"] == "monthly-report"
        assert holder["state"] == "idle in transaction"
        assert holder["since"] is not None
        assert holder["xmin_age_transactions"] >= 1

        # The table as people read it: one line that names the session and how to end it.
        code, out, _ = run_cli(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
        assert code == 0
        line = next(ln for ln in out.splitlines() if ln.startswith("space: routers:"))
        assert f"{GARBAGE:,} dead rows" in line
        assert f"the transaction of pid {pid}" in line
        assert "'monthly-report'" in line
        assert f"pg_terminate_backend({pid})" in line

        # check warns (it does not fail: the sweeps themselves are fine). The test connects as
        # a superuser, which check fails on its own account.
        _, checked = run_json(capsys, "check", "--dsn", dsn, "--sweep", "router_leases")
        found = [f for f in checked["findings"] if f["check"] == "space"]
        assert [(f["status"], f["subject"]) for f in found] == [("warn", "routers")]
        assert f"pid {pid}" in found[0]["detail"]
        assert f"pg_terminate_backend({pid})" in found[0]["fix"]

        # The daemon's gauges.
        settings = build_settings({"dsn": dsn, "listen": "127.0.0.1:0"})
        daemon = Daemon(
            settings, [sweeps_of(settings)["router_leases"]], registry=CollectorRegistry()
        )
        try:
            daemon.db.open()
            daemon.gauges.refresh()
            registry = daemon.metrics.registry
            dead = registry.get_sample_value("reaper_dead_rows", {"table": "routers"})
            assert dead == GARBAGE
            threshold = registry.get_sample_value(
                "reaper_autovacuum_threshold_rows", {"table": "routers"}
            )
            assert threshold is not None and 0 < threshold < GARBAGE
            assert (
                registry.get_sample_value(
                    "reaper_last_vacuum_timestamp_seconds", {"table": "routers"}
                )
                or 0
            ) > 0
            held = registry.get_sample_value(
                "reaper_xmin_horizon_age_transactions", {"holder": "transaction"}
            )
            assert held is not None and held >= 1
            seconds = registry.get_sample_value(
                "reaper_xmin_horizon_age_seconds", {"holder": "transaction"}
            )
            assert seconds is not None and seconds >= 0
            assert (
                registry.get_sample_value(
                    "reaper_xmin_horizon_age_transactions", {"holder": "replication_slot"}
                )
                == 0
            )
        finally:
            daemon.stop(timedelta(seconds=5))

    # The transaction ends: the next vacuum removes them, and nothing is said.
    vacuum_routers(dsn)
    code, status = run_json(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
    assert code == 0
    space = space_of(status)
    assert (space["dead_rows"], space["verdict"]) == (0, "ok")
    code, out, _ = run_cli(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
    assert "space:" not in out
    _, checked = run_json(capsys, "check", "--dsn", dsn, "--sweep", "router_leases")
    assert [f["status"] for f in checked["findings"] if f["check"] == "space"] == ["pass"]


def test_dead_rows_that_no_vacuum_has_seen_are_autovacuums_to_take(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleted after the last vacuum, while a snapshot taken after that vacuum is open: the
    holder is not what keeps them (no vacuum has tried yet); autovacuum is, here, where it is
    off for the table."""
    conn.execute("ALTER TABLE routers SET (autovacuum_enabled = false)")
    try:
        vacuum_routers(dsn)
        with held_snapshot(dsn) as pid:
            seed_routers(conn, garbage=GARBAGE, keep=KEEP)
            conn.execute("ANALYZE routers")
            code, results = run_json(capsys, "run-once", "--dsn", dsn, "--sweep", "router_leases")
            assert (code, [r["rows"] for r in results]) == (0, [GARBAGE])
            dead_rows_counted(dsn, GARBAGE)
            code, status = run_json(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
            space = space_of(status)
            assert space["verdict"] == "autovacuum_off"
            assert space["autovacuum_enabled"] is False
            assert space["horizon_holder"]["name"] == str(pid)
            code, out, _ = run_cli(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
            line = next(ln for ln in out.splitlines() if ln.startswith("space: routers:"))
            assert "autovacuum is off for this table" in line
            assert "RESET (autovacuum_enabled)" in line
    finally:
        conn.execute("ALTER TABLE routers RESET (autovacuum_enabled)")


@pytest.mark.fresh_db
def test_a_role_without_pg_read_all_stats_is_told_what_it_cannot_see(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """PostgreSQL shows any role another role's session's pid, user, application and xmin,
    but not when its transaction began nor its state: status names the session and says
    what is hidden, and how to see it."""
    role = f"space_reader_{uuid.uuid4().hex[:6]}"
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        conn.execute(sql.SQL("GRANT SELECT ON public.routers TO {}").format(sql.Identifier(role)))
        assert conn.execute(
            "SELECT pg_has_role(%s, 'pg_read_all_stats', 'USAGE')", (role,)
        ).fetchone() == (False,)
        with held_snapshot(dsn) as pid:
            sweep_routers(capsys, dsn)
            reader = login_as(dsn, role)
            code, status = run_json(capsys, "status", "--dsn", reader, "--sweep", "router_leases")
            assert code == 0, status
            space = space_of(status)
            holder = space["horizon_holder"]
            assert (holder["kind"], holder["name"], holder["user"]) == (
                "transaction",
                str(pid),
                "postgres",
            )
            assert holder["application_name"] == "monthly-report"
            assert (holder["since"], holder["state"]) == (None, None)
            assert space["verdict"] == "held"
            _, out, _ = run_cli(capsys, "status", "--dsn", reader, "--sweep", "router_leases")
            line = next(ln for ln in out.splitlines() if ln.startswith("space: routers:"))
            assert f"the transaction of pid {pid} (user postgres" in line
            hidden = "its start and state are hidden from this role: grant it pg_read_all_stats"
            assert hidden in line
    finally:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.mark.fresh_db
def test_a_partitioned_table_sums_its_partitions_each_with_its_own_settings(
    dsn: str, conn: psycopg.Connection[Any], database: Database
) -> None:
    conn.execute("CREATE TABLE public.logs (at int NOT NULL) PARTITION BY RANGE (at)")
    conn.execute(
        "CREATE TABLE public.logs_a PARTITION OF public.logs FOR VALUES FROM (0) TO "
        "(1000) WITH (autovacuum_vacuum_threshold = 10, "
        "autovacuum_vacuum_scale_factor = 0)"
    )
    conn.execute(
        "CREATE TABLE public.logs_b PARTITION OF public.logs FOR VALUES FROM (1000) TO (2000)"
    )
    conn.execute("INSERT INTO public.logs SELECT generate_series(0, 1999)")
    logs = TableName("public", "logs")
    with held_snapshot(dsn):
        conn.execute("DELETE FROM public.logs WHERE at < 300 OR at >= 1900")
        conn.execute("VACUUM public.logs")
        with database.session(read_only=True) as session:
            found = space.table_space(session, logs, space.holders(session))
        row = conn.execute(
            "SELECT current_setting('autovacuum_vacuum_threshold')::float8 "
            "+ current_setting('autovacuum_vacuum_scale_factor')::float8 * reltuples "
            "FROM pg_class WHERE oid = 'public.logs_b'::regclass"
        ).fetchone()
    assert row is not None
    # logs_a by its own settings (10 + 0 x its rows), logs_b by the server's.
    assert abs(found.autovacuum_threshold - (10 + row[0])) <= 1
    assert found.dead_rows == 400
    assert found.last_vacuum is not None
    assert found.verdict == "held"
    # A leaf that was never vacuumed makes the table's last vacuum unknown.
    conn.execute(
        "CREATE TABLE public.logs_c PARTITION OF public.logs FOR VALUES FROM (2000) TO (3000)"
    )
    with database.session(read_only=True) as session:
        assert space.table_space(session, logs, []).last_vacuum is None
