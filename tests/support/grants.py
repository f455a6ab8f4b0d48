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
