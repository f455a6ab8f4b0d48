"""Session-level advisory locks: one key per sweep, taken without waiting, checked to hold
across transactions (a transaction-pooling proxy would lend each transaction another server
session), and who holds them when a run is skipped."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql

from reaper import errors, sqltext
from reaper.db.connection import BoundedConnection
from reaper.db.queries import Queries

# Rounds of the session-pooler check (Database.check_advisory_locks with --session-pooler):
# a millisecond each.
LOCK_PROBE_ROUNDS = 20
# One line (stderr, logs, /readyz) for a connection whose server process is not the one the
# server announced at connect: a pooler stands between reaper and PostgreSQL, and nothing
# says it keeps one server session per client connection.
LOCK_NOT_HELD = (
    "a session-level advisory lock cannot hold on this connection: it goes through a "
    "connection pooler (the server process answering is not the one announced at connect), "
    "and a transaction-pooling proxy (pool_mode=transaction) lends each transaction any "
    "server session; connect "
    "reaper to PostgreSQL directly, or, when the pooler runs pool_mode=session, say so "
    "with --session-pooler"
)
# The same, for a connection that --session-pooler vouches for, found moved all the same.
SESSION_MOVED = (
    "a session-level advisory lock did not hold across transactions: the pooler moved this "
    "connection to another server session, so it is not in pool_mode=session as "
    "--session-pooler says; connect reaper to PostgreSQL directly or through a pool in "
    "session mode"
)


_log = logging.getLogger("reaper.db")


def advisory_lock_key(sweep: str) -> int:
    """The advisory lock key of sweep ``sweep``: the first 8 bytes of SHA-256 of
    ``reaper:sweep:<name>``, as a signed 64-bit integer (``pg_try_advisory_lock(bigint)``).

    Fixed by the name alone, so every reaper process (any version, any host) agrees on it.
    """
    digest = hashlib.sha256(f"reaper:sweep:{sweep}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@dataclass(frozen=True)
class LockHolder:
    """A session that holds one of a sweep's advisory locks (from pg_stat_activity, a row of
    ``engine/advisory_lock_holders.sql``).

    ``client`` is an address, ``local`` (a Unix socket) or ``hidden``; ``backend_start``
    (connected since) and ``state_since`` (in its current state since, e.g. idle since it
    took the lock) are None where PostgreSQL hides them from reaper's role (they need
    pg_read_all_stats).
    """

    pid: int
    application_name: str
    client: str
    backend_start: datetime | None
    user: str = ""
    state_since: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601 (None when hidden)."""
        return {
            "pid": self.pid,
            "user": self.user,
            "application_name": self.application_name,
            "client": self.client,
            "connected_since": self.backend_start.isoformat() if self.backend_start else None,
            "state_since": self.state_since.isoformat() if self.state_since else None,
        }

    def describe(self) -> str:
        """One line: ``pid 123 (user x, application 'psql', client 10.0.0.5, connected since
        2026-06-01T12:00:00+00:00)``."""
        since = self.backend_start.isoformat(timespec="seconds") if self.backend_start else "hidden"
        return (
            f"pid {self.pid} (user {self.user or '?'}, application {self.application_name!r}, "
            f"client {self.client}, connected since {since})"
        )


class AdvisoryLocks(Queries):
    """The advisory-lock methods of a :class:`reaper.db.Session`."""

    def _require_own_session(self) -> None:
        """Refuse, before any lock or delete, a connection through a pooler that nothing says
        keeps one server session per client connection (deterministic: an identity check).

        Raises:
            LockNotHeld: the connection goes through a pooler and --session-pooler is off.
        """
        if (
            isinstance(self._conn, BoundedConnection)
            and self._conn.pooled
            and not self._session_pooler
        ):
            raise errors.LockNotHeld(LOCK_NOT_HELD)

    def try_advisory_locks(self, keys: Sequence[int]) -> bool:
        """Take the session-level advisory locks ``keys`` without waiting: all of them (True)
        or none (False, any taken released). Held until :meth:`release_advisory_locks` or the
        end of the session, then checked from a new transaction.

        Raises:
            LockNotHeld: the locks vanished between two transactions (a transaction-pooling
                proxy moved this session to another server backend).
        """
        self._require_own_session()
        server_pid = getattr(self._conn, "server_pid", None) or self.backend_pid
        with self._errors("advisory lock"), self._conn.cursor() as cur:
            cur.execute(
                sql.SQL(sqltext.engine("try_advisory_locks")),
                {"keys": list(keys), "server_pid": server_pid},
            )
            row = cur.fetchone()
        assert row is not None
        if row[0] != server_pid:
            # Another server session answered (a pooler moved this connection): the statement
            # took no lock there, so nothing is left behind.
            raise errors.LockNotHeld(SESSION_MOVED)
        got = row[1]
        if len(got or ()) < len(keys):
            self.release_advisory_locks()
            return False
        with self._errors("advisory lock"):
            held = int(self.scalar(sqltext.engine("held_advisory_locks"), {"keys": list(keys)}))
        if held < len(keys):
            self.release_advisory_locks()
            raise errors.LockNotHeld(SESSION_MOVED)
        return True

    def release_advisory_locks(self) -> None:
        """Release every session-level advisory lock of this session. Never raises: when the
        release fails the connection is closed, which releases them on the server."""
        if self._conn.closed:
            return  # the session is gone, and its locks with it
        try:
            self.scalar(sqltext.engine("release_advisory_locks"))
        except errors.DatabaseError as exc:
            _log.warning("advisory lock release failed, closing the connection: %s", exc)
            self._conn.close()

    def advisory_lock_holders(self, keys: Sequence[int]) -> list[LockHolder]:
        """The other sessions that hold any of the advisory locks ``keys``."""
        return self.fetch(
            LockHolder,
            sqltext.engine("advisory_lock_holders"),
            {"keys": list(keys)},
            context="advisory lock",
        )
