"""The connection settings of :class:`reaper.db.Database`, taken from the settings: the one
place that turns a :class:`Settings` into a :class:`reaper.db.ConnectionSettings`."""

from __future__ import annotations

from reaper.config.settings import Settings
from reaper.db import ConnectionSettings


def connection_settings(settings: Settings) -> ConnectionSettings:
    """``settings``' connection and session fields as one value; an error about the DSN
    names where it came from (flag, variable or file key: ``settings.origins``)."""
    return ConnectionSettings(
        dsn=settings.dsn or "",
        statement_timeout=settings.statement_timeout,
        lock_timeout=settings.lock_timeout,
        idle_in_transaction_session_timeout=settings.idle_in_transaction_session_timeout,
        connect_timeout=settings.connect_timeout,
        synchronous_commit=settings.synchronous_commit,
        timestamp_time_zone=settings.timestamp_time_zone,
        session_pooler=settings.session_pooler,
        dsn_label=settings.origins.get("dsn", Settings.dsn.flag),
    )
