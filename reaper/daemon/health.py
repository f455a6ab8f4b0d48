"""Liveness and readiness of ``reaper run``: what /healthz and /readyz answer, and the probe
that keeps readiness current.

/healthz is the process: no fatal error, the scheduler runs and its heartbeat (a job that
touches no database, on an executor of its own) is recent. It never depends on the database:
a database outage is /readyz's business, and a restart would not help. /readyz is what every
sweep needs: the database answered the last probe within its bound and accepts writes (not a
standby, not read-only), and not every swept table is missing or out of reaper's privileges. A
failure of one sweep or its table (a missing table of its own, a serialization failure, a
table state that refuses its deletes) fails that sweep's runs only.

:class:`Health` is written by the probe and the sweeps' runs (scheduler threads) and read by
HTTP threads; :func:`probe` asks the database.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

import structlog

from reaper import errors, sqltext
from reaper.db import Database, Session
from reaper.sqltext.names import TableName

# The daemon's logger: operators filter its lines on logger="reaper.daemon".
log = structlog.get_logger("reaper.daemon")

# The readiness probe asks the database every 5 s; /readyz fails when the last answer is
# older than 3 probes plus a connect timeout (one slow probe is not an outage).
READINESS_PROBE_SECONDS = 5.0
READY_STALE_PROBES = 3
# The readiness probe's statements each wait at most this long (reaper's watchdog), so one
# probe ends within connect_timeout (the pool's checkout) + this, whatever the network does.
PROBE_BOUND_SECONDS = 5.0
# /healthz fails when the scheduler's heartbeat (a job that touches no database, every 5 s, on
# an executor of its own) is older than this: the scheduler thread is gone or wedged. A
# restart is what helps then.
HEARTBEAT_SECONDS = 5.0
HEALTHY_HEARTBEAT_AGE_SECONDS = 30.0


class NotReady(StrEnum):
    """The class of a reason not to be ready: what /readyz shows to anyone (the reason itself
    may name the connection target, tables and roles; it goes to the log and to requests that
    passed basic auth)."""

    NO_ANSWER = "no database answer yet"
    STALE = "no recent database answer"
    UNREACHABLE = "database unreachable"
    READ_ONLY = "database read-only"
    MISSING_TABLES = "swept tables missing"
    MISSING_PRIVILEGES = "privileges missing"
    DATABASE_ERROR = "database error"
    FATAL = "cannot work (see the log)"


# The class of a run's outage error (reaper.daemon.policy.OUTAGE_ERRORS), by its type's name.
OUTAGE_KINDS = {
    errors.ConnectionFailed.__name__: NotReady.UNREACHABLE,
    errors.ReadOnlyDatabase.__name__: NotReady.READ_ONLY,
    errors.PrivilegeMissing.__name__: NotReady.MISSING_PRIVILEGES,
}


class Health:
    """Readiness and liveness state, shared between threads (times: ``time.monotonic()``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ready = False
        self.reason = "no database answer yet"
        self.kind = NotReady.NO_ANSWER
        self.answered_at: float | None = None
        self.heartbeat_at = time.monotonic()
        self._reported: bool | None = None

    def set(self, ready: bool, reason: str, kind: NotReady = NotReady.DATABASE_ERROR) -> bool:
        """Record a probe's or a run's answer (``kind``: the class of ``reason`` when not
        ready); log only the changes (an outage is one line when it starts and one when it
        ends, not one per probe). Returns True when this answer ends an outage (not ready
        before, ready now)."""
        with self.lock:
            self.ready, self.reason, self.kind = ready, reason, kind
            if ready:
                self.answered_at = time.monotonic()
            changed, self._reported = self._reported is not ready, ready
        if changed and ready:
            log.info("database_ready")
        elif changed:
            log.warning("database_not_ready", reason=reason)
        return changed and ready

    def beat(self) -> None:
        """The scheduler's heartbeat job ran (what /healthz reads)."""
        self.heartbeat_at = time.monotonic()

    def healthz(self, *, fatal: str | None, scheduler_running: bool) -> tuple[bool, str]:
        """Alive: no ``fatal`` error, the scheduler runs and its heartbeat ran within
        :data:`HEALTHY_HEARTBEAT_AGE_SECONDS`; else False with the reason."""
        if fatal:
            return False, fatal
        if not scheduler_running:
            return False, "the scheduler is not running"
        age = time.monotonic() - self.heartbeat_at
        if age > HEALTHY_HEARTBEAT_AGE_SECONDS:
            return False, f"the scheduler has not run a job for {age:.0f}s"
        return True, ""

    def readyz(self, *, connect_timeout: timedelta) -> tuple[bool, str, str]:
        """Ready: the last probe (or run) found the database able to do the work, and it
        answered within :data:`READY_STALE_PROBES` probes plus ``connect_timeout``; else
        False with the class of the reason (:class:`NotReady`) and the reason."""
        with self.lock:
            ready, kind, reason, answered = self.ready, self.kind, self.reason, self.answered_at
        if not ready:
            return False, str(kind), reason
        stale = READY_STALE_PROBES * READINESS_PROBE_SECONDS + connect_timeout.total_seconds()
        if answered is None or time.monotonic() - answered > stale:
            return False, str(NotReady.STALE), f"no database answer for {stale:.0f}s"
        return True, "", ""


@dataclass(frozen=True)
class ProbeAnswer:
    """What one readiness probe found.

    Attributes:
        problem: why the database cannot do the work now (unreachable, a standby, missing
            tables, a missing privilege); None when it can.
        locks_checked: the probe also checked that advisory locks hold on this pool.
        answered: the database answered the probe's statements (even to refuse them); False
            when it could not be reached or stayed silent past the probe's bound
            (``reaper_database_up``).
        server_version: the server's ``server_version_num``, when it answered.
    """

    problem: str | None
    locks_checked: bool
    kind: NotReady = NotReady.DATABASE_ERROR
    answered: bool = True
    server_version: int | None = None


def probe(
    db: Database,
    tables: Sequence[TableName],
    privileges: Callable[[Session], list[tuple[TableName, str]]],
    *,
    check_locks: bool,
) -> ProbeAnswer:
    """Ask the database whether the sweeps can work: it answers, the server accepts writes,
    and at least one table of ``tables`` exists with every ``(table, privilege)`` that
    ``privileges(session)`` names of it held by reaper's role (a table missing or out of
    reach stops its own sweeps only, not the daemon). Each statement waits at most
    :data:`PROBE_BOUND_SECONDS`. Pooled connections are renewed when the database's
    read-only default changed since they connected.

    Args:
        check_locks: also check that advisory locks hold on this connection string (once
            per pool: a transaction-pooling proxy in between makes them meaningless).

    Raises:
        LockNotHeld: ``check_locks`` found that advisory locks do not hold (fatal).
    """
    version: int | None = None
    try:
        with db.session(bound=PROBE_BOUND_SECONDS) as session:
            version = session.server_version
            missing = session.missing_tables(tables)
            refusal, stale = session.write_refusal()
            present = set(tables) - set(missing)
            lacking = session.missing_privileges(privileges(session)) if present else []
        if stale:
            # An ALTER DATABASE/ROLE ... SET default_transaction_read_only since the pool
            # connected: its sessions keep the old value, new ones get the new one.
            log.info("database_settings_changed", action="renewing pooled connections")
            db.renew_connections()
        if check_locks:
            db.check_advisory_locks()
    except errors.LockNotHeld:
        raise
    except errors.ConnectionFailed as exc:
        # The pool only says it got no connection in time; a direct attempt tells why
        # (refused, authentication, no such database), password scrubbed.
        reason = str(exc)
        try:
            db.check_connection()
        except errors.ConnectionFailed as direct:
            reason = str(direct)
        return ProbeAnswer(reason, locks_checked=False, kind=NotReady.UNREACHABLE, answered=False)
    except errors.DatabaseError as exc:
        return ProbeAnswer(
            str(exc),
            locks_checked=False,
            kind=OUTAGE_KINDS.get(type(exc).__name__, NotReady.DATABASE_ERROR),
            # A statement cancelled at the probe's bound: the server stayed silent.
            answered=not isinstance(exc, errors.StatementCanceled),
            server_version=version,
        )
    # Readiness is what stops every sweep: a table missing or out of reach stops the sweeps
    # of that table only (their runs fail and say why; `reaper check` too), unless every
    # swept table is.
    unworkable = set(missing) | {t for t, _ in lacking}
    kind = NotReady.DATABASE_ERROR
    if refusal is not None:
        problem: str | None = refusal
        kind = NotReady.READ_ONLY
    elif not tables or not unworkable >= set(tables):
        problem = None
    elif missing and not lacking:
        problem = f"missing tables: {', '.join(missing)}"
        kind = NotReady.MISSING_TABLES
    else:
        what = ", ".join(f"{p} on table {t}" for t, p in lacking)
        problem = (
            f"missing tables: {', '.join(missing)}; " if missing else ""
        ) + f"reaper's role lacks {what} (see {sqltext.where('grants.sql')})"
        kind = NotReady.MISSING_PRIVILEGES if not missing else NotReady.MISSING_TABLES
    return ProbeAnswer(problem, locks_checked=check_locks, kind=kind, server_version=version)
