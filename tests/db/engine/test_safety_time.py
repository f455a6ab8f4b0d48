"""A cutoff is an instant: the same rows go whatever the time zone of the server, database,
role, connection string or process, and whatever the column's type (timestamptz, timestamp,
date), across DST changes in both directions. -infinity is the oldest value, infinity never
eligible, and neither crashes a command or a gauge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg import sql
from psycopg.conninfo import make_conninfo

from reaper.commands import status
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import Settings, build_settings
from reaper.config.sweeps import configured_sweeps
from reaper.daemon.scheduler import Daemon
from reaper.db import Database
from reaper.engine.clock import compute_cutoffs
from reaper.engine.run import SUCCESS, run_sweep
from tests.support import SWEEPS, add_router, keys, sweeps_of
from tests.support.safety_time import _alter_lease_column, _dbname

RETENTION = timedelta(days=60)
HALF_HOUR = timedelta(minutes=30)

# (zone, a "now" such that now - 60 days lies on the other side of one of its changes).
ZONES = [
    # Sydney: DST ends 2026-04-05 (+11 -> +10): now in winter, 60 days ago in summer.
    ("Australia/Sydney", datetime(2026, 5, 20, 12, 0, tzinfo=UTC)),
    # Sydney: DST starts 2026-10-04 (+10 -> +11): the repro's direction.
    ("Australia/Sydney", datetime(2026, 11, 20, 12, 0, tzinfo=UTC)),
    # New York: DST starts 2026-03-08 (-5 -> -4); ends 2026-11-01 (-4 -> -5).
    ("America/New_York", datetime(2026, 4, 20, 12, 0, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 12, 20, 12, 0, tzinfo=UTC)),
    # Lord Howe: a 30-minute DST shift (+10:30 <-> +11).
    ("Australia/Lord_Howe", datetime(2026, 5, 20, 12, 0, tzinfo=UTC)),
    # Seoul (no DST, +9), Kolkata (+5:30), Kiritimati (+14) and -12.
    ("Asia/Seoul", datetime(2026, 5, 20, 12, 0, tzinfo=UTC)),
    ("Asia/Kolkata", datetime(2026, 5, 20, 12, 0, tzinfo=UTC)),
    ("Pacific/Kiritimati", datetime(2026, 5, 20, 23, 30, tzinfo=UTC)),
    ("Etc/GMT+12", datetime(2026, 5, 20, 0, 30, tzinfo=UTC)),
]
HOW = ["dsn_options", "alter_database", "alter_role", "pgtz"]


@pytest.fixture
def zoned(
    dsn: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str, str], str]]:
    """``zoned(how, zone)``: the DSN reaper should use so that its sessions would start in
    ``zone``, set the way ``how`` names."""
    altered_role = False

    def apply(how: str, zone: str) -> str:
        nonlocal altered_role
        db = sql.Identifier(_dbname(dsn))
        if how == "dsn_options":
            return make_conninfo(dsn, options=f"-c TimeZone={zone}")
        if how == "alter_database":
            conn.execute(sql.SQL("ALTER DATABASE {} SET timezone = {}").format(db, zone))
        elif how == "alter_role":
            conn.execute(
                sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} SET timezone = {}").format(db, zone)
            )
            altered_role = True
        elif how == "pgtz":
            monkeypatch.setenv("PGTZ", zone)
        return dsn

    yield apply
    if altered_role:
        conn.execute(
            sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} RESET timezone").format(
                sql.Identifier(_dbname(dsn))
            )
        )


def _session_zone(dsn: str) -> str:
    """The zone a plain (non-reaper) session of ``dsn`` starts in: the trap is armed."""
    with psycopg.connect(dsn) as c:
        row = c.execute("SHOW TimeZone").fetchone()
    assert row is not None
    return str(row[0])


def _settings(dsn: str, **values: Any) -> Settings:
    return build_settings({"dsn": dsn, "node_retention": "60d", **values})


def _run(dsn: str, now: datetime, **values: Any) -> None:
    settings = _settings(dsn, **values)
    with Database(connection_settings(settings)) as db:
        result = run_sweep(
            db, sweeps_of(settings)["router_leases"], engine_options(settings), now=now
        )
    assert result.outcome == SUCCESS, result.error


@pytest.mark.fresh_db
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize(("zone", "now"), ZONES)
def test_cutoff_is_an_instant_in_every_zone(
    zoned: Callable[[str, str], str],
    conn: psycopg.Connection[Any],
    how: str,
    zone: str,
    now: datetime,
) -> None:
    """B01 and its family: 30 minutes either side of the cutoff, whatever the session zone."""
    add_router(conn, "keep-young", lease_expires_at=now - RETENTION + HALF_HOUR)
    add_router(conn, "garbage-old", lease_expires_at=now - RETENTION - HALF_HOUR)
    reaper_dsn = zoned(how, zone)
    if how != "pgtz":
        assert _session_zone(reaper_dsn) == zone
    _run(reaper_dsn, now)
    assert keys(conn, "routers") == {"keep-young"}


@pytest.mark.fresh_db
@pytest.mark.parametrize(("zone", "now"), ZONES[:2] + ZONES[5:])
def test_cutoffs_are_utc_instants(
    zoned: Callable[[str, str], str], zone: str, now: datetime
) -> None:
    """compute_cutoffs yields UTC instants exactly ``retention`` before now."""
    settings = _settings(zoned("dsn_options", zone))
    with Database(connection_settings(settings)) as db, db.session() as session:
        sweep = next(s for s in configured_sweeps(settings) if s.name == "router_leases")
        cutoffs = compute_cutoffs(session, sweep, now)
        assert session.now(now) == now and session.now(now).utcoffset() == timedelta(0)
        assert session.scalar("SHOW TimeZone") == "UTC"
    assert cutoffs == {"cutoff": now - RETENTION}
    assert cutoffs["cutoff"].tzinfo is UTC


def _add_wall(conn: psycopg.Connection[Any], key: str, wall: datetime | date) -> None:
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) VALUES (%s, '10.0.0.1:1', %s)",
        (key, wall),
    )


@pytest.mark.fresh_db
@pytest.mark.parametrize("how", ["dsn_options", "alter_role"])
@pytest.mark.parametrize(("zone", "now"), ZONES)
def test_timestamp_column_is_read_in_utc(
    zoned: Callable[[str, str], str],
    conn: psycopg.Connection[Any],
    how: str,
    zone: str,
    now: datetime,
) -> None:
    """C21's family: a timestamp column holding UTC wall times is read in UTC, whatever the
    session zone would have been."""
    _alter_lease_column(conn, "timestamp")
    wall = (now - RETENTION).replace(tzinfo=None)
    _add_wall(conn, "keep-young", wall + HALF_HOUR)
    _add_wall(conn, "garbage-old", wall - HALF_HOUR)
    _run(zoned(how, zone), now)
    assert keys(conn, "routers") == {"keep-young"}


@pytest.mark.fresh_db
@pytest.mark.parametrize(("zone", "now"), ZONES)
def test_timestamp_column_in_the_applications_zone(
    zoned: Callable[[str, str], str], conn: psycopg.Connection[Any], zone: str, now: datetime
) -> None:
    """timestamp_time_zone names the zone the application writes its wall times in; the
    database's own zone (here UTC) does not matter."""
    from zoneinfo import ZoneInfo

    _alter_lease_column(conn, "timestamp")
    wall = (now - RETENTION).astimezone(ZoneInfo(zone)).replace(tzinfo=None)
    _add_wall(conn, "keep-young", wall + HALF_HOUR)
    _add_wall(conn, "garbage-old", wall - HALF_HOUR)
    _run(zoned("alter_database", "UTC"), now, timestamp_time_zone=zone)
    assert keys(conn, "routers") == {"keep-young"}


