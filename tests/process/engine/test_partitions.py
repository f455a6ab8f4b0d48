"""Partition retention on a real PostgreSQL: partitions whose bounds prove every row past the
cutoff are dropped whole, the rest is swept row by row, and nothing the retention keeps goes.

Row keys say what must happen: ``go-*`` rows must be gone afterwards, ``stay-*`` rows must
survive. The clock is pinned (``now=NOW``) so every cutoff is exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import psycopg.conninfo
import pytest

from reaper.config.connection import connection_settings
from reaper.config.settings import Settings, build_settings
from reaper.config.sweeps import Sweep, configured_sweeps
from reaper.db import Database
from reaper.engine.run import run_sweep
from tests.support import NOW, run_reaper

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db

# 180 days: 2025-12-03 12:00 UTC, inside the December partition (the boundary).
STRADDLE = "180d"
STRADDLE_CUTOFF = NOW - timedelta(days=180)
MICROSECOND = timedelta(microseconds=1)


def month(year: int, m: int) -> datetime:
    return datetime(year + (m - 1) // 12, (m - 1) % 12 + 1, 1, tzinfo=UTC)


MONTHS = [month(2025, m) for m in range(6, 20)]  # 2025-06 .. 2026-07 (upper bound 2026-08)


def create_events(
    conn: psycopg.Connection[Any],
    *,
    column_type: str = "timestamptz",
    default: bool = True,
    months: list[datetime] = MONTHS,
) -> None:
    """``events``, range-partitioned by created_at, one partition per month of ``months``."""
    conn.execute(
        f"CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY, key text NOT NULL, "
        f"status text NOT NULL DEFAULT 'done', created_at {column_type} NOT NULL) "
        "PARTITION BY RANGE (created_at)"
    )
    conn.execute("CREATE INDEX ON events (created_at)")
    for start in months:
        end = month(start.year, start.month + 1)
        lo, hi = (start, end) if column_type == "timestamptz" else (
            start.replace(tzinfo=None), end.replace(tzinfo=None))
        conn.execute(
            f"CREATE TABLE events_{start:%Y_%m} PARTITION OF events "
            f"FOR VALUES FROM ('{lo.isoformat()}') TO ('{hi.isoformat()}')"
        )
    if default:
        conn.execute("CREATE TABLE events_default PARTITION OF events DEFAULT")


def add(conn: psycopg.Connection[Any], key: str, at: datetime, status: str = "done") -> None:
    conn.execute("INSERT INTO events (key, status, created_at) VALUES (%s, %s, %s)",
                 (key, status, at))


def seed(conn: psycopg.Connection[Any], cutoff: datetime, *, default: bool = True) -> None:
    """Five rows in every month, go-* before ``cutoff`` and stay-* from it on, plus the rows
    either side of the cutoff, and an old and a future row in the DEFAULT partition."""
    for start in MONTHS:
        for day in (1, 3, 10, 20, 28):
            at = start.replace(day=day, hour=6)
            add(conn, f"{'go' if at < cutoff else 'stay'}-{at:%Y%m%d}", at)
    add(conn, "go-just-before-cutoff", cutoff - MICROSECOND)
    add(conn, "stay-on-cutoff", cutoff)
    if default:
        add(conn, "go-default-old", datetime(2020, 1, 1, tzinfo=UTC))
        add(conn, "stay-default-future", datetime(2030, 1, 1, tzinfo=UTC))
    conn.execute("ANALYZE events")


def keys(conn: psycopg.Connection[Any]) -> set[str]:
    return {r[0] for r in conn.execute("SELECT key FROM events")}


def partitions(conn: psycopg.Connection[Any], parent: str = "events") -> set[str]:
    return {r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass", (parent,))}


def events_settings(
    dsn: str, retention: Any = STRADDLE, rules: list[dict[str, Any]] | None = None,
    sweep_values: dict[str, Any] | None = None, **values: Any,
) -> tuple[Settings, Sweep]:
    declared: dict[str, Any] = (
        {"rule": rules} if rules else {"age": "created_at", "retention": retention}
    )
    body = {"table": "public.events", "reason": "expired", **declared,
            **(sweep_values or {})}
    settings = build_settings({"dsn": dsn, **values}, {"sweeps": {"events": body}})
    sweep = next(s for s in configured_sweeps(settings) if s.name == "events")
    return settings, sweep


@pytest.fixture
def db(dsn: str) -> Iterator[Database]:
    settings = build_settings({"dsn": dsn})
    with Database(connection_settings(settings)) as database:
        yield database


# -- the proof: pure, no database ----------------------------------------------------------


# -- dropping -------------------------------------------------------------------------------


def test_dry_run_lists_the_partitions_with_estimated_rows_and_changes_nothing(
    dsn: str, conn: psycopg.Connection[Any], db: Database, tmp_path: Any
) -> None:
    create_events(conn)
    seed(conn, STRADDLE_CUTOFF)
    before_keys, before_partitions = keys(conn), partitions(conn)
    settings, sweep = events_settings(dsn)
    result = run_sweep(db, sweep, settings, now=NOW, dry_run=True)
    assert result.outcome == "success"
    assert keys(conn) == before_keys and partitions(conn) == before_partitions
    assert [(p["partition"], p["estimated_rows"]) for p in result.partitions] == [
        (f"public.events_2025_{m:02d}", 5) for m in range(6, 12)
    ]
    assert result.rows == len([k for k in before_keys if k.startswith("go-")])

    config = tmp_path / "reaper.toml"
    config.write_text(
        "[sweeps.events]\ntable = \"public.events\"\nreason = \"expired\"\n"
        "age = \"created_at\"\nretention = \"180d\"\n"
    )
    run = run_reaper("run-once", "--dry-run", "--sweep", "events", "--config", str(config),
                     env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    assert "would drop partition public.events_2025_06 (~5 rows, estimated)" in run.stdout
    assert keys(conn) == before_keys and partitions(conn) == before_partitions


