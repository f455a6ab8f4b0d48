"""Helpers that the test_pacing_db.py files of several layers share."""

from __future__ import annotations

from typing import Any

import psycopg
from prometheus_client import CollectorRegistry


def seed_nodes(conn: psycopg.Connection[Any], garbage: int, keep: int) -> None:
    """``garbage`` bootstrap members silent for 60 days, ``keep`` heard from an hour ago."""
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, banned, ephemeral) "
        "SELECT 'garbage-' || i, now() - interval '60 days', false, false "
        "FROM generate_series(1, %s) AS i",
        (garbage,),
    )
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, banned, ephemeral) "
        "SELECT 'keep-' || i, now() - interval '1 hour', false, false "
        "FROM generate_series(1, %s) AS i",
        (keep,),
    )
    conn.execute("ANALYZE nodes")


def counts(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE peer_id LIKE 'garbage-%%'), "
        "count(*) FILTER (WHERE peer_id LIKE 'keep-%%') FROM nodes"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def throttled(registry: CollectorRegistry, reason: str) -> float:
    return (
        registry.get_sample_value(
            "reaper_throttled_seconds_total", {"sweep": "nodes_silent", "reason": reason}
        )
        or 0.0
    )
