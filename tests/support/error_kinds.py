"""Helpers that the test_error_kinds.py files of several layers share."""

from __future__ import annotations

from datetime import timedelta

from reaper.db import ConnectionSettings, Database


def database(dsn: str, *, statement_timeout: float = 10, lock_timeout: float = 1) -> Database:
    return Database(
        ConnectionSettings(
            dsn=dsn,
            statement_timeout=timedelta(seconds=statement_timeout),
            lock_timeout=timedelta(seconds=lock_timeout),
            idle_in_transaction_session_timeout=timedelta(seconds=60),
        ),
    )
