"""Helpers that the test_safety_time.py files of several layers share."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict


def _dbname(dsn: str) -> str:
    return str(conninfo_to_dict(dsn)["dbname"])


def _alter_lease_column(conn: psycopg.Connection[Any], type_: str, zone: str = "UTC") -> None:
    conn.execute(
        sql.SQL(
            "ALTER TABLE routers ALTER lease_expires_at TYPE {}"
            " USING lease_expires_at AT TIME ZONE {}"
        ).format(sql.SQL(type_), sql.Literal(zone))
    )
