"""What a failure says about itself: a cancelled statement names its cause (statement timeout,
lock timeout, or a cancel request such as a shutdown's), a database error keeps its SQLSTATE
in the log line and in `run-once --json`, and an unexpected exception is logged as a bug,
with its traceback, counted as a failure, and the next run goes on.

Each cause is produced for real: pg_sleep past statement_timeout, a second connection holding
the table's lock, pg_cancel_backend() and the shutdown's own cancel.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import structlog
from prometheus_client import CollectorRegistry

from reaper import errors
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import Settings
from reaper.config.sweeps import by_name
from reaper.daemon.scheduler import Daemon
from reaper.db import Database, Session
from reaper.engine import execute
from reaper.engine import run as runner
from tests.support import BUILTIN_SWEEPS, NOW, add_router, sweeps_of
from tests.support.daemon import seed_routers
from tests.support.error_kinds import database

SWEEPS = by_name(BUILTIN_SWEEPS)
LEASES = SWEEPS["router_leases"]


def seed(conn: psycopg.Connection[Any], garbage: int = 5) -> None:
    for i in range(garbage):
        add_router(conn, f"garbage-{i}", lease_expires_at=NOW - timedelta(days=40))
    add_router(conn, "keep-1", lease_expires_at=NOW + timedelta(days=1))


def routers(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM routers").fetchone()
    assert row is not None
    return int(row[0])


@contextmanager
def table_locked(dsn: str, table: str) -> Iterator[None]:
    """Another session holds ``table`` in ACCESS EXCLUSIVE mode for the block."""
    with psycopg.connect(dsn) as holder:
        holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        yield
        holder.rollback()


def cancel_when_sleeping(
    conn: psycopg.Connection[Any], pid: int, cancel: Callable[[], Any]
) -> threading.Thread:
    """A thread that calls ``cancel`` once server process ``pid`` waits in pg_sleep."""

    def run() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if row is not None and row[0] == "PgSleep":
                cancel()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- the three causes of a cancelled statement ----------------------------------------------


def test_a_statement_past_statement_timeout_is_a_statement_timeout(dsn: str) -> None:
    with (
        database(dsn, statement_timeout=0.2) as db,
        db.session() as session,
        pytest.raises(errors.StatementTimeout) as caught,
    ):
        session.scalar("SELECT pg_sleep(5)")
    assert type(caught.value) is errors.StatementTimeout
    assert caught.value.sqlstate == "57014"


def test_a_lock_wait_past_lock_timeout_is_a_lock_timeout(dsn: str) -> None:
    with (
        database(dsn, lock_timeout=0.2) as db,
        db.session() as session,
        table_locked(dsn, "routers"),
        pytest.raises(errors.LockTimeout) as caught,
    ):
        session.scalar("SELECT count(*) FROM public.routers")
    assert not isinstance(caught.value, errors.StatementTimeout)
    assert caught.value.sqlstate == "55P03"
    assert "lock timeout" in str(caught.value)


def test_pg_cancel_backend_is_a_cancel_not_a_timeout(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    with database(dsn) as db, db.session() as session:
        pid = session.backend_pid
        canceller = cancel_when_sleeping(
            conn, pid, lambda: conn.execute("SELECT pg_cancel_backend(%s)", (pid,))
        )
        with pytest.raises(errors.QueryCanceled) as caught:
            session.scalar("SELECT pg_sleep(30)")
        canceller.join()
    assert not isinstance(caught.value, errors.StatementTimeout)
    assert caught.value.sqlstate == "57014"


def test_the_shutdown_cancel_is_a_cancel_not_a_timeout(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Database.cancel_running (what a shutdown that runs out of time calls) on a session
    whose statement is running."""
    with database(dsn) as db, db.session() as session:
        canceller = cancel_when_sleeping(conn, session.backend_pid, db.cancel_running)
        with pytest.raises(errors.QueryCanceled):
            session.scalar("SELECT pg_sleep(30)")
        canceller.join()


# -- a sweep's failure: its kind and SQLSTATE, in the log line and the result ---------------


