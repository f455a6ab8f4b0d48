"""Helpers that the test_partitions.py files of several layers share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import psycopg.conninfo

from reaper.config.settings import Settings, build_settings
from reaper.config.sweeps import Sweep, configured_sweeps
from tests.support import NOW

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
        lo, hi = (
            (start, end)
            if column_type == "timestamptz"
            else (start.replace(tzinfo=None), end.replace(tzinfo=None))
        )
        conn.execute(
            f"CREATE TABLE events_{start:%Y_%m} PARTITION OF events "
            f"FOR VALUES FROM ('{lo.isoformat()}') TO ('{hi.isoformat()}')"
        )
    if default:
        conn.execute("CREATE TABLE events_default PARTITION OF events DEFAULT")


def add(conn: psycopg.Connection[Any], key: str, at: datetime, status: str = "done") -> None:
    conn.execute(
        "INSERT INTO events (key, status, created_at) VALUES (%s, %s, %s)", (key, status, at)
    )


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
    return {
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            (parent,),
        )
    }


def events_settings(
    dsn: str,
    retention: Any = STRADDLE,
    rules: list[dict[str, Any]] | None = None,
    sweep_values: dict[str, Any] | None = None,
    **values: Any,
) -> tuple[Settings, Sweep]:
    declared: dict[str, Any] = (
        {"rule": rules} if rules else {"age": "created_at", "retention": retention}
    )
    body = {"table": "public.events", "reason": "expired", **declared, **(sweep_values or {})}
    settings = build_settings({"dsn": dsn, **values}, {"sweeps": {"events": body}})
    sweep = next(s for s in configured_sweeps(settings) if s.name == "events")
    return settings, sweep
