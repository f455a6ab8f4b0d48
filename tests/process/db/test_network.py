"""Connections under faults: a silent network never hangs a sweep, readiness means "can do its
work", and a connection pooler is either known to keep sessions or refused on every run.

The fault tests run `reaper run` as a process through a TCP proxy that stops forwarding
without closing (a middlebox gone silent), and against a server of their own in a network
namespace whose link goes down (packets dropped).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from reaper import errors
from reaper.config.engine import engine_options
from reaper.config.settings import Settings
from reaper.config.sweeps import by_name
from reaper.daemon.health import READINESS_PROBE_SECONDS
from reaper.db import ConnectionSettings, Database, advisory_lock_key
from reaper.dev import devserver
from tests.support import BUILTIN_SWEEPS, run_reaper, sweeps_of
from tests.support.daemon import (
    free_port,
    http_get,
    reaper_command,
    scalar,
    seed_routers,
    start_reaper,
    wait_for,
)
from tests.support.netfaults import SilentProxy, namespaced_server, netns_unavailable

SWEEPS = by_name(BUILTIN_SWEEPS)
ROUTER_LOCK = advisory_lock_key("router_leases")
# The bound of the requirement: at default settings a sweep on a silent connection fails
# within this many seconds.
SILENT_FAILS_WITHIN_SECONDS = 30.0
SLOW_DELETE = """
CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN PERFORM pg_sleep(0.25); RETURN OLD; END$$;
CREATE TRIGGER slow_delete BEFORE DELETE ON routers FOR EACH ROW EXECUTE FUNCTION slow_delete();
"""


def lock_holder(conn: psycopg.Connection[Any]) -> int | None:
    """The server process holding router_leases' advisory lock in the test's database, if any
    (other tests' daemons share the server and take the same key in their databases)."""
    return scalar(  # type: ignore[no-any-return]
        conn,
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
        " AND ((classid::bigint << 32) | objid::bigint) = %s"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        ROUTER_LOCK,
    )


def alive(conn: psycopg.Connection[Any], pid: int) -> bool:
    return bool(scalar(conn, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", pid))


def reaper_args(dsn: str, port: int) -> list[str]:
    # Short intervals so that the test sees several runs. The outage is noticed through the
    # same mechanisms as at default settings (keepalives and tcp_user_timeout on both sides,
    # the watchdog at statement_timeout + its margin), set shorter so that the test need not
    # hold the network down for long: test_every_connection_carries_keepalives_and_the_server_
    # side_settings checks the defaults themselves.
    quick = make_conninfo(
        dsn, keepalives_idle=2, keepalives_interval=1, keepalives_count=2, tcp_user_timeout=5000
    )
    return [
        "run",
        "--dsn",
        quick,
        "--listen",
        f"127.0.0.1:{port}",
        "--jitter",
        "0",
        "--interval",
        "10s",
        "--strategy",
        "index",
        "--batch-size",
        "4",
        "--gauge-interval",
        "5s",
        "--statement-timeout",
        "3s",
    ]


def outage(
    reaper: Any,
    port: int,
    observer: psycopg.Connection[Any],
    go_silent: Callable[[], None],
    come_back: Callable[[], None],
    *,
    hold_seconds: float,
    server_side_gone_during_outage: bool,
) -> None:
    """Silence the network while a router_leases run holds its lock, then bring it back;
    assert what a user sees (see the module docstring)."""

    def failures() -> list[dict[str, Any]]:
        return [e for e in reaper.events("sweep_failed") if e["sweep"] == "router_leases"]

    holder = wait_for("a run holding its lock", lambda: lock_holder(observer), limit=90)
    failed_before = len(failures())
    go_silent()
    silent_at = time.monotonic()
    try:
        # The run in flight fails (the other sweeps' runs may fail first, on their checkout).
        wait_for(
            "router_leases' sweep_failed",
            lambda: len(failures()) > failed_before,
            limit=SILENT_FAILS_WITHIN_SECONDS + 30,
        )
        failed_after = time.monotonic() - silent_at
        print(f"\nsweep_failed {failed_after:.1f} s after the network went silent")
        assert failed_after <= SILENT_FAILS_WITHIN_SECONDS
        failure = failures()[-1]
        assert failure["error_type"] == "ConnectionFailed", failure
        # The daemon keeps serving: metrics always, liveness always, readiness says no.
        status, body = http_get(port, "/metrics")
        assert status == 200 and "reaper_sweep_runs_total" in body
        wait_for("/readyz 503", lambda: http_get(port, "/readyz")[0] == 503, limit=60)
        if server_side_gone_during_outage:
            # The server's own keepalives tell it reaper's side is gone: the session ends and
            # its advisory lock is freed while the link is still down.
            wait_for(
                "the server to drop the dead session", lambda: not alive(observer, holder), limit=60
            )
            print(f"server-side session gone {time.monotonic() - silent_at:.1f} s in")
        while time.monotonic() - silent_at < hold_seconds:
            # Liveness never depends on the database, however long the outage.
            assert http_get(port, "/healthz")[0] == 200
            assert http_get(port, "/metrics")[0] == 200
            time.sleep(1)
    finally:
        come_back()
    back_at = time.monotonic()
    garbage = "SELECT count(*) FROM routers WHERE router_id LIKE 'garbage-%%'"
    left = scalar(observer, garbage)
    finished_before = len(reaper.events("sweep_finished"))
    wait_for(
        "the session of the silenced run to end", lambda: not alive(observer, holder), limit=60
    )
    wait_for(
        "a run to delete again after the network came back",
        lambda: scalar(observer, garbage) < left,
        limit=60,
    )
    resumed = time.monotonic() - back_at
    print(f"router_leases deleting again {resumed:.1f} s after the network came back")
    # Within one interval (10 s) of the network's return, plus one readiness probe period:
    # the probe seeing the database back is what brings the failed sweeps' runs forward.
    assert resumed <= 10 + READINESS_PROBE_SECONDS + 5
    wait_for(
        "that run to succeed",
        lambda: any(
            e["sweep"] == "router_leases" for e in reaper.events("sweep_finished")[finished_before:]
        ),
        limit=120,
    )
    wait_for("/readyz 200", lambda: http_get(port, "/readyz")[0] == 200)
    assert reaper.terminate() == 0


@pytest.mark.slow
@pytest.mark.fresh_db
def test_a_middlebox_that_stops_forwarding_fails_the_sweep(dsn, conn, tmp_path) -> None:
    conn.execute(SLOW_DELETE)
    seed_routers(conn, garbage=120, keep=3)
    target = conninfo_to_dict(dsn)
    if str(target.get("host", "/")).startswith("/"):
        pytest.skip("the proxy test needs a server on TCP (REAPER_TEST_DSN)")
    proxy = SilentProxy(str(target["host"]), int(target.get("port") or 5432))
    port = free_port()
    through = make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
    reaper = start_reaper(reaper_args(through, port), tmp_path)
    try:
        outage(
            reaper,
            port,
            conn,
            proxy.pause,
            proxy.resume,
            hold_seconds=15,
            server_side_gone_during_outage=False,
        )
        # Nothing deleted that should stay, and the garbage goes in the end.
        assert scalar(conn, "SELECT count(*) FROM routers WHERE router_id LIKE 'keep-%%'") == 3
    finally:
        proxy.close()


@pytest.mark.fresh_db
@pytest.mark.slow
def test_a_link_that_goes_down_fails_the_sweep_and_frees_the_lock(tmp_path) -> None:
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    with namespaced_server(free_port()) as server:
        devserver.load_schema(server.socket_dsn)
        with psycopg.connect(server.socket_dsn, autocommit=True) as observer:
            observer.execute(SLOW_DELETE)
            seed_routers(observer, garbage=120, keep=3)
            port = free_port()
            reaper = start_reaper(reaper_args(server.tcp_dsn, port), tmp_path)
            outage(
                reaper,
                port,
                observer,
                server.link_down,
                server.link_up,
                hold_seconds=15,
                server_side_gone_during_outage=True,
            )
            kept = "SELECT count(*) FROM routers WHERE router_id LIKE 'keep-%%'"
            assert scalar(observer, kept) == 3


# -- connection settings ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("keepalives_idle", "abc"),
        ("tcp_user_timeout", "-5"),
        ("connect_timeout", "xyz"),
        ("connect_timeout", "0"),
        ("keepalives_count", "1.5"),
    ],
)
def test_a_timing_parameter_of_the_dsn_that_is_not_a_whole_number_exits_2(
    settings: Settings, param: str, value: str
) -> None:
    """libpq checks these only when it connects, with the exit code of a refused connection:
    reaper checks them first, as bad configuration."""
    dsn = make_conninfo(settings.dsn or "", **{param: value})
    run = run_reaper("status", env={"REAPER_DSN": dsn})
    assert run.code == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(f"reaper: REAPER_DSN sets {param}=")
    assert "whole number" in line or "forever" in line


def test_the_watchdog_closes_a_connection_whose_network_went_silent(settings, dsn) -> None:
    target = conninfo_to_dict(dsn)
    if str(target.get("host", "/")).startswith("/"):
        pytest.skip("the proxy test needs a server on TCP (REAPER_TEST_DSN)")
    proxy = SilentProxy(str(target["host"]), int(target.get("port") or 5432))
    through = make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
    db = Database(
        ConnectionSettings(
            dsn=through,
            statement_timeout=timedelta(seconds=1),
            lock_timeout=timedelta(seconds=1),
            idle_in_transaction_session_timeout=timedelta(seconds=60),
            connect_timeout=timedelta(seconds=2),
        ),
    )
    try:
        with db:
            with db.session() as session:
                session.scalar("SELECT 1")
                proxy.pause()
                started = time.monotonic()
                with pytest.raises(errors.ConnectionFailed, match="watchdog closed the conn"):
                    session.scalar("SELECT 1")
                # statement_timeout 1 s + margin 5 s + cancel 2 s + grace 2 s.
                assert time.monotonic() - started < 15
            # The pool's checkout is bounded too (its check and its new connection).
            started = time.monotonic()
            with pytest.raises(errors.ConnectionFailed), db.session():
                pass
            assert time.monotonic() - started < 15
            proxy.resume()
            with db.session() as session:
                assert session.scalar("SELECT 1") == 1
    finally:
        proxy.close()


# -- readiness -------------------------------------------------------------------------


def test_readiness_and_health_on_a_hot_standby(tmp_path) -> None:
    """A standby refuses writes: /readyz 503 naming it, /healthz 200."""
    why = netns_unavailable()  # the same needs: root, runuser, the server's binaries
    if why:
        pytest.skip(why)
    from tests.support.netfaults import PG_BIN

    # Not under tmp_path: the postgres user cannot enter pytest's root-only directories.
    work = Path(tempfile.mkdtemp(prefix="reaper-standby-"))
    shutil.chown(work, "postgres", "postgres")
    port = free_port()
    as_pg = ["runuser", "-u", "postgres", "--"]
    data = work / "data"
    subprocess.run(
        [*as_pg, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (data / "standby.signal").touch()
    shutil.chown(data / "standby.signal", "postgres", "postgres")
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={work}"
    subprocess.run(
        [
            *as_pg,
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(work / "log"),
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        http = free_port()
        reaper = start_reaper(
            [
                "run",
                "--dsn",
                f"host=127.0.0.1 port={port} user=postgres dbname=postgres",
                "--listen",
                f"127.0.0.1:{http}",
                "--jitter",
                "0",
                "--interval",
                "1h",
            ],
            tmp_path,
        )
        _, body = wait_for(
            "/readyz 503 on a standby",
            lambda: (r := http_get(http, "/readyz"))[0] == 503 and "read-only" in r[1] and r,
        )
        # Anyone reads the class; the reason itself (a standby, in recovery) is logged.
        assert "database read-only" in body
        assert http_get(http, "/healthz")[0] == 200
        assert reaper.terminate() == 0
        assert "in recovery" in reaper.log_path.read_text()
    finally:
        subprocess.run(
            [*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(work, ignore_errors=True)


# -- connection poolers ----------------------------------------------------------------


def run_once(dsn: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *reaper_command(),
            "run-once",
            "--dsn",
            dsn,
            "--batch-size",
            "50",
            "--strategy",
            "index",
            "--sweep",
            "nodes_silent",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "REAPER_LOG_FORMAT": "json"},
    )


def seed_stale_nodes(conn: psycopg.Connection[Any], n: int) -> None:
    """``n`` stale nodes, and as many live ones (a sweep refuses to empty a whole table)."""
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at) SELECT 'stale-' || i,"
        " now() - interval '40 days' FROM generate_series(1, %s) i",
        (n,),
    )
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at) SELECT 'live-' || i, now()"
        " FROM generate_series(1, %s) i",
        (n,),
    )


def advisory_locks(conn: psycopg.Connection[Any]) -> int:
    """Advisory locks held in the test's database (other tests share the server)."""
    return int(
        scalar(
            conn,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database ="
            " (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
    )


@pytest.mark.slow
def test_a_transaction_pooler_under_load_is_refused_on_every_run(pgbouncer, conn) -> None:
    """The field repro's shape: PgBouncer in transaction mode, 2 server connections, 4 other
    clients keeping them busy, 1,000 stale nodes, batches of 50. Every run is refused before
    its first delete and leaves no lock: the refusal is an identity check (the server process
    answering is not the one announced at connect), true of every connection through
    PgBouncer, so 10 runs show what 40 would; none depends on which backend a transaction
    lands on."""
    pgbench = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
    if not Path(pgbench).exists():
        pytest.skip("pgbench is not installed (postgresql-contrib)")
    seed_stale_nodes(conn, 1000)
    through = pgbouncer("transaction", default_pool_size=2)
    script = Path(conn.info.dbname + ".sql")
    load = None
    try:
        script.write_text("SELECT 1;\n")
        params = conninfo_to_dict(through)
        load = subprocess.Popen(
            [
                pgbench,
                "-n",
                "-c",
                "4",
                "-T",
                "600",
                "-f",
                str(script),
                "-h",
                str(params["host"]),
                "-p",
                str(params["port"]),
                "-U",
                "postgres",
                str(params["dbname"]),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(10):
            proc = run_once(through)
            assert proc.returncode == 1, proc.stderr
            last = proc.stderr.strip().splitlines()[-1]
            assert last.startswith("reaper: a session-level advisory lock cannot hold"), last
            assert "prepared statement" not in proc.stderr
            assert scalar(conn, "SELECT count(*) FROM nodes WHERE peer_id LIKE 'stale-%%'") == 1000
            assert advisory_locks(conn) == 0  # nothing stranded on a pooled backend
    finally:
        if load is not None:
            load.terminate()
            load.wait(timeout=30)
        script.unlink(missing_ok=True)


def test_a_session_pooler_works_when_declared(pgbouncer, conn) -> None:
    seed_stale_nodes(conn, 1000)
    through = pgbouncer("session", default_pool_size=2)
    refused = run_once(through)
    assert refused.returncode == 1 and "--session-pooler" in refused.stderr
    assert scalar(conn, "SELECT count(*) FROM nodes WHERE peer_id LIKE 'stale-%%'") == 1000
    done = run_once(through, "--session-pooler")
    assert done.returncode == 0, done.stderr
    assert scalar(conn, "SELECT count(*) FROM nodes WHERE peer_id LIKE 'stale-%%'") == 0
    assert advisory_locks(conn) == 0


def test_a_sweep_through_a_transaction_pooler_is_refused_before_any_delete(
    pgbouncer, conn, settings: Settings
) -> None:
    """The chokepoints themselves, past the startup check: the run's lock and every batch."""
    seed_stale_nodes(conn, 100)
    through = pgbouncer("transaction")
    from reaper.engine.run import run_sweep

    db = Database(
        ConnectionSettings(
            dsn=through,
            statement_timeout=timedelta(seconds=10),
            lock_timeout=timedelta(seconds=1),
            idle_in_transaction_session_timeout=timedelta(seconds=60),
        ),
    )
    with db:
        result = run_sweep(db, sweeps_of(settings)["nodes_silent"], engine_options(settings))
        assert (result.outcome, result.error_type, result.rows) == ("failure", "LockNotHeld", 0)
        result = run_sweep(
            db, sweeps_of(settings)["nodes_silent"], engine_options(settings), lock=False
        )
        assert (result.outcome, result.error_type, result.rows) == ("failure", "LockNotHeld", 0)
    assert scalar(conn, "SELECT count(*) FROM nodes WHERE peer_id LIKE 'stale-%%'") == 100
    assert advisory_locks(conn) == 0
