"""The database server's clock steps 60 days ahead: a real ``reaper run-once`` deletes no live
row, exits 1 and says which clocks disagree; once the clock is back, the same command deletes
exactly the garbage.

A throwaway PostgreSQL 15 cluster of our own runs under libfaketime, whose offset a file
holds (FAKETIME_TIMESTAMP_FILE, re-read on every call), so the server's clock moves while it
runs and reaper's host clock does not. The shared test server is never touched. The
decisions themselves are tried in milliseconds in tests/unit/test_clock.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reaper.config.sweeps import BUILTIN_NAMES
from reaper.dev import devserver
from tests.support import add_node, add_router, keys, run_reaper
from tests.support.daemon import free_port

pytestmark = [pytest.mark.db, pytest.mark.slow]
BIN = Path("/usr/lib/postgresql/15/bin")
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

LIVE_MEMBERS, SESSION_MEMBERS, ROUTERS = 1_000, 150, 200
OLD_MEMBERS, OLD_ROUTERS = 60, 20


def _as_postgres(*cmd: str) -> list[str]:
    """Run as the postgres user when we are root (initdb refuses root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return list(cmd)


@pytest.fixture(scope="module")
def faked_server() -> Iterator[tuple[str, Path]]:
    """(DSN, offset file) of a fresh cluster whose clock is the host's plus the offset the
    file holds (libfaketime's syntax: ``+0``, ``+60d``)."""
    initdb = str(BIN / "initdb")
    if not Path(initdb).exists() or (os.geteuid() == 0 and not shutil.which("runuser")):
        pytest.skip("initdb is not installed (apt-get install postgresql-15)")
    if not LIBFAKETIME.exists():
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    pg_ctl = str(BIN / "pg_ctl")
    root = Path(tempfile.mkdtemp(prefix="reaper-clock-"))
    data, offset = root / "data", root / "faketime"
    offset.write_text("+0\n")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(offset, "postgres")
    port = free_port()
    subprocess.run(
        _as_postgres(initdb, "-D", str(data), "-U", "postgres", "--auth=trust"),
        check=True,
        capture_output=True,
        timeout=120,
    )
    faked = [
        "env",
        f"LD_PRELOAD={LIBFAKETIME}",
        f"FAKETIME_TIMESTAMP_FILE={offset}",
        "FAKETIME_NO_CACHE=1",
        # Only the wall clock moves: PostgreSQL's timeouts and waits run on the monotonic one.
        "FAKETIME_DONT_FAKE_MONOTONIC=1",
    ]
    subprocess.run(
        _as_postgres(
            *faked,
            pg_ctl,
            "-D",
            str(data),
            "-w",
            "-l",
            str(root / "log"),
            "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1",
            "start",
        ),
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", offset
    finally:
        subprocess.run(
            _as_postgres(pg_ctl, "-D", str(data), "-m", "immediate", "stop"),
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)


def _server_ahead(conn: psycopg.Connection[Any]) -> timedelta:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0] - datetime.now(UTC)  # type: ignore[no-any-return]


def _seed(conn: psycopg.Connection[Any], now: datetime) -> None:
    """Live bootstrap members heard from minutes ago, members with a live session, routers
    whose lease runs; and garbage: members silent, and leases expired, for 40 days."""
    with conn.transaction():
        for i in range(LIVE_MEMBERS):
            add_node(conn, f"keep-member-{i}", enrolled_at=now - timedelta(minutes=i % 30))
        for i in range(SESSION_MEMBERS):
            add_node(
                conn,
                f"keep-session-{i}",
                enrolled_at=now - timedelta(days=1),
                expires_at=now + timedelta(hours=1),
            )
        for i in range(OLD_MEMBERS):
            add_node(conn, f"garbage-member-{i}", enrolled_at=now - timedelta(days=40))
        for i in range(ROUTERS):
            add_router(conn, f"keep-router-{i}", lease_expires_at=now + timedelta(seconds=30))
        for i in range(OLD_ROUTERS):
            add_router(conn, f"garbage-router-{i}", lease_expires_at=now - timedelta(days=40))


def test_a_database_clock_60_days_ahead_deletes_nothing_until_it_is_back(
    faked_server: tuple[str, Path],
) -> None:
    server, offset = faked_server
    dsn = devserver.create_database(server)
    devserver.load_schema(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert abs(_server_ahead(conn)) < timedelta(minutes=1)
        _seed(conn, datetime.now(UTC))
        before = {t: keys(conn, t) for t in ("nodes", "routers")}

        offset.write_text("+60d\n")
        assert _server_ahead(conn) > timedelta(days=59, hours=23)
        run = run_reaper("run-once", env={"REAPER_DSN": dsn})
        assert run.code == 1, run.stdout + run.stderr
        assert {t: keys(conn, t) for t in ("nodes", "routers")} == before
        failed = {e["sweep"]: e for e in run.events() if e.get("event") == "sweep_refused"}
        assert set(failed) == set(BUILTIN_NAMES), run.stderr
        for sweep, event in failed.items():
            assert event["error_type"] == "ClockSkewRefused", event
            assert event["rows"] == 0, event
            line = event["error"]
            assert line.startswith(f"sweep {sweep}: the database clock ("), line
            assert "is 60d ahead of reaper's host clock (" in line, line
            assert "nothing was deleted" in line and "max_clock_skew" in line, line
            assert "\n" not in line
        assert "is 60d ahead of reaper's host clock" in " ".join(run.stdout.split())

        # A dry run says the same, and deletes nothing either.
        dry = run_reaper("run-once", "--dry-run", env={"REAPER_DSN": dsn})
        shown = " ".join(dry.stdout.split())
        assert dry.code == 0, dry.stdout + dry.stderr
        assert (
            "nodes_silent: a real run would be refused: sweep nodes_silent: the database "
            "clock (" in shown
        ), shown
        assert "60d ahead of reaper's host clock" in shown
        assert {t: keys(conn, t) for t in ("nodes", "routers")} == before

        # The operator's override lets the skewed clock through (shown on one sweep only,
        # with a table that has no live row to lose).
        forced = run_reaper(
            "run-once",
            "--sweep",
            "bootstrap_tokens",
            "--max-clock-skew",
            "0",
            env={"REAPER_DSN": dsn},
        )
        assert forced.code == 0, forced.stdout + forced.stderr

        offset.write_text("+0\n")
        assert abs(_server_ahead(conn)) < timedelta(minutes=1)
        again = run_reaper("run-once", env={"REAPER_DSN": dsn})
        assert again.code == 0, again.stdout + again.stderr
        after = {t: keys(conn, t) for t in ("nodes", "routers")}
        assert after == {t: {k for k in before[t] if k.startswith("keep-")} for t in before}
        assert len(after["nodes"]) == LIVE_MEMBERS + SESSION_MEMBERS
        assert len(after["routers"]) == ROUTERS

        # Why: without the check, the same clock deletes live rows that the full-table
        # interlock lets through (87% of nodes, under its 95%; routers, under its 1,000-row
        # floor).
        offset.write_text("+60d\n")
        unchecked = run_reaper(
            "run-once",
            "--sweep",
            "nodes_silent",
            "--sweep",
            "router_leases",
            "--max-clock-skew",
            "0",
            env={"REAPER_DSN": dsn},
        )
        assert unchecked.code == 0, unchecked.stdout + unchecked.stderr
        assert keys(conn, "routers") == set()
        assert {k for k in keys(conn, "nodes") if k.startswith("keep-member-")} == set()
