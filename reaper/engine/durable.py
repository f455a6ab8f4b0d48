"""Durable counting: a run's deleted rows reach ``reaper_deleted_rows_total`` once durable.

Batches commit with synchronous_commit off (a batch need not wait for its WAL flush), so a
crash or a failover to a standby can undo the last ones. Their rows are counted once a WAL
mark past them is flushed on the server and its standbys (:meth:`BatchSession.wal_mark`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from reaper import errors
from reaper.engine.port import BatchSession
from reaper.metrics import Metrics

log = structlog.get_logger("reaper.runner")

# Checked after a batch at most this often (seconds; the WAL writer flushes within
# wal_writer_delay, 200 ms by default), and at the end of the run, waiting up to
# DURABLE_WAIT_SECONDS, polling every DURABLE_POLL_SECONDS.
DURABLE_CHECK_SECONDS = 1.0
DURABLE_WAIT_SECONDS = 10.0
DURABLE_POLL_SECONDS = 0.02


class DurableCount:
    """The rows of one run's committed batches, counted in the metrics once durable.

    Args:
        session: the run's session, which asks for WAL marks.
        metrics: where durable rows are counted.
        sweep, table, reason: the run's labels and log fields.
        clock: monotonic seconds.
        sleep: waits between polls.

    Thread-safe where a parallel heap walk's helpers commit (:meth:`committed`); the rest
    is called by the run's own thread.
    """

    def __init__(
        self,
        session: BatchSession,
        metrics: Metrics,
        sweep: str,
        table: str,
        reason: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.session, self.metrics = session, metrics
        self.sweep, self.table, self.reason = sweep, table, reason
        self.clock, self.sleep = clock, sleep
        # Rows committed but not yet counted: those under the last WAL mark (counted once it
        # is durable) and those since it.
        self._mark: str | None = None
        self._incarnation: str | None = None
        self._marked = 0
        self._unmarked = 0
        self._checked_at: float | None = None
        self._lock = threading.Lock()

    def committed(self, rows: int) -> None:
        """A batch of ``rows`` committed."""
        with self._lock:
            self._unmarked += rows

    def tick(self) -> None:
        """Between batches: count what became durable, at most once every
        DURABLE_CHECK_SECONDS."""
        if self._unmarked and (
            self._checked_at is None or self.clock() - self._checked_at >= DURABLE_CHECK_SECONDS
        ):
            self.count()

    def count(self, wait: float = 0.0, session: BatchSession | None = None) -> int:
        """Count the committed rows whose deletes are durable now.

        With ``wait``, poll up to that many seconds until every committed batch's are.
        ``session``: ask on another session (the run's own failed). Rows of a mark made on
        another server incarnation (a crash, a restart, a failover since) are dropped,
        never counted. Returns the rows left uncounted (the flush did not come in time, or
        the session failed: ask again on another session, or :meth:`drop`).

        Raises nothing for the database."""
        ask = session or self.session
        deadline = self.clock() + wait
        try:
            while self._marked or self._unmarked:
                # The rows committed before the mark is taken (a helper of a parallel heap
                # walk may commit more meanwhile: they stay for the next mark).
                with self._lock:
                    before = self._unmarked
                got = ask.wal_mark(self._mark, self._incarnation)
                self._checked_at = self.clock()
                if not got.same_server:
                    self.drop(
                        "the server restarted or changed since they "
                        "committed: a crash or a failover may have undone them"
                    )
                    break
                if got.durable:
                    if self._marked:
                        self.metrics.rows_deleted(self.table, self.reason, self._marked)
                    self._mark, self._incarnation = got.mark, got.started
                    with self._lock:
                        self._marked, self._unmarked = before, self._unmarked - before
                    if self._marked and wait > 0:
                        continue  # the new mark is checked at once: often flushed already
                if wait <= 0 or self.clock() >= deadline:
                    break
                self.sleep(DURABLE_POLL_SECONDS)
        except errors.DatabaseError as exc:
            log.info(
                "deleted_rows_durability_unknown",
                sweep=self.sweep,
                rows=self._marked + self._unmarked,
                error=str(exc),
                error_type=type(exc).__name__,
            )
        return self._marked + self._unmarked

    def finish(self, session: BatchSession | None = None) -> int:
        """At the run's end: :meth:`count`, waiting up to DURABLE_WAIT_SECONDS."""
        return self.count(wait=DURABLE_WAIT_SECONDS, session=session)

    def give_up(self) -> None:
        """:meth:`drop` what :meth:`finish` could not count, saying why."""
        self.drop(
            "their durability could not be confirmed (the connection failed, or the server "
            f"or a standby did not flush them within {DURABLE_WAIT_SECONDS:.0f} s)"
        )

    @property
    def uncounted(self) -> int:
        """Rows of committed batches not yet counted (their durability not yet known)."""
        return self._marked + self._unmarked

    def drop(self, reason: str) -> None:
        """Give up counting the rows not yet known durable: logged, never counted."""
        with self._lock:
            rows = self._marked + self._unmarked
            self._marked = self._unmarked = 0
        if rows:
            log.warning(
                "deleted_rows_not_counted",
                sweep=self.sweep,
                table=self.table,
                rows=rows,
                reason=reason,
            )
