"""A cutoff is an instant: the same rows go whatever the time zone of the server, database,
role, connection string or process, and whatever the column's type (timestamptz, timestamp,
date), across DST changes in both directions. -infinity is the oldest value, infinity never
eligible, and neither crashes a command or a gauge.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.support import keys, run_reaper
from tests.support.safety_time import _alter_lease_column, _dbname


@pytest.mark.fresh_db
def test_c21_cli_timestamp_column_seoul_database(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """C21 through the real command: routers.lease_expires_at is a timestamp holding UTC wall
    times, the database's zone is Asia/Seoul, --node-retention 1h: a lease that expires in
    three hours stays, one that expired two hours ago goes."""
    _alter_lease_column(conn, "timestamp")
    conn.execute(
        sql.SQL("ALTER DATABASE {} SET timezone = 'Asia/Seoul'").format(
            sql.Identifier(_dbname(dsn))
        )
    )
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) VALUES"
        " ('keep-expires-in-3h', 'a', (now() AT TIME ZONE 'UTC') + interval '3 hours'),"
        " ('garbage-expired-2h-ago', 'a', (now() AT TIME ZONE 'UTC') - interval '2 hours')"
    )
    run = run_reaper(
        "run-once",
        "--sweep",
        "router_leases",
        "--node-retention",
        "1h",
        env={"REAPER_DSN": dsn, "TZ": "Pacific/Kiritimati"},
    )
    assert run.code == 0, run.stderr
    assert keys(conn, "routers") == {"keep-expires-in-3h"}


def test_b01_cli_sydney_in_the_dsn(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """B01 through the real command: TimeZone Australia/Sydney in the DSN's options and in
    PGTZ, --node-retention 60d: a lease 59 d 23 h 30 min old stays, one 60 d 30 min old goes."""
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) VALUES"
        " ('keep-59d23h30m', 'a', now() - interval '60 days' + interval '30 minutes'),"
        " ('garbage-60d30m', 'a', now() - interval '60 days' - interval '30 minutes')"
    )
    p = conninfo_to_dict(dsn)
    # The URI form of the repro; an embedded server on a socket has no port: host and port go
    # as query parameters then.
    sydney = (
        f"postgresql://{p['user']}@/{p['dbname']}?host={quote(p['host'])}"
        + (f"&port={p['port']}" if p.get("port") else "")
        + "&options="
        + quote("-c TimeZone=Australia/Sydney")
    )
    run = run_reaper(
        "run-once",
        "--sweep",
        "router_leases",
        "--node-retention",
        "60d",
        env={"REAPER_DSN": sydney, "PGTZ": "Australia/Sydney", "TZ": "Australia/Sydney"},
    )
    assert run.code == 0, run.stderr
    assert keys(conn, "routers") == {"keep-59d23h30m"}


@pytest.mark.parametrize(
    ("value", "code", "message"),
    [
        ("Asia/Seoul", 0, None),
        ("+09", 2, "REAPER_TIMESTAMP_TIME_ZONE"),
        ("Mars/Olympus", 2, "is not an IANA time zone name"),
    ],
)
def test_timestamp_time_zone_is_validated(
    dsn: str, value: str, code: int, message: str | None
) -> None:
    run = run_reaper(
        "run-once",
        "--dry-run",
        "--sweep",
        "router_leases",
        env={"REAPER_DSN": dsn, "REAPER_TIMESTAMP_TIME_ZONE": value},
    )
    assert run.code == code, run.stderr
    if message:
        assert len(run.stderr_lines) == 1 and message in run.stderr, run.stderr


@pytest.mark.fresh_db
def test_check_warns_about_columns_without_time_zone(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    _alter_lease_column(conn, "timestamp")
    conn.execute("ALTER TABLE nodes ALTER expires_at TYPE date")
    run = run_reaper("check", "--json", env={"REAPER_DSN": dsn})
    found = [f for f in run.json()["findings"] if f["check"] == "time_zone"]
    warned = {(f["subject"], f["status"]) for f in found}
    assert ("routers.lease_expires_at", "warn") in warned, found
    assert ("nodes.expires_at", "warn") in warned, found
    text = " ".join(f["detail"] for f in found if f["subject"] == "routers.lease_expires_at")
    assert "timestamp without time zone" in text and "timestamp_time_zone" in text
    assert "UTC" in text
    # timestamptz columns draw no warning.
    warned_tables = {f["subject"].split(".")[0] for f in found if f["status"] == "warn"}
    assert "bootstrap_tokens" not in warned_tables


# -- -infinity and infinity ------------------------------------------------------------------


@pytest.fixture
def infinite_rows(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, expires_at) VALUES"
        " ('garbage-minus-infinity', now(), '-infinity'),"
        " ('keep-infinity', now(), 'infinity'),"
        " ('garbage-bc', now(), '4000-01-01 00:00:00+00 BC'),"
        " ('keep-fresh', now(), now() + interval '1 day')"
    )
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) VALUES"
        " ('garbage-minus-infinity', 'a', '-infinity'), ('keep-infinity', 'a', 'infinity')"
    )


@pytest.mark.usefixtures("infinite_rows")
def test_status_reports_minus_infinity_as_a_finite_age(dsn: str) -> None:
    """B06: ``reaper status`` exits 0; -infinity reads as 0001-01-01 00:00 UTC."""
    run = run_reaper("status", "--json", env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    rows = {r["sweep"]: r for r in run.json()}
    for name in ("nodes_session", "router_leases"):
        assert rows[name]["error"] is None, rows[name]
        assert rows[name]["oldest_eligible"] == "0001-01-01T00:00:00+00:00"
        age = rows[name]["oldest_eligible_age_seconds"]
        assert 6.3e10 < age < 6.5e10
    assert rows["nodes_session"]["backlog_rows"] == 2
    assert rows["router_leases"]["backlog_rows"] == 1


@pytest.mark.usefixtures("infinite_rows")
def test_run_deletes_minus_infinity_keeps_infinity(dsn: str, conn: psycopg.Connection[Any]) -> None:
    dry = run_reaper("run-once", "--dry-run", "--json", env={"REAPER_DSN": dsn})
    assert dry.code == 0, dry.stderr
    counted = {r["sweep"]: r["rows"] for r in dry.json()}
    assert counted["nodes_session"] == 2 and counted["router_leases"] == 1
    run = run_reaper("run-once", env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    assert keys(conn, "nodes") == {"keep-infinity", "keep-fresh"}
    assert keys(conn, "routers") == {"keep-infinity"}