@pytest.mark.fresh_db
@pytest.mark.parametrize("how", ["alter_database", "pgtz"])
@pytest.mark.parametrize(("zone", "now"), ZONES)
def test_date_column_is_read_in_utc(
    zoned: Callable[[str, str], str],
    conn: psycopg.Connection[Any],
    how: str,
    zone: str,
    now: datetime,
) -> None:
    """A date is eligible when its midnight in timestamp_time_zone (UTC) is before the
    cutoff: the day before the cutoff's day goes, the day after stays, in every zone."""
    _alter_lease_column(conn, "date")
    day = (now - RETENTION).date()
    _add_wall(conn, "garbage-day-before", day - timedelta(days=1))
    _add_wall(conn, "keep-day-after", day + timedelta(days=1))
    _run(zoned(how, zone), now)
    assert keys(conn, "routers") == {"keep-day-after"}


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
def test_gauges_report_minus_infinity_as_a_finite_age(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """B06: the daemon's oldest-age gauge is finite and nothing is logged as failing."""
    settings = build_settings({"dsn": dsn, "listen": "127.0.0.1:0"})
    registry = CollectorRegistry()
    daemon = Daemon(settings, configured_sweeps(settings), registry=registry)
    daemon.db.open()
    try:
        daemon.gauges.refresh()
    finally:
        daemon.stop(timedelta(seconds=5))
    out = capsys.readouterr()
    assert "backlog_failed" not in out.out + out.err
    for name in ("nodes_session", "router_leases"):
        age = registry.get_sample_value("reaper_backlog_oldest_seconds", {"sweep": name})
        assert age is not None and 6.3e10 < age < 6.5e10, (name, age)


@pytest.mark.fresh_db
def test_status_sweep_status_in_process(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A timestamp column's oldest row is compared as an instant (no naive/aware mix-up)."""
    _alter_lease_column(conn, "timestamp")
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) VALUES"
        " ('garbage', 'a', (now() AT TIME ZONE 'UTC') - interval '100 days')"
    )
    settings = build_settings({"dsn": dsn})
    with Database(connection_settings(settings)) as db:
        (st,) = status.sweep_status(db, [SWEEPS["router_leases"]], settings)
    assert st.error is None, st.error
    assert st.oldest_eligible_age_seconds is not None
    assert abs(st.oldest_eligible_age_seconds - 100 * 86400) < 600