def test_a_sweep_that_meets_a_lock_timeout_fails_as_one(
    make_settings: Callable[..., Settings], dsn: str, conn: psycopg.Connection[Any]
) -> None:
    seed(conn)
    settings = make_settings(lock_timeout="200ms")
    with (
        structlog.testing.capture_logs() as logs,
        Database(connection_settings(settings)) as db,
        table_locked(dsn, "routers"),
    ):
        result = runner.run_sweep(db, LEASES, engine_options(settings), now=NOW)
    assert (result.outcome, result.error_type, result.sqlstate) == (
        "failure",
        "LockTimeout",
        "55P03",
    )
    assert result.as_dict()["sqlstate"] == "55P03"
    (failed,) = [e for e in logs if e["event"] == "sweep_failed"]
    assert (failed["error_type"], failed["sqlstate"]) == ("LockTimeout", "55P03")
    # An expected failure is one line: no traceback.
    assert "exc_info" not in failed
    assert routers(conn) == 6


@pytest.mark.fresh_db
def test_a_sweep_cancelled_by_a_shutdown_fails_as_cancelled(
    make_settings: Callable[..., Settings], conn: psycopg.Connection[Any]
) -> None:
    """The daemon's shutdown: stop set, then the statement in flight cancelled. The batch
    rolls back whole and the run reports a cancel, not a statement timeout."""
    seed(conn, garbage=40)
    conn.execute(
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN PERFORM pg_sleep(0.5); RETURN OLD; END $$;"
        "CREATE TRIGGER slow BEFORE DELETE ON routers FOR EACH ROW EXECUTE FUNCTION slow();"
    )
    settings = make_settings(
        strategy="index", batch_size="40", statement_timeout="60s", busy_share="1"
    )
    stop = threading.Event()
    results: list[runner.SweepResult] = []
    with structlog.testing.capture_logs() as logs, Database(connection_settings(settings)) as db:
        worker = threading.Thread(
            target=lambda: results.append(
                runner.run_sweep(
                    db,
                    sweeps_of(settings)["router_leases"],
                    engine_options(settings),
                    now=NOW,
                    stop=stop,
                )
            ),
        )
        worker.start()

        def batch_running() -> bool:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = 'reaper' AND wait_event = 'PgSleep'"
                " AND datname = current_database()"
            ).fetchone()
            return row is not None and row[0] > 0

        deadline = time.monotonic() + 60
        while not batch_running():
            assert time.monotonic() < deadline, "no batch started"
            time.sleep(0.02)
        stop.set()
        assert db.cancel_running() == 1
        worker.join(60)
    (result,) = results
    assert (result.outcome, result.error_type, result.sqlstate) == (
        "failure",
        "QueryCanceled",
        "57014",
    )
    (failed,) = [e for e in logs if e["event"] == "sweep_failed"]
    assert (failed["error_type"], failed["sqlstate"]) == ("QueryCanceled", "57014")
    assert routers(conn) == 41, "the cancelled batch rolled back whole"


# -- a bug ----------------------------------------------------------------------------------


def test_an_unexpected_exception_is_logged_as_a_bug_and_the_daemon_goes_on(
    make_settings: Callable[..., Settings],
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The daemon runs on the database's clock: rows relative to now().
    seed_routers(conn, garbage=5, keep=1)
    settings = make_settings(interval="1h", jitter="0", listen="127.0.0.1:0", gauge_interval="1h")
    daemon = Daemon(settings, [LEASES], registry=CollectorRegistry())

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr(Session, "count_eligible", broken)
    monkeypatch.setattr(execute, "measure_eligible", broken)
    try:
        with structlog.testing.capture_logs() as logs:
            first = daemon.run_sweep(LEASES.name)
        monkeypatch.undo()
        second = daemon.run_sweep(LEASES.name)
    finally:
        daemon.stop(timedelta(seconds=5))
    assert first is not None and second is not None
    assert (first.outcome, first.error_type, first.sqlstate) == ("failure", "KeyError", None)
    assert second.outcome == "success" and routers(conn) == 1
    runs = daemon.metrics.registry.get_sample_value
    assert runs("reaper_sweep_runs_total", {"sweep": LEASES.name, "outcome": "failure"}) == 1
    assert runs("reaper_sweep_runs_total", {"sweep": LEASES.name, "outcome": "success"}) == 1
    (failed,) = [e for e in logs if e["event"] == "sweep_failed"]
    assert isinstance(failed["exc_info"], KeyError)
    # Rendered as every log line is (reaper.log): the traceback, down to where it was raised.
    rendered = structlog.processors.format_exc_info(None, "error", dict(failed))
    assert "Traceback" in rendered["exception"] and "in broken" in rendered["exception"]
