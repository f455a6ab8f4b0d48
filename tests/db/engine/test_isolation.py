"""Failure isolation: one sweep's failure (its table missing, a privilege missing, a timeout, a
lost connection) fails that sweep only. It is logged (``sweep_failed``), counted
(``reaper_sweep_runs_total{outcome="failure"}``), the other sweeps finish, ``run-once`` exits
1, and batches committed before the failure stay deleted and are counted.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg import sql

from reaper.config.engine import engine_options
from reaper.config.settings import Settings
from reaper.db import ConnectionSettings, Database
from reaper.engine.result import SweepResult
from reaper.engine.run import run_sweeps
from reaper.metrics import Metrics
from tests.support import (
    BUILTIN_SWEEPS,
    NOW,
    sweeps_of,
)


def _seed_silent(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at)"
        " SELECT 'garbage-' || i, %s::timestamptz - interval '60 days'"
        " FROM generate_series(1, %s) i",
        (NOW, n),
    )
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at)"
        " SELECT 'garbage-' || i, 'x', %s::timestamptz - interval '60 days'"
        " FROM generate_series(1, 7) i",
        (NOW,),
    )


def _count(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("how", ["lock_timeout", "lost_connection"])
def test_batches_committed_before_a_failure_stay_deleted_and_counted(
    dsn, conn, make_settings, registry: CollectorRegistry, how: str
) -> None:
    """After two batches the third fails: the table is locked by a migration (lock_timeout),
    or the server ends the sweep's connection. The first two batches stay deleted and counted;
    the next sweep runs on a fresh connection."""
    _seed_silent(conn, 100)
    settings: Settings = make_settings(strategy="index", batch_size=10, lock_timeout="100ms")
    db = Database(
        ConnectionSettings(
            dsn=settings.dsn or "",
            statement_timeout=settings.statement_timeout,
            lock_timeout=settings.lock_timeout,
            idle_in_transaction_session_timeout=settings.idle_in_transaction_session_timeout,
        ),
    )
    metrics = Metrics(BUILTIN_SWEEPS, registry)
    migration = psycopg.connect(dsn)

    def after_batch(result: SweepResult) -> None:
        if result.sweep != "nodes_silent" or result.batches != 2:
            return
        if how == "lock_timeout":
            migration.execute("LOCK TABLE nodes IN ACCESS EXCLUSIVE MODE")
        else:
            conn.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE application_name = 'reaper' AND datname = current_database()"
            )

    try:
        with db:
            silent, routers = run_sweeps(
                db,
                [sweeps_of(settings)[n] for n in ("nodes_silent", "router_leases")],
                engine_options(settings),
                metrics=metrics,
                now=NOW,
                on_batch=after_batch,
            )
    finally:
        migration.rollback()
        migration.close()
    assert silent.outcome == "failure"
    assert (silent.rows, silent.batches) == (20, 2)
    assert _count(conn, "nodes") == 80
    value = registry.get_sample_value
    assert value("reaper_deleted_rows_total", {"table": "nodes", "reason": "silent"}) == 20
    assert value("reaper_sweep_runs_total", {"sweep": "nodes_silent", "outcome": "failure"}) == 1
    assert value("reaper_sweep_runs_total", {"sweep": "nodes_silent", "outcome": "success"}) == 0
    assert value("reaper_sweep_last_success_timestamp_seconds", {"sweep": "nodes_silent"}) == 0
    # The next sweep runs as if nothing happened.
    assert (routers.outcome, routers.rows) == ("success", 7), routers.error
    assert _count(conn, "routers") == 0
    assert value("reaper_deleted_rows_total", {"table": "routers", "reason": "expired"}) == 7
