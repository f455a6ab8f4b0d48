"""A table's error is the table's, not the connection's: a custom sweep whose table refuses
its deletes (a publication of its deletes without a replica identity, a serialization
failure, an object in use, damaged data, its disk full) fails its own runs, keeps its rows,
and leaves the other sweeps deleting and /readyz answering 200. A database that cannot be
reached is the connection's: the first failed attempt is logged at once with the server's
reason, and a checkout fails with it instead of waiting out connect_timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import structlog
from prometheus_client import CollectorRegistry

from reaper import errors
from reaper.config.connection import connection_settings
from reaper.config.settings import build_settings
from reaper.daemon.scheduler import Daemon
from reaper.db import Database
from tests.support import TEST_DEFAULTS, enabled
from tests.support.daemon import count, free_port, seed_routers

pytestmark = pytest.mark.fresh_db

QUIET = {"interval": "1h", "jitter": "0", "listen": "127.0.0.1:0", "gauge_interval": "1h"}
BUILTINS_OFF = {
    n: {"enabled": False}
    for n in (
        "nodes_session",
        "nodes_silent",
        "nodes_ephemeral",
        "enrollment_requests",
        "enrollment_requests_ephemeral",
        "bootstrap_tokens",
    )
}


def create_events(conn: psycopg.Connection[Any]) -> None:
    """``events``: 30 rows past a 30-day retention (go-*) and 5 within it (stay-*)."""
    conn.execute(
        "CREATE TABLE events (id bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY, "
        "key text NOT NULL, created_at timestamptz NOT NULL)"
    )
    conn.execute("CREATE INDEX ON events (created_at)")
    conn.execute(
        "INSERT INTO events (key, created_at) SELECT 'go-' || i, "
        "now() - interval '40 days' FROM generate_series(1, 30) AS i"
    )
    conn.execute(
        "INSERT INTO events (key, created_at) SELECT 'stay-' || i, "
        "now() - interval '1 day' FROM generate_series(1, 5) AS i"
    )


@pytest.fixture
def daemon(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[Daemon]:
    """A Daemon with the custom sweep ``events`` and the built-in router_leases, its
    scheduler not started (the test runs the sweeps); its readiness probe answered once."""
    create_events(conn)
    settings = build_settings(
        {"dsn": dsn, **TEST_DEFAULTS, **QUIET},
        {
            "sweeps": {
                **BUILTINS_OFF,
                "events": {
                    "table": "public.events",
                    "reason": "expired",
                    "age": "created_at",
                    "retention": "30d",
                },
            }
        },
    )
    made = Daemon(settings, enabled(settings), registry=CollectorRegistry())
    made.db.open()
    try:
        made._probe()
        assert made.readyz()[0] is True
        yield made
    finally:
        made.stop(timedelta(seconds=5))


def runs(daemon: Daemon, sweep: str, outcome: str) -> float:
    value = daemon.metrics.registry.get_sample_value(
        "reaper_sweep_runs_total", {"sweep": sweep, "outcome": outcome}
    )
    return value or 0.0


def assert_only_the_table_failed(
    daemon: Daemon, conn: psycopg.Connection[Any], sqlstate: str, words: str
) -> None:
    seed_routers(conn, garbage=4, keep=2)
    with structlog.testing.capture_logs() as logs:
        failed = daemon.run_sweep("events")
        swept = daemon.run_sweep("router_leases")
    assert failed is not None and swept is not None
    assert failed.outcome == "failure"
    assert failed.error_type == "TableProblem" or (
        sqlstate.startswith("40") and failed.error_type == "TransactionConflict"
    )
    assert failed.sqlstate == sqlstate
    assert words in (failed.error or "")
    # Every row is still there; the batch failed whole, not row by row.
    assert count(conn, "events", "key", "go-%") == 30
    assert count(conn, "events", "key", "stay-%") == 5
    assert failed.skipped == {}
    assert not any(e["event"] == "batch_split" for e in logs)
    # The other sweep deleted its garbage, and the daemon is ready all along.
    assert swept.outcome == "success" and swept.rows == 4
    assert count(conn, "routers", "router_id", "keep-%") == 2
    assert daemon.readyz()[0] is True
    daemon._probe()
    assert daemon.readyz()[0] is True
    assert runs(daemon, "events", "failure") == 1
    assert not any(e["event"] == "database_not_ready" for e in logs)


def test_deletes_published_without_a_replica_identity_fail_the_sweep_not_the_daemon(
    daemon: Daemon, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("ALTER TABLE events REPLICA IDENTITY NOTHING")
    conn.execute("CREATE PUBLICATION reaper_all FOR ALL TABLES")
    try:
        assert_only_the_table_failed(daemon, conn, "55000", "replica identity")
    finally:
        conn.execute("DROP PUBLICATION reaper_all")


@pytest.mark.parametrize(
    ("sqlstate", "words"),
    [
        ("40001", "could not serialize"),
        ("40P01", "deadlock"),
        ("55006", "in use"),
        ("XX001", "invalid page"),
        ("53100", "No space left"),
        ("58030", "could not read block"),
    ],
)
def test_a_table_s_own_error_fails_its_sweep_not_the_daemon(
    daemon: Daemon, conn: psycopg.Connection[Any], sqlstate: str, words: str
) -> None:
    """The server raises each error from the table's own delete trigger, as it would raise
    it for the table's state, pages or files."""
    conn.execute(
        "CREATE FUNCTION events_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"RAISE EXCEPTION '{words} (events)' USING ERRCODE = '{sqlstate}'; END $$"
    )
    conn.execute(
        "CREATE TRIGGER events_refuse BEFORE DELETE ON events "
        "FOR EACH ROW EXECUTE FUNCTION events_refuse()"
    )
    assert_only_the_table_failed(daemon, conn, sqlstate, words)


def test_a_refused_connection_is_reported_at_once_with_the_server_s_reason(dsn: str) -> None:
    port = free_port()  # nothing listens there
    settings = build_settings(
        {
            "dsn": f"postgresql://postgres:Sekr1t-pass@127.0.0.1:{port}/postgres",
            "connect_timeout": "30s",
        }
    )
    db = Database(connection_settings(settings))
    with structlog.testing.capture_logs() as logs:
        t0 = time.monotonic()
        db.open()
        for _ in range(3):
            with pytest.raises(errors.ConnectionFailed) as caught, db.session():
                pass
            assert "Connection refused" in str(caught.value)
            assert "Sekr1t" not in str(caught.value)
        seconds = time.monotonic() - t0
        db.close()
    # Not after connect_timeout (30 s): each attempt failed at once, and said why.
    assert seconds < 10
    failed = [e for e in logs if e["event"] == "database_connect_failed"]
    assert len(failed) == 1  # once per outage, not once per attempt
    assert "Connection refused" in failed[0]["error"]
    assert "Sekr1t" not in str(logs)


def test_one_sweep_s_missing_table_leaves_the_daemon_ready(
    daemon: Daemon, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("ALTER TABLE events RENAME TO events_away")
    failed = daemon.run_sweep("events")
    assert failed is not None and failed.error_type == "ObjectMissing"
    daemon._probe()
    assert daemon.readyz()[0] is True
    # Every swept table gone stops every sweep: not ready, and it says which.
    conn.execute("ALTER TABLE routers RENAME TO routers_away")
    try:
        daemon._probe()
        ready, _, reason = daemon.readyz()
        assert not ready
        assert reason == "missing tables: events, routers"
    finally:
        conn.execute("ALTER TABLE routers_away RENAME TO routers")
