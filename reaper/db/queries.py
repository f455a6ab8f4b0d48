"""The base of a reaper session: one connection and its statements, errors translated."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import class_row, dict_row

from reaper.db.connection import (
    BoundedConnection,
    _UtcTimestamptzBinaryLoader,
    _UtcTimestamptzLoader,
)
from reaper.db.errors import _Redactor, translate_errors

_Row = TypeVar("_Row")


class Queries:
    """Statements on one connection (autocommit), errors translated into
    :mod:`reaper.errors`; the base of :class:`reaper.db.Session`, which adds the catalog
    (:mod:`reaper.db.catalog`), the advisory locks (:mod:`reaper.db.locks`) and the batches.

    ``session_pooler``: the connection goes through a pooler in session mode (see
    :meth:`reaper.db.Database.check_advisory_locks`)."""

    def __init__(
        self, conn: psycopg.Connection[Any], redact: _Redactor, *, session_pooler: bool = False
    ) -> None:
        self._conn = conn
        self._redact = redact
        self._session_pooler = session_pooler
        # Every timestamptz crosses into Python as a UTC instant, whatever the session's
        # TimeZone: Python subtracts aware datetimes of one ZoneInfo on wall-clock time, so a
        # cutoff computed from a Sydney now() across a DST change would be an hour off.
        conn.adapters.register_loader("timestamptz", _UtcTimestamptzLoader)
        conn.adapters.register_loader("timestamptz", _UtcTimestamptzBinaryLoader)

    @property
    def server_version(self) -> int:
        """The server's version number, e.g. 150004."""
        return self._conn.info.server_version

    @property
    def backend_pid(self) -> int:
        """The server process of this connection (for pg_stat_activity)."""
        return self._conn.info.backend_pid

    @property
    def reached(self) -> str:
        """``user@host:port/dbname`` as this connection reached them, never a password."""
        info = self._conn.info
        return f"{info.user}@{info.host}:{info.port}/{info.dbname}"

    def _errors(self, context: str = "") -> contextlib.AbstractContextManager[None]:
        return translate_errors(self._redact, context)

    def fetch(
        self,
        row_type: type[_Row],
        query: str | sql.SQL | sql.Composed,
        params: Mapping[str, Any] | None = None,
        *,
        context: str = "",
    ) -> list[_Row]:
        """Every row of ``query``, each a ``row_type`` (a dataclass of
        :mod:`reaper.db.rows`, built by psycopg's ``class_row``: one keyword argument per
        column, by the column's name). ``context`` prefixes an error's message (a table name).

        Raises:
            TypeError: the statement's columns and the class's fields differ.
        """
        stmt = sql.SQL(query) if isinstance(query, str) else query
        with self._errors(context), self._conn.cursor(row_factory=class_row(row_type)) as cur:
            cur.execute(stmt, params)
            return list(cur.fetchall())

    def values(
        self, query: str | sql.SQL | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> list[Any]:
        """The first column of every row of ``query``."""
        stmt = sql.SQL(query) if isinstance(query, str) else query
        with self._errors(), self._conn.cursor() as cur:
            cur.execute(stmt, params)
            return [row[0] for row in cur.fetchall()]

    def rows(
        self, query: str | sql.SQL | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Every row of ``query``, each a column name -> value dict: for a statement that has
        no row class yet (reaper's own code reads rows with :meth:`fetch`)."""
        stmt = sql.SQL(query) if isinstance(query, str) else query
        with self._errors(), self._conn.cursor(row_factory=dict_row) as cur:
            cur.execute(stmt, params)
            return list(cur.fetchall())

    def scalar(
        self, query: str | sql.Composed | sql.SQL, params: Mapping[str, Any] | None = None
    ) -> Any:
        """The first column of the first row of ``query`` (None when it returns no row)."""
        with self._errors(), self._conn.cursor() as cur:
            cur.execute(sql.SQL(query) if isinstance(query, str) else query, params)
            row = cur.fetchone()
            return None if row is None else row[0]

    def execute(
        self, query: str | sql.SQL | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> None:
        """Run one statement outside any transaction block (autocommit), ignoring its rows:
        for ``CREATE INDEX CONCURRENTLY``, which refuses to run inside one."""
        stmt = sql.SQL(query) if isinstance(query, str) else query
        with self._errors(), self._conn.cursor() as cur:
            cur.execute(stmt, params)

    def cancel(self) -> None:
        """Ask the server to cancel this session's running statement (from another thread);
        waits at most 30 s for the server to take the request."""
        if isinstance(self._conn, BoundedConnection):
            self._conn.cancel_within(30.0)
        else:
            self._conn.cancel_safe()
