"""reaper's own exceptions: every error that crosses a module boundary is one of these.

The database module translates psycopg's errors into these classes, so nothing outside
:mod:`reaper.db` needs to know psycopg. Each class's docstring is its default message.
"""

from __future__ import annotations


class ReaperError(Exception):
    """reaper failed."""

    # The database's SQLSTATE for an error that a statement raised (None otherwise).
    sqlstate: str | None = None
    # Where the server was when the statement failed (its CONTEXT line, e.g. ``while
    # deleting tuple (0,5) in relation "nodes"``), or None.
    server_context: str | None = None

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class Refusal(ReaperError):
    """reaper refused to run a sweep: a safety check stopped it before its first delete."""


class ConfigError(ReaperError):
    """The configuration is invalid.

    Raised at startup, before any database work; the CLI prints the message as one line and
    exits with code 2.
    """


class RelationRefused(ConfigError, Refusal):
    """The sweep's table is, or covers, a relation reaper cannot delete rows from by tuple
    id (a view, a foreign table, a materialized view, ...)."""


class DatabaseError(ReaperError):
    """The database refused or failed a statement."""


class ConnectionFailed(DatabaseError):
    """The database cannot be reached."""


class TransactionConflict(DatabaseError):
    """The server rolled a transaction back to resolve a conflict with another one (SQLSTATE
    class 40: a serialization failure, a deadlock); nothing of it was kept, and the database
    itself is fine."""


class TableProblem(DatabaseError):
    """The sweep's table, or an object its statements use, refuses the statement whatever
    the rows: it is not in the state the statement needs (SQLSTATE class 55, e.g. deletes
    published without a replica identity), its data or files are damaged (classes 58, XX),
    or the space it needs is exhausted (53100 disk full, 53400 a configured limit). Every
    batch of the sweep would fail alike, so its run fails; the other sweeps go on, and the
    daemon stays ready."""


class PrivilegeMissing(DatabaseError):
    """reaper's role lacks a privilege it needs."""


class ObjectMissing(DatabaseError):
    """A table, column or function that a sweep needs does not exist."""


class ReadOnlyDatabase(DatabaseError):
    """The server is read-only (a standby, or a primary demoted by a failover)."""


class WriteInRead(DatabaseError):
    """A read (a dry run, status, a gauge, a check) ran into a write: a function that a
    row-level security policy, a view or a trigger calls tried to write, and reaper's
    read-only transaction refused it. Nothing was written."""


class StatementCanceled(DatabaseError):
    """The server cancelled a statement (SQLSTATE 57014 or 55P03); nothing of it was kept.

    Each cause has its own kind below; code that treats them alike catches this one."""


class StatementTimeout(StatementCanceled):
    """A statement ran past statement_timeout."""


class LockTimeout(StatementCanceled):
    """A statement waited past lock_timeout for a lock another session holds."""


class QueryCanceled(StatementCanceled):
    """A statement was cancelled on request: reaper stopping (a shutdown that ran out of
    time), reaper's watchdog after the server went silent, or pg_cancel_backend()."""


class ForeignKeyConflict(DatabaseError):
    """A row in this batch is still referenced by a foreign key; the batch was rolled back."""


class LockNotAcquired(DatabaseError):
    """Another reaper process holds the advisory lock; nothing was done."""


class LockNotHeld(DatabaseError):
    """A session-level advisory lock did not hold across transactions: the connection goes
    through a transaction-pooling proxy (PgBouncer pool_mode=transaction), which hands each
    transaction to any server session. Connect reaper directly or through a session-mode pool."""


class BatchStalled(ReaperError):
    """A batch removed none, or again and again far fewer, of the rows it named: something
    turns its deletes into nothing (a trigger, a rule, a row-level security policy). The run
    stopped rather than repeat it."""


class FullTableRefused(Refusal):
    """A run would delete all, or nearly all, of a table; it stopped before its first delete."""

    def __init__(self, message: str | None = None, *, summary: str | None = None) -> None:
        super().__init__(message)
        # The figures alone, for a line under a dry run's table: ``N of M rows of TABLE ...``.
        self.summary = summary


class ClockSkewRefused(Refusal):
    """The database clock disagrees with a second clock by more than max_clock_skew; the run
    stopped before its first delete."""


class ArchiveFailed(ReaperError):
    """A batch's deleted rows could not be written to the sweep's archive file; the batch was
    rolled back, nothing of it deleted, and the run stopped."""
