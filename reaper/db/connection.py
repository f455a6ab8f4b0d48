"""One reaper connection: the watchdog that bounds every wait on the server, the TCP and
session figures every connection carries, and timestamps read as UTC instants."""

from __future__ import annotations

import contextlib
import logging
import select
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Self, TypeVar

import psycopg
import psycopg.errors
from psycopg import capabilities, pq
from psycopg.abc import PQGen
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader

# Client-side TCP settings every reaper connection gets unless its DSN sets them (libpq
# parameter names; see docs/connections.md). A connection whose peer went silent is declared
# dead after about keepalives_idle + keepalives_interval x keepalives_count seconds when idle,
# and after tcp_user_timeout when data it sent stays unacknowledged: both well under the 30 s
# in which a sweep on a silent network must fail.
KEEPALIVES_IDLE_SECONDS = 5
KEEPALIVES_INTERVAL_SECONDS = 5
KEEPALIVES_COUNT = 3
TCP_USER_TIMEOUT_SECONDS = 20
# The server checks this often whether reaper's side of a running statement's connection is
# still there (client_connection_check_interval, PostgreSQL 14+).
CLIENT_CONNECTION_CHECK_SECONDS = 5
# The watchdog: a wait on the server (a statement, a commit, a fetch) that lasts longer than
# statement_timeout + this margin is cancelled; when the cancel gets no answer within
# WATCHDOG_CANCEL_SECONDS either, the connection is closed and the wait fails. It catches what
# no socket option sees: a middlebox that keeps both TCP connections open and forwards nothing.
WATCHDOG_MARGIN_SECONDS = 5.0
WATCHDOG_CANCEL_SECONDS = 2.0
# The pool's check of an idle connection before lending it (an empty statement) waits this long.
POOL_CHECK_SECONDS = 5.0

_log = logging.getLogger("reaper.db")


def utc_instant(value: datetime) -> datetime:
    """``value`` as an aware datetime in UTC, the one form in which reaper does arithmetic
    on instants (exact: UTC has no DST).

    Raises:
        ValueError: ``value`` is naive (a wall time without a zone is no instant).
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{value!r} has no time zone: a wall time is not an instant")
    return value.astimezone(UTC)


class _UtcTimestamptzLoader(TimestamptzLoader):
    def load(self, data: Any) -> datetime:
        return utc_instant(super().load(data))


class _UtcTimestamptzBinaryLoader(TimestamptzBinaryLoader):
    def load(self, data: Any) -> datetime:
        return utc_instant(super().load(data))


_RV = TypeVar("_RV")


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait on the server has a deadline: reaper's watchdog.

    Every operation on the connection (a statement, its rows, a commit, the pool's check)
    waits at most ``bound`` seconds; past it the running statement is cancelled, and when the
    cancel gets no answer within :data:`WATCHDOG_CANCEL_SECONDS` the connection is closed and
    the operation raises ``psycopg.OperationalError`` (:class:`reaper.errors.ConnectionFailed`
    once translated). ``bound`` None: no deadline (an index build), the socket options only.

    Attributes:
        bound: seconds an operation may wait (statement_timeout + WATCHDOG_MARGIN_SECONDS).
        server_pid: the server process that answered the first statement (pg_backend_pid()).
    """

    bound: float | None = None
    server_pid: int | None = None

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
        """psycopg's connect, whose failure lets go of its half-made connection at once.

        A connection attempt that runs past connect_timeout (a silent network) raises with
        its libpq connection still open, referenced from a cycle of the exception's frames:
        its socket would stay open until the garbage collector ran, one per attempt of an
        outage. The exception's frames are dropped here (its message is what reaper keeps).
        """
        try:
            return super().connect(conninfo, **kwargs)
        except psycopg.Error as exc:
            _drop_frames(exc)
            raise

    @property
    def pooled(self) -> bool:
        """True when the server process answering is not the one the server announced at
        connect (libpq's backend pid): a pooler issued its own cancel key. PostgreSQL itself
        always announces the process that serves the connection. A connection that is gone
        (libpq then gives 0 for the announced process) is no pooler: its next statement fails
        as the dead connection it is."""
        if self.server_pid is None:
            return False
        try:
            announced = self.info.backend_pid  # libpq: 0 once the connection is bad
        except psycopg.Error:
            return False  # closed
        return announced != 0 and self.server_pid != announced

    def wait(self, gen: PQGen[_RV], interval: float = 0.1, timeout: float | None = None) -> _RV:
        """Consume ``gen`` (psycopg's network operation) within ``bound`` seconds (see the
        class); an explicit ``timeout`` (psycopg's own) is kept as given."""
        bound = self.bound
        if bound is None or timeout is not None:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, timeout=bound)
        except psycopg.errors._WaitTimeout:
            pass
        _log.warning(
            "watchdog: no answer from the server for %.0f s (statement_timeout + %.0f s); "
            "cancelling",
            bound,
            WATCHDOG_MARGIN_SECONDS,
        )
        self.cancel_within(WATCHDOG_CANCEL_SECONDS)
        try:
            # The server answered the cancel: the statement ends with its error (QueryCanceled).
            return super().wait(gen, interval, timeout=WATCHDOG_CANCEL_SECONDS)
        except psycopg.errors._WaitTimeout:
            pass
        self.pgconn.finish()
        waited = bound + 2 * WATCHDOG_CANCEL_SECONDS
        raise psycopg.OperationalError(
            f"no answer from the server for {waited:.0f} s, not even to a cancel request: "
            "the network or a middlebox went silent; reaper's watchdog closed the connection"
        )

    def cancel_within(self, seconds: float) -> bool:
        """Send a cancel request for the running statement, waiting at most ``seconds`` for
        the server to take it. True when it did. The cancel request's own connection is
        closed whatever happens: one left open on a silent network (psycopg's
        ``cancel_safe`` leaves it to the garbage collector) is a socket the daemon never
        gets back, one per watchdog firing."""
        if not capabilities.has_cancel_safe():
            try:
                self.cancel()  # libpq before 17: a blocking cancel, bounded by connect_timeout
            except Exception:
                return False
            return True
        try:
            cancel = self.pgconn.cancel_conn()
        except Exception:
            return False  # the connection is gone: nothing to cancel
        try:
            cancel.start()
            deadline = time.monotonic() + seconds
            while True:
                status = cancel.poll()
                if status == pq.PollingStatus.OK:
                    return True
                if status == pq.PollingStatus.FAILED:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                sock = cancel.socket
                if status == pq.PollingStatus.READING:
                    ready = select.select([sock], [], [], left)[0]
                else:
                    ready = select.select([], [sock], [], left)[1]
                if not ready:
                    return False
        except Exception:
            return False
        finally:
            with contextlib.suppress(Exception):
                cancel.finish()


def _drop_frames(exc: BaseException) -> None:
    """Drop the tracebacks of ``exc`` and of the exceptions chained to it (the frames they
    hold, and whatever those reference, are freed as soon as ``exc`` is)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        todo += [e.__context__, e.__cause__]
        e.__traceback__ = None
        if e is not exc:
            e.__context__ = e.__cause__ = None
    exc.__context__ = exc.__cause__ = None


@contextlib.contextmanager
def _bounded(conn: psycopg.Connection[Any], seconds: float | None) -> Iterator[None]:
    """Lower ``conn``'s watchdog bound to ``seconds`` for the block (never raises it)."""
    if seconds is None or not isinstance(conn, BoundedConnection):
        yield
        return
    old = conn.bound
    conn.bound = seconds if old is None else min(old, seconds)
    try:
        yield
    finally:
        conn.bound = old
