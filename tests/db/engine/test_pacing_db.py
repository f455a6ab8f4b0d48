"""Pacing against real servers: a streaming standby whose replay is paused, live sessions on
the swept database, and a role that cannot see them."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from reaper.commands import checks
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.db import Database
from reaper.engine.result import SweepResult
from reaper.engine.run import SUCCESS, run_sweep
from reaper.metrics import Metrics
from tests.support import BUILTIN_SWEEPS, login_as, sweeps_of
from tests.support.pacing_db import counts, seed_nodes, throttled


def _client(dsn: str, stop: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            conn.execute("UPDATE nodes SET enrolled_at = now() WHERE peer_id = 'keep-1'")
            time.sleep(0.005)


@contextmanager
def live_client(dsn: str) -> Iterator[None]:
    """Another session refreshing a member every 5 ms while the block runs (started 0.3 s
    before it, so that the pacer's first sample sees it)."""
    stop = threading.Event()
    client = threading.Thread(target=_client, args=(dsn, stop))
    client.start()
    try:
        time.sleep(0.3)
        yield
    finally:
        stop.set()
        client.join()


def test_live_sessions_slow_the_sweep_and_a_quiet_database_does_not(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    seed_nodes(conn, garbage=5_000, keep=100)
    settings = build_settings(
        {
            "dsn": dsn,
            "strategy": "index",
            "batch_size": 500,
            "busy_share": 0.25,
            "max_eligible_fraction": 1,
        }
    )
    registry = CollectorRegistry()
    metrics = Metrics(BUILTIN_SWEEPS, registry)
    with Database(connection_settings(settings)) as db:
        with live_client(dsn):
            busy = run_sweep(
                db, sweeps_of(settings)["nodes_silent"], engine_options(settings), metrics=metrics
            )
        assert busy.outcome == SUCCESS and busy.rows == 5_000
        assert counts(conn) == (0, 100)
        waited = throttled(registry, "load")
        # Each batch after the first was followed by three times its duration of waiting.
        assert waited >= 2.5 * sum(busy.batch_seconds[:-1])
        assert throttled(registry, "replica_lag") == 0.0
        # Nothing else runs now (this test's own connection last ran a statement over a
        # second ago): no wait at all.
        seed_nodes(conn, garbage=5_000, keep=0)
        time.sleep(1.5)
        quiet = run_sweep(
            db, sweeps_of(settings)["nodes_silent"], engine_options(settings), metrics=metrics
        )
        assert quiet.rows == 5_000
        assert throttled(registry, "load") == waited


def test_live_sessions_make_the_batches_short(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """While another session uses the database, each batch aims at busy_batch_seconds: its
    row limit halves from the batch size while batches take longer than that, and every
    garbage row still goes."""
    seed_nodes(conn, garbage=30_000, keep=100)
    settings = build_settings(
        {
            "dsn": dsn,
            "strategy": "index",
            "batch_size": 5_000,
            "busy_share": 0.9,
            "busy_batch_seconds": "2ms",
            "max_eligible_fraction": 1,
        }
    )
    sizes: list[int] = []

    def on_batch(r: SweepResult) -> None:
        sizes.append(r.rows - sum(sizes))

    with Database(connection_settings(settings)) as db, live_client(dsn):
        busy = run_sweep(
            db, sweeps_of(settings)["nodes_silent"], engine_options(settings), on_batch=on_batch
        )
    assert busy.outcome == SUCCESS and busy.rows == 30_000
    assert counts(conn) == (0, 100)
    assert sizes[0] == 5_000  # nothing measured yet: the batch size
    # A 5,000-row batch takes far longer than 2 ms: the limit halves, batch after batch.
    assert max(sizes[1:-1]) <= 2_500, sizes
    assert min(sizes[:-1]) < 1_000, sizes


def _wal(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
    assert row is not None
    return int(row[0])


def test_the_wal_brake_keeps_a_sweep_within_its_rate(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """With --max-wal-rate, a sweep deletes no faster than the limit lets it write WAL: every
    deleted row writes at least a heap delete record (over 50 bytes), so rows per second stay
    under the limit / 50 (with the one second of it the brake lets through at once, and
    slack). The brake counts the server's WAL, other work on this shared server included,
    which can only slow the sweep more: a time budget bounds the test. Rows kept stay; the
    waits are counted as reason "wal"."""
    seed_nodes(conn, garbage=20_000, keep=100)
    limit = 250_000
    settings = build_settings(
        {
            "dsn": dsn,
            "strategy": "index",
            "batch_size": 500,
            "busy_share": 1,
            "max_wal_rate": limit,
            "max_seconds_per_run": "6s",
            "max_eligible_fraction": 1,
        }
    )
    registry = CollectorRegistry()
    metrics = Metrics(BUILTIN_SWEEPS, registry)
    with Database(connection_settings(settings)) as db:
        wal0, t0 = _wal(conn), time.monotonic()
        result = run_sweep(
            db, sweeps_of(settings)["nodes_silent"], engine_options(settings), metrics=metrics
        )
        wal1, wall = _wal(conn), time.monotonic() - t0
    assert result.outcome == SUCCESS and result.rows > 0
    assert counts(conn) == (20_000 - result.rows, 100)
    # Unbraked, 20,000 rows go in well under a second here; braked, at most about
    # limit / 50 = 5,000 rows a second.
    assert result.rows <= 1.5 * limit * (wall + 1.0) / 50, (result.rows, wall)
    assert wal1 - wal0 >= 50 * result.rows
    assert throttled(registry, "wal") > 0.0
    assert throttled(registry, "load") == 0.0


@pytest.mark.fresh_db
def test_check_warns_when_the_role_cannot_see_standbys_and_sessions(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    role = f"reaper_pacing_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        settings = build_settings({"dsn": login_as(dsn, role)})
        with Database(connection_settings(settings)) as db:
            found = [f for f in checks.run_checks(db, [], settings) if f.check == "pacing"]
        fix = f"GRANT pg_read_all_stats TO {role}"
        assert [(f.status, f.fix) for f in found] == [("warn", fix)]
        conn.execute(f"GRANT pg_monitor TO {role}")
        with Database(connection_settings(settings)) as db:
            found = [f for f in checks.run_checks(db, [], settings) if f.check == "pacing"]
        assert [f.status for f in found] == ["pass"]
    finally:
        conn.execute(f"DROP ROLE {role}")
