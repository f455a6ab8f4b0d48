"""Connections under faults: a silent network never hangs a sweep, readiness means "can do its
work", and a connection pooler is either known to keep sessions or refused on every run.

The fault tests run `reaper run` as a process through a TCP proxy that stops forwarding
without closing (a middlebox gone silent), and against a server of their own in a network
namespace whose link goes down (packets dropped).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from reaper import errors
from reaper.config.settings import Settings
from reaper.config.sweeps import by_name
from reaper.daemon.scheduler import Daemon
from reaper.db import ConnectionSettings, Database
from tests.support import BUILTIN_SWEEPS, sweeps_of
from tests.support.daemon import (
    http_get,
    scalar,
    seed_routers,
    wait_for,
)

SWEEPS = by_name(BUILTIN_SWEEPS)


# -- connection settings ---------------------------------------------------------------


def test_every_connection_carries_keepalives_and_the_server_side_settings(database) -> None:
    with database.session() as session:
        got = session.rows(
            "SELECT current_setting('tcp_keepalives_idle') AS idle,"
            " current_setting('client_connection_check_interval') AS check_interval,"
            " current_setting('tcp_user_timeout') AS user_timeout,"
            " inet_client_addr() IS NULL AS unix_socket"
        )[0]
        if got["unix_socket"]:
            pytest.skip("TCP settings read as 0 on a Unix socket")
        assert got["idle"] == "5" and got["check_interval"] == "5s"
        assert got["user_timeout"] == "20000"
    with database.dedicated_session() as dedicated:
        assert dedicated.scalar("SELECT current_setting('tcp_keepalives_count')") == "3"
    params = conninfo_to_dict(database._conninfo)
    assert (params["keepalives"], params["keepalives_idle"], params["tcp_user_timeout"]) == (
        "1",
        "5",
        "20000",
    )


def test_a_dsn_that_sets_keepalives_wins(settings: Settings) -> None:
    dsn = make_conninfo(settings.dsn or "", keepalives_idle=30, tcp_user_timeout=9000)
    db = Database(
        ConnectionSettings(
            dsn=dsn,
            statement_timeout=timedelta(seconds=10),
            lock_timeout=timedelta(seconds=1),
            idle_in_transaction_session_timeout=timedelta(seconds=60),
        ),
    )
    params = conninfo_to_dict(db._conninfo)
    assert (params["keepalives_idle"], params["tcp_user_timeout"]) == ("30", "9000")
    assert params["keepalives_count"] == "3"  # what the DSN leaves out keeps reaper's default
    with db, db.session() as session:
        if session.scalar("SELECT inet_client_addr() IS NULL"):
            return
        # The server watches with the same figures.
        assert session.scalar("SELECT current_setting('tcp_keepalives_idle')") == "30"
        assert session.scalar("SELECT current_setting('tcp_user_timeout')") == "9000"


def test_a_dsn_that_sets_connect_timeout_wins_for_the_pool_too(settings: Settings) -> None:
    dsn = make_conninfo(settings.dsn or "", connect_timeout=3)
    db = Database(
        ConnectionSettings(
            dsn=dsn,
            statement_timeout=timedelta(seconds=10),
            lock_timeout=timedelta(seconds=1),
            idle_in_transaction_session_timeout=timedelta(seconds=60),
            connect_timeout=timedelta(seconds=30),
        ),
    )
    assert conninfo_to_dict(db._conninfo)["connect_timeout"] == "3"
    assert db._connect_timeout == timedelta(seconds=3)  # the pool's checkout bound
    with db, db.session() as session:
        assert session.scalar("SELECT 1") == 1


def test_no_statement_is_ever_prepared(database, conn) -> None:
    with database.session() as session:
        for _ in range(10):
            session.scalar("SELECT %(x)s::int + 1", {"x": 1})
        assert session.scalar("SELECT count(*) FROM pg_prepared_statements") == 0


def test_the_watchdog_ends_a_wait_that_no_timeout_bounds(settings: Settings, conn) -> None:
    """A statement the server never times out (statement_timeout off inside it) and that
    ignores nothing: the watchdog cancels it at statement_timeout + margin."""
    db = Database(
        ConnectionSettings(
            dsn=settings.dsn or "",
            statement_timeout=timedelta(seconds=1),
            lock_timeout=timedelta(seconds=1),
            idle_in_transaction_session_timeout=timedelta(seconds=60),
        ),
    )
    with db, db.session() as session:
        started = time.monotonic()
        # Off in a statement of its own: the server's timer for a statement is armed when the
        # statement starts, so set_config inside the sleeping statement would not stop it.
        session.execute("SELECT set_config('statement_timeout', '0', false)")
        # The watchdog's cancel is a cancel request, not the server's statement_timeout.
        with pytest.raises(errors.QueryCanceled):
            session.rows("SELECT pg_sleep(30)")
        assert time.monotonic() - started < 20


# -- readiness -------------------------------------------------------------------------


@pytest.fixture
def make_daemon(make_settings: Callable[..., Settings]) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(sweeps: list[str], **values: Any) -> Daemon:
        settings = make_settings(
            **{
                "interval": "1h",
                "jitter": "0",
                "listen": "127.0.0.1:0",
                "gauge_interval": "1h",
                **values,
            }
        )
        daemon = Daemon(
            settings, [sweeps_of(settings)[n] for n in sweeps], registry=CollectorRegistry()
        )
        made.append(daemon)
        daemon.start()
        return daemon

    yield make
    for d in made:
        d.stop(timedelta(seconds=5))


@pytest.mark.fresh_db
def test_readiness_follows_a_database_that_refuses_writes(make_daemon, conn) -> None:
    daemon = make_daemon(["router_leases"])
    port = daemon.http.port
    wait_for("ready", lambda: http_get(port, "/readyz")[0] == 200)
    wait_for("the first scheduled run", lambda: daemon.state("router_leases").runs >= 1)
    dbname = conn.info.dbname
    conn.execute(f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = on')
    seed_routers(conn, garbage=3)  # this session predates the change: it may still write
    try:
        _, body = wait_for("/readyz 503", lambda: (r := http_get(port, "/readyz"))[0] == 503 and r)
        # Anyone reads the class of the reason; the reason itself is the daemon's (and logged).
        assert "database read-only" in body
        assert "default_transaction_read_only" in daemon._health.reason
        # The pool's sessions were renewed: sweeps see what the probe saw.
        result = daemon.run_sweep("router_leases")
        assert result is not None and result.outcome == "failure"
        assert result.error_type == "ReadOnlyDatabase"
        assert http_get(port, "/healthz")[0] == 200  # the process is fine
        assert scalar(conn, "SELECT count(*) FROM routers WHERE router_id LIKE 'garbage-%%'") == 3
    finally:
        conn.execute(f'ALTER DATABASE "{dbname}" RESET default_transaction_read_only')
    wait_for("/readyz 200", lambda: http_get(port, "/readyz")[0] == 200)
    result = wait_for(
        "a sweep that succeeds",
        lambda: (
            (r := daemon.run_sweep("router_leases")) is not None and r.outcome == "success" and r
        ),
        limit=30,
    )
    assert result.rows == 3
    assert scalar(conn, "SELECT count(*) FROM routers WHERE router_id LIKE 'garbage-%%'") == 0


@pytest.mark.fresh_db
def test_readiness_needs_the_privileges_the_batches_need(make_daemon, conn, dsn) -> None:
    role = f"reaper_net_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        conn.execute(f"GRANT SELECT ON routers TO {role}")
        daemon = make_daemon(["router_leases"], dsn=make_conninfo(dsn, user=role))
        port = daemon.http.port
        _, body = wait_for(
            "/readyz 503: privileges missing",
            lambda: (r := http_get(port, "/readyz"))[0] == 503 and "privileges" in r[1] and r,
        )
        assert "privileges missing" in body
        assert "lacks DELETE on table routers" in daemon._health.reason
        assert http_get(port, "/healthz")[0] == 200
        conn.execute(f"GRANT DELETE ON routers TO {role}")
        wait_for("/readyz 200", lambda: http_get(port, "/readyz")[0] == 200)
        daemon.stop(timedelta(seconds=5))
    finally:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


# -- connection poolers ----------------------------------------------------------------


def test_a_connection_that_died_is_lost_not_moved_by_a_pooler(database, conn) -> None:
    """A session whose server process died reports a lost connection, never "a pooler moved
    it" (libpq names no server process for a bad connection): the daemon stops for a
    pooler, but waits out an outage."""
    with pytest.raises(errors.ConnectionFailed), database.session() as session:
        conn.execute("SELECT pg_terminate_backend(%s, 5000)", (session.backend_pid,))
        with pytest.raises(errors.DatabaseError):
            session.scalar("SELECT 1")  # the session learns that its connection is gone
        session.try_advisory_locks([4242])
