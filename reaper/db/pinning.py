"""What every reaper session is, whatever the server, database, role or pooler set: the one
value that says how to connect (:class:`ConnectionSettings`) and the one statement that pins
every session setting on which the meaning or the duration of reaper's statements depends
(:func:`pin_statement`).

The database is shared: ``ALTER DATABASE ... SET``, ``ALTER ROLE ... SET``, the server's
configuration and an earlier statement on a pooled connection can each change a session
setting. reaper does not check for each one; :class:`reaper.db.Database` runs
:func:`pin_statement` when it makes a connection, again before it lends a pooled connection
out and again when one comes back, so every statement reaper sends runs under the values
below and nothing one checkout changed reaches the next. docs/connections.md lists them and
says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from psycopg import sql

APPLICATION_NAME = "reaper"

# The search_path every session runs with, set first, before any function or operator is named:
# an unqualified function, operator or type resolves in pg_catalog alone (pg_temp, listed last,
# is never searched for them), so no object another role creates in public (or in a schema a
# role's or database's search_path lists) is ever called by reaper. Tables are always named
# with their schema (reaper.sqltext.names.TableName): none is found by this path.
SEARCH_PATH = "pg_catalog, pg_temp"

# Settings whose value never depends on reaper's configuration, each with why it is pinned.
FIXED_SETTINGS: Mapping[str, str] = {
    # A backslash in a string literal of a predicate is a backslash, whatever the role says
    # (off: 'a\b' would read as 'a<backspace>'...).
    "standard_conforming_strings": "on",
    "backslash_quote": "safe_encoding",
    # How a date or timestamp literal of a predicate is read ('03/04/2026': March 4, never
    # April 3), and the text of every date that crosses as text.
    "DateStyle": "ISO, MDY",
    # How an interval literal is read ('1 day -01:00' means the same in every style only for
    # 'postgres') and the text psycopg parses intervals from (it reads only this style).
    "IntervalStyle": "postgres",
    # Time zone abbreviations in a timestamp literal ('EST') mean the standard ones.
    "timezone_abbreviations": "Default",
    # READ COMMITTED: a batch re-checks its predicate on a row a concurrent transaction
    # changed, and never fails because another transaction committed first. Under a database's
    # default of REPEATABLE READ or SERIALIZABLE every batch next to a writer could fail with
    # 40001; deferrable only matters there.
    "default_transaction_isolation": "read committed",
    "default_transaction_deferrable": "off",
    # Floats cross as their shortest exact text (-15 would round a replica lag, a fraction).
    "extra_float_digits": "1",
    # psycopg decodes bytea in hex; 'escape' would be read as other bytes.
    "bytea_output": "hex",
    # Every text crosses in UTF-8: a table name or a server message decodes the same.
    "client_encoding": "UTF8",
    # How a string cast to xml in a predicate is parsed.
    "xmloption": "content",
    # A table with row-level security applies its policies to reaper's role as to any other:
    # never bypassed silently (a role with BYPASSRLS still bypasses them, as it must), never
    # an error instead of the rows the policies allow (off makes a filtered query fail).
    "row_security": "on",
    # `expr = NULL` is never true, as SQL says ('on' would make it `expr IS NULL`).
    "transform_null_equals": "off",
    # 'NULL' in an array literal is a null element.
    "array_nulls": "on",
    # Identifiers read back from the catalog (an index's definition) are quoted only where
    # needed, as reaper compares them.
    "quote_all_identifiers": "off",
    # A GIN index scan returns every match, never a random subset (a subset would make a
    # count or a batch's victims differ from the predicate's rows).
    "gin_fuzzy_search_limit": "0",
    # An error in a statement fails that statement; 'on' would end the session, and a
    # table's own error would look like a lost connection.
    "exit_on_error": "off",
    # A generic plan cannot know the cutoff, and could pick a full scan for a batch.
    "plan_cache_mode": "force_custom_plan",
    # The planner's method switches are debugging aids (PostgreSQL's docs: "not intended for
    # permanent use"); a database or role that turns one off would make a batch a full scan.
    # A batch's own transaction-local switches (batch_settings.sql, index_batch_settings.sql)
    # still apply over these.
    **{
        f"enable_{method}": "on"
        for method in (
            "seqscan",
            "indexscan",
            "indexonlyscan",
            "bitmapscan",
            "tidscan",
            "sort",
            "hashjoin",
            "mergejoin",
            "nestloop",
            "material",
            "memoize",
            "hashagg",
            "incremental_sort",
            "partition_pruning",
            "gathermerge",
            "parallel_append",
            "parallel_hash",
            "async_append",
        )
    },
    # The role reaper logged in as acts: a role-level 'SET role' (ALTER ROLE ... SET role) would
    # have every statement run with another role's privileges.
    "role": "none",
}

# Settings younger than the oldest server reaper supports: left alone on an older server.
_SINCE_VERSION: Mapping[str, int] = {
    "enable_incremental_sort": 130000,
    "enable_memoize": 140000,
    "enable_async_append": 140000,
}

# Only a superuser (or a role granted SET on it) may set it, so it is set only when it differs
# from 'origin': 'replica' (ALTER ROLE ... SET by a superuser) turns off triggers, and with them
# foreign keys' ON DELETE actions and checks; a connection that cannot put it back fails.
REPLICATION_ROLE = "origin"


def _ms(d: timedelta) -> int:
    return max(1, round(d.total_seconds() * 1000))


@dataclass(frozen=True)
class ConnectionSettings:
    """How reaper connects and what every session is: one frozen value, built once by the
    caller (from the settings, :func:`reaper.config.connection.connection_settings`) and
    passed to :class:`reaper.db.Database`.

    Its ``repr`` never shows the DSN (it may hold a password).

    Attributes:
        dsn: libpq connection string or URI; "" uses libpq's PG* variables.
        statement_timeout, lock_timeout, idle_in_transaction_session_timeout: PostgreSQL
            session settings (millisecond resolution).
        connect_timeout: how long a connection attempt, and a wait for a connection of the
            pool, may take.
        synchronous_commit: wait for each batch's WAL flush.
        timestamp_time_zone: every session's TimeZone: the zone in which PostgreSQL reads a
            timestamp-without-time-zone or date column compared with a cutoff.
        session_pooler: the DSN points at a pooler in session mode (see
            :meth:`reaper.db.Database.check_advisory_locks`).
        dsn_label: how an error names where the DSN came from (``--dsn``, ``REAPER_DSN``, the
            config file's ``dsn``).
    """

    dsn: str = field(default="", repr=False)
    statement_timeout: timedelta = timedelta(seconds=10)
    lock_timeout: timedelta = timedelta(seconds=1)
    idle_in_transaction_session_timeout: timedelta = timedelta(seconds=60)
    connect_timeout: timedelta = timedelta(seconds=10)
    synchronous_commit: bool = False
    timestamp_time_zone: str = "UTC"
    session_pooler: bool = False
    dsn_label: str = "--dsn"

    def __post_init__(self) -> None:
        if self.dsn is None:
            object.__setattr__(self, "dsn", "")

    def pinned(self, *, read_only: bool = False) -> dict[str, str]:
        """Every session setting reaper pins, name -> value: :data:`FIXED_SETTINGS` and
        those that come from this value. ``read_only``: the session only reads (dry runs,
        status, gauges, checks): every transaction of it is READ ONLY."""
        values = {
            **FIXED_SETTINGS,
            # Every wait of a statement, a lock and an open transaction is bounded.
            "statement_timeout": f"{_ms(self.statement_timeout)}ms",
            "lock_timeout": f"{_ms(self.lock_timeout)}ms",
            "idle_in_transaction_session_timeout": (
                f"{_ms(self.idle_in_transaction_session_timeout)}ms"
            ),
            "synchronous_commit": "on" if self.synchronous_commit else "off",
            # What a wall time without a time zone means in a comparison with a cutoff.
            "TimeZone": self.timestamp_time_zone,
            # reaper's own sessions are told apart by it (the pacer does not count them as
            # live traffic; lock holders are named by it).
            "application_name": APPLICATION_NAME,
        }
        if read_only:
            values["default_transaction_read_only"] = "on"
        return values


def pin_statement(
    settings: ConnectionSettings, server_version: int, *, read_only: bool = False
) -> sql.Composed:
    """The one query string that pins a session: ``SET statement_timeout``, then ``SELECT
    pg_backend_pid(), set_config(...)...``, then the resets to the session's start values of
    what reaper keeps from the role (``default_transaction_read_only`` of a session that may
    write, so an ``ALTER DATABASE ... SET default_transaction_read_only`` still refuses
    reaper's deletes, as it refuses everyone's). ``search_path`` is set by a ``SET`` of its
    own before the ``SELECT``: every name that ``SELECT`` calls resolves in pg_catalog. No
    parameters: one round trip.
    Its one row is the server process id."""
    values = {
        k: v
        for k, v in settings.pinned(read_only=read_only).items()
        if server_version >= _SINCE_VERSION.get(k, 0)
    }
    parts = [
        sql.SQL("set_config({}, {}, false)").format(sql.Literal(k), sql.Literal(v))
        for k, v in values.items()
    ]
    parts.append(
        sql.SQL(
            "CASE WHEN current_setting('session_replication_role') <> {role} "
            "THEN set_config('session_replication_role', {role}, false) END"
        ).format(role=sql.Literal(REPLICATION_ROLE))
    )
    resets = []
    if not read_only:
        resets.append(sql.SQL("; RESET default_transaction_read_only"))
    # statement_timeout first, in a statement of its own: the server arms a statement's timer
    # with the value in force when it starts, so a database's 1 ms would otherwise bound the
    # pin itself (each statement of one query string is timed on its own, PostgreSQL 13+).
    timeout = sql.SQL("SET statement_timeout TO {}; ").format(
        sql.Literal(values["statement_timeout"])
    )
    path = sql.SQL("SET search_path TO {}; ").format(sql.SQL(SEARCH_PATH))
    return sql.Composed(
        [
            timeout,
            path,
            sql.SQL("SELECT pg_backend_pid(), "),
            sql.SQL(", ").join(parts),
            *resets,
        ]
    )
