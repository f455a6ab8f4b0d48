"""Failure isolation: one sweep's failure (its table missing, a privilege missing, a timeout, a
lost connection) fails that sweep only. It is logged (``sweep_failed``), counted
(``reaper_sweep_runs_total{outcome="failure"}``), the other sweeps finish, ``run-once`` exits
1, and batches committed before the failure stay deleted and are counted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg import sql

from reaper.config.settings import Settings
from reaper.db import ConnectionSettings, Database
from reaper.dev import demo
from reaper.engine.result import SweepResult
from reaper.engine.run import run_sweeps
from reaper.metrics import Metrics
from tests.support import (
    BUILTIN_SWEEPS,
    KEYS,
    NOW,
    SWEEPS,
    Run,
    census,
    login_as,
    run_reaper,
    sample,
    small_sizes,
    sweeps_of,
    textfile_samples,
)

ALL = [s.name for s in BUILTIN_SWEEPS]


def check_isolated_failure(
    run: Run, metrics_file: Path, failing: set[str], error_words: tuple[str, ...]
) -> None:
    """run-once exited 1; the failing sweeps failed, were logged and counted; the others
    finished and were counted as successes."""
    assert run.code == 1, run.stderr
    results = {r["sweep"]: r for r in run.json()}
    assert list(results) == ALL
    for name, r in results.items():
        if name in failing:
            assert r["outcome"] == "failure"
            assert all(w in r["error"] for w in error_words), r["error"]
        else:
            assert r["outcome"] == "success", r
    # Every stderr line is a structlog JSON line; one sweep_failed per failing sweep.
    events = run.events()
    failed = [e for e in events if e["event"] == "sweep_failed"]
    finished = [e for e in events if e["event"] == "sweep_finished"]
    assert sorted(e["sweep"] for e in failed) == sorted(failing)
    assert sorted(e["sweep"] for e in finished) == sorted(set(ALL) - failing)
    for e in failed:
        assert e["level"] == "error"
        assert e["table"] == SWEEPS[e["sweep"]].table
        assert all(w in e["error"] for w in error_words), e["error"]
        assert {"rows", "batches", "seconds", "cutoffs"} <= set(e)
    samples = textfile_samples(metrics_file.read_text())
    for name in ALL:
        bad = name in failing
        assert sample(samples, "reaper_sweep_runs_total", sweep=name, outcome="failure") == bad
        assert sample(samples, "reaper_sweep_runs_total", sweep=name, outcome="success") == (
            not bad
        )


def check_swept(dsn: str, tables: set[str], before: dict[str, dict[str, int]]) -> None:
    """Every garbage-* row of ``tables`` went, and every keep-* row stayed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = census(conn, tables)
    for table in tables:
        assert after[table] == {"garbage": 0, "keep": before[table]["keep"]}, table


@pytest.mark.parametrize(
    ("table", "failing"),
    [
        ("routers", {"router_leases"}),
        ("nodes", {"nodes_session", "nodes_silent", "nodes_ephemeral"}),
    ],
)
def test_missing_table_fails_only_its_sweeps(dsn, conn, tmp_path, table, failing) -> None:
    demo.seed(dsn, small_sizes())
    before = census(conn)
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    metrics_file = tmp_path / "reaper.prom"
    run = run_reaper(
        "run-once", "--json", "--metrics-file", str(metrics_file), env={"REAPER_DSN": dsn}
    )
    check_isolated_failure(run, metrics_file, failing, (table, "does not exist"))
    check_swept(dsn, set(KEYS) - {table}, before)


@pytest.fixture
def limited_role(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[str]:
    """DSN of a role that may read, lock and delete every table but routers, where it lacks
    DELETE. (Locking a row FOR UPDATE needs UPDATE too.)"""
    role = f"reaper_limited_{uuid.uuid4().hex[:8]}"
    ident = sql.Identifier(role)
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
    try:
        conn.execute(
            sql.SQL(
                "GRANT SELECT, UPDATE, DELETE ON nodes, enrollment_requests, bootstrap_tokens TO {}"
            ).format(ident)
        )
        conn.execute(sql.SQL("GRANT SELECT, UPDATE ON routers TO {}").format(ident))
        yield login_as(dsn, role)
    finally:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        conn.execute(sql.SQL("DROP ROLE {}").format(ident))


def test_missing_delete_privilege_fails_only_its_sweep(
    dsn, conn, limited_role, tmp_path
) -> None:
    demo.seed(dsn, small_sizes())
    before = census(conn)
    metrics_file = tmp_path / "reaper.prom"
    run = run_reaper(
        "run-once", "--json", "--metrics-file", str(metrics_file),
        env={"REAPER_DSN": limited_role},
    )
    check_isolated_failure(
        run, metrics_file, {"router_leases"}, ("routers", "permission denied")
    )
    check_swept(dsn, set(KEYS) - {"routers"}, before)
    assert census(conn, ["routers"])["routers"] == before["routers"]


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
                db, [sweeps_of(settings)[n] for n in ("nodes_silent", "router_leases")], settings,
                metrics=metrics, now=NOW, on_batch=after_batch,
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
