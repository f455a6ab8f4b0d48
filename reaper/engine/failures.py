"""Why a batch failed: a row's fault (split the batch, skip the row) or the run's (fail it).

The SQLSTATE and the server's CONTEXT line decide: a lock wait that names the tuple it
waited for is a row a writer holds; one that names none waited for the table's lock, which
no row is to blame for (docs/engine.md, "Rows that cannot be deleted").
"""

from __future__ import annotations

import re

from reaper import errors
from reaper.vocab import SkipReason

# SQLSTATEs of a lock wait past lock_timeout and of a foreign key violation (23001: ON DELETE
# RESTRICT's, from PostgreSQL 18 on).
LOCK_NOT_AVAILABLE, FOREIGN_KEY_VIOLATION, RESTRICT_VIOLATION = "55P03", "23503", "23001"

_HELD_TUPLE = re.compile(
    r'while (?:deleting|updating|locking) tuple \((\d+),(\d+)\) in relation "((?:[^"]|"")+)"'
)


def skip_reason(exc: errors.DatabaseError) -> SkipReason:
    """The ``reaper_skipped_rows_total`` reason of a row whose delete failed with ``exc``."""
    if isinstance(exc, errors.StatementCanceled):
        if exc.sqlstate == LOCK_NOT_AVAILABLE:
            return SkipReason.LOCKED
        return SkipReason.TIMEOUT
    if isinstance(exc, errors.ForeignKeyConflict) or exc.sqlstate in (
        FOREIGN_KEY_VIOLATION,
        RESTRICT_VIOLATION,
    ):
        return SkipReason.FOREIGN_KEY
    return SkipReason.ERROR


def held_row(exc: errors.DatabaseError, heap: str) -> tuple[int, int] | None:
    """The tuple id of the row of ``heap`` whose lock a batch waited for past lock_timeout,
    as the server's CONTEXT line names it; None for another failure or relation."""
    if exc.sqlstate != LOCK_NOT_AVAILABLE or not exc.server_context:
        return None
    m = _HELD_TUPLE.search(exc.server_context)
    if m is None or m.group(3).replace('""', '"') != heap:
        return None
    return int(m.group(1)), int(m.group(2))


def isolable(exc: errors.DatabaseError) -> bool:
    """Whether ``exc`` may be the failure of some rows of a batch (split the batch to find
    them) rather than of the whole sweep (no connection, no privilege, a missing object, a
    read-only server, a table that refuses the statement whatever its rows (TableProblem), a
    conflict with another transaction, a table lock held past lock_timeout: the run fails).

    A lock wait that timed out names the tuple it waited for in the server's CONTEXT (a row
    a writer holds, of the swept table or of one a cascade reaches); one that names none was
    a wait for a table's lock (lock_heap.sql), which no row of the batch is to blame for."""
    if exc.sqlstate == LOCK_NOT_AVAILABLE:
        return _HELD_TUPLE.search(exc.server_context or "") is not None
    return isinstance(exc, (errors.StatementCanceled, errors.ForeignKeyConflict)) or (
        type(exc) is errors.DatabaseError
    )


def run_failure(exc: errors.DatabaseError) -> errors.DatabaseError:
    """``exc`` as the run's failure: a table lock held past lock_timeout (a lock timeout that
    names no row, :func:`isolable`) says so, since the server's own line does not."""
    if exc.sqlstate != LOCK_NOT_AVAILABLE or isolable(exc):
        return exc
    out = errors.LockTimeout(
        f"{exc}: another session held a lock on the whole table (a migration, LOCK TABLE) "
        "past lock_timeout (--lock-timeout); no row was skipped, the next run tries again"
    )
    out.sqlstate, out.server_context = exc.sqlstate, exc.server_context
    return out
