"""Helpers that the test_grants.py files of several layers share."""

from __future__ import annotations

import psycopg
from psycopg import sql

from reaper import sqltext

TABLES = ("nodes", "enrollment_requests", "bootstrap_tokens", "routers")


def run_grants(dsn: str) -> list[str]:
    """grants.sql's statements on ``dsn``; the NOTICEs it raised."""
    notices: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
        for stmt in sqltext.statements("grants.sql"):
            conn.execute(sql.SQL(stmt))  # type: ignore[arg-type]
    return notices


# grants.sql's NOTICE while reaper cannot read every session's statistics (pacing).
PACING_NOTICE = "reaper cannot see other sessions and standbys, so it cannot pace its sweeps"


def left_to_say(dsn: str) -> list[str]:
    """What a second run of grants.sql on ``dsn`` still says: the pacing NOTICE alone, while
    the cluster's reaper role is no member of pg_read_all_stats (only a superuser grants it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_has_role('reaper', 'pg_read_all_stats', 'USAGE')").fetchone()
    return [] if row and row[0] else [PACING_NOTICE]
