"""One run as one value: :class:`Run` carries what the functions of a run share.

A run's functions (the strategy choice, the batches of each heap, the dry run's count) take
the Run, not the sweep, session, statements, cutoffs, settings, metrics, stop event, result
and budget one by one. The Run also counts each batch into the result, the metrics and the
log, and says before each batch whether to stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import structlog

from reaper import errors
from reaper.config.engine import EngineOptions
from reaper.config.sweeps import Budget, Sweep
from reaper.db import BatchRows, SweepStatements
from reaper.engine.archive import capped_keys
from reaper.engine.failures import skip_reason
from reaper.engine.pacing import Pacer
from reaper.engine.port import BatchSession
from reaper.engine.result import SweepResult
from reaper.engine.undeletable import UndeletableRows
from reaper.metrics import Metrics
from reaper.sqltext.names import TableName
from reaper.vocab import SkipReason, StopReason

log = structlog.get_logger("reaper.runner")

# Batches commit with synchronous_commit off (a batch need not wait for its WAL flush), so a
# crash or a failover to a standby can undo the last ones. Their rows are counted in
# reaper_deleted_rows_total once a WAL mark past them is flushed on the server and its
# standbys: checked after a batch at most this often (seconds; the WAL writer flushes within
# wal_writer_delay, 200 ms by default), and at the end of the run, waiting up to
# DURABLE_WAIT_SECONDS, polling every DURABLE_POLL_SECONDS.
DURABLE_CHECK_SECONDS = 1.0
DURABLE_WAIT_SECONDS = 10.0
DURABLE_POLL_SECONDS = 0.02


@dataclass
class Run:
    """One run of one sweep, on one session, from its cutoffs to its last batch.

    Attributes:
        sweep: what is swept.
        options: the engine's options (timeouts, batch targets, thresholds).
        session: the connection that runs the batches (:class:`reaper.db.Session`, or a fake).
        statements: the sweep's statements, one set per heap it deletes from.
        params: the statements' parameters: each cutoff by name.
        result: what the run did so far (filled in as it goes).
        budget: when it stops with work left.
        metrics: counters to update per batch (None: none, as for a dry run).
        stop: checked between batches; when set, the run ends after the batch in flight.
        on_batch: called after every batch with the result so far (progress bars).
        clock: monotonic seconds (tests pin it).
        started: when the run began, on ``clock`` (the budget counts from there).
        pace: called before each batch (:mod:`reaper.engine.pacing`): waits while the
            database asks to (None: pacing off).
        undeletable: the rows the process found undeletable, remembered across its runs
            (None: none kept, as for a dry run).
        before_commit: called with each batch's rows before its COMMIT (the archive file's
            writer, :class:`reaper.engine.archive.LineArchive`; None: nothing).
        parallel: how many connections a heap walk may delete on at once while the database
            is idle (``--parallel``; :func:`reaper.engine.batches.walk_heap`).
        helper_session: lends a heap walk's helper its own session, as a context manager
            (:meth:`reaper.db.Database.helper_session`; None: the run has only its own).

    Thread-safe where a parallel heap walk's helpers share it: :meth:`batch`,
    :meth:`skipped`, :meth:`tally` and :meth:`limits`; the rest (:meth:`should_stop`, the
    pacer, :meth:`count_durable`) is called by the run's own thread only, on its session.
    """

    sweep: Sweep
    options: EngineOptions
    session: BatchSession
    statements: SweepStatements
    params: dict[str, Any]
    result: SweepResult
    budget: Budget = field(default_factory=Budget)
    metrics: Metrics | None = None
    stop: threading.Event | None = None
    on_batch: Callable[[SweepResult], None] | None = None
    clock: Callable[[], float] = time.monotonic
    started: float | None = None
    pace: Pacer | None = None
    undeletable: UndeletableRows | None = None
    sleep: Callable[[float], None] = time.sleep
    # Rows committed but not yet counted: those under the last WAL mark (counted once it is
    # durable) and those since it.
    _mark: str | None = field(default=None, init=False)
    _incarnation: str | None = field(default=None, init=False)
    _marked: int = field(default=0, init=False)
    _unmarked: int = field(default=0, init=False)
    _checked_at: float | None = field(default=None, init=False)
    before_commit: Callable[[BatchRows], None] | None = None
    parallel: int = 1
    helper_session: Callable[[], AbstractContextManager[BatchSession]] | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.clock()

    @property
    def dry_run(self) -> bool:
        """Count, delete nothing."""
        return self.result.dry_run

    def stopping(self) -> bool:
        """A stop was asked for."""
        return self.stop is not None and self.stop.is_set()

    def busy_seconds(self) -> float | None:
        """The seconds a batch aims at while other sessions use the database, as the load
        pacer's controller sets it from what they suffer (None: not busy now, or load pacing
        off)."""
        if self.pace is None or not self.pace.busy:
            return None
        return self.pace.aim

    def idle(self) -> bool:
        """Whether the run may use its extra connections now: the pacer saw the database
        idle at its last measurement (:meth:`reaper.engine.pacing.Pacer.idle`); with pacing
        off, always."""
        return self.pace is None or self.pace.idle()

    def batch(self, rows: int, seconds: float) -> None:
        """Count one committed batch of ``rows`` deleted in ``seconds``."""
        with self._lock:
            r = self.result
            r.rows += rows
            r.batches += 1
            r.batch_seconds.append(seconds)
            if self.metrics is not None:
                self.metrics.batch_finished(r.sweep, seconds)
                self._unmarked += rows
            log.debug("batch_deleted", sweep=r.sweep, rows=rows, seconds=round(seconds, 4))
            if self.on_batch is not None:
                self.on_batch(r)

    def tally(self, field_name: str) -> None:
        """Add one to the result's counter ``field_name`` (``timed_out_batches``,
        ``contended_batches``)."""
        with self._lock:
            setattr(self.result, field_name, getattr(self.result, field_name) + 1)

    def count_durable(self, wait: float = 0.0, session: BatchSession | None = None) -> int:
        """Count in the metrics the rows of the committed batches whose deletes are durable
        now (flushed on the server and its standbys: :meth:`BatchSession.wal_mark`); with
        ``wait``, poll up to that many seconds until every committed batch's are. ``session``:
        ask on another session (the run's own failed). Rows of a mark made on another server
        incarnation (a crash, a restart, a failover since) are dropped, never counted.
        Returns the rows left uncounted (the flush did not come in time, or the session
        failed: the caller may ask again on another session, or :meth:`drop_uncounted`).

        Raises nothing for the database."""
        if self.metrics is None:
            return 0
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
                    self.drop_uncounted(
                        "the server restarted or changed since they "
                        "committed: a crash or a failover may have undone them"
                    )
                    break
                if got.durable:
                    if self._marked:
                        self.metrics.rows_deleted(
                            self.result.table, self.result.reason, self._marked
                        )
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
                sweep=self.result.sweep,
                rows=self._marked + self._unmarked,
                error=str(exc),
                error_type=type(exc).__name__,
            )
        return self._marked + self._unmarked

    @property
    def uncounted(self) -> int:
        """Rows of committed batches not yet counted (their durability not yet known)."""
        return self._marked + self._unmarked

    def drop_uncounted(self, reason: str) -> None:
        """Give up counting the rows not yet known durable: logged, never counted."""
        with self._lock:
            rows = self._marked + self._unmarked
            self._marked = self._unmarked = 0
        if rows:
            log.warning(
                "deleted_rows_not_counted",
                sweep=self.result.sweep,
                table=self.result.table,
                rows=rows,
                reason=reason,
            )

    def deleted_keys(self, heap: TableName, key: Sequence[str], rows: BatchRows) -> None:
        """The keys of one committed batch's deleted rows, one ``batch_keys`` debug line
        (none when the batch returned no keys: it deleted nothing, or keys were not asked
        for), capped at MAX_KEYS_CHARS of keys (``keys_omitted`` counts the rest). ``key``:
        the columns whose values a key holds."""
        if not rows.keys:
            return
        r = self.result
        shown, omitted = capped_keys(rows.keys)
        extra = {"heap": heap} if heap != r.table else {}
        log.debug(
            "batch_keys",
            sweep=r.sweep,
            table=r.table,
            **extra,
            key=key[0] if len(key) == 1 else list(key),
            keys=shown,
            keys_omitted=omitted,
        )

    def skipped(self, heap: str, tid: tuple[int, int], exc: errors.DatabaseError) -> None:
        """A row whose delete failed alone: logged once (with the SQLSTATE) and counted."""
        r = self.result
        reason = skip_reason(exc)
        with self._lock:
            r.skipped[reason] = r.skipped.get(reason, 0) + 1
        if self.metrics is not None:
            self.metrics.row_skipped(r.table, reason)
        # A held row is expected (writers are busy) and tried again next run: info, not warning.
        (log.info if reason == SkipReason.LOCKED else log.warning)(
            "row_skipped",
            sweep=r.sweep,
            table=r.table,
            heap=heap,
            tid=f"({tid[0]},{tid[1]})",
            reason=reason,
            sqlstate=exc.sqlstate,
            error=str(exc),
        )

    def should_stop(self) -> StopReason | None:
        """The reason to stop before the next batch, or None to go on (after any wait the
        pacer asks for: a run still waiting for a standby when its budget ends stops with
        ``replica_lag``)."""
        # Between batches, outside the time a batch is measured by (which sizes the next):
        # count what became durable, at most once every DURABLE_CHECK_SECONDS.
        if self._unmarked and (
            self._checked_at is None or self.clock() - self._checked_at >= DURABLE_CHECK_SECONDS
        ):
            self.count_durable()
        stopped = self._limits()
        if stopped is not None or self.pace is None:
            return stopped
        last = self.result.batch_seconds[-1] if self.result.batches else None
        ends = [s for s in (self.budget.max_seconds, self.budget.window_seconds) if s is not None]
        deadline = self._started() + min(ends) if ends else None
        return self.pace(last, deadline) or self._limits()

    def limits(self) -> StopReason | None:
        """The reason to stop that needs no measurement (a stop asked for, the row or time
        budget spent), or None: what a parallel heap walk's helpers check before each
        batch."""
        with self._lock:
            return self._limits()

    def _started(self) -> float:
        assert self.started is not None
        return self.started

    def _limits(self) -> StopReason | None:
        if self.stopping():
            return StopReason.STOP
        if self.budget.max_rows is not None and self.result.rows >= self.budget.max_rows:
            return StopReason.MAX_ROWS
        elapsed = self.clock() - self._started()
        if self.budget.max_seconds is not None and elapsed >= self.budget.max_seconds:
            return StopReason.MAX_SECONDS
        if self.budget.window_seconds is not None and elapsed >= self.budget.window_seconds:
            return StopReason.WINDOW_CLOSED
        return None
