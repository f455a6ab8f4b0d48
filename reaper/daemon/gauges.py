"""The gauges ``reaper run`` refreshes every ``--gauge-interval``: ``reaper_storage_rows``
(the catalog's estimate of each swept table's rows), per sweep, ``reaper_backlog_rows``
(an index-served count up to ``--backlog-limit``) and ``reaper_backlog_oldest_seconds``, and
whether deleted rows' space is reclaimed: per swept table ``reaper_dead_rows``,
``reaper_autovacuum_threshold_rows`` and ``reaper_last_vacuum_timestamp_seconds``, and the
xmin horizon's holders (``reaper_xmin_horizon_age_*``), from the statistics views.

Never a ``COUNT(*)`` of a table: a table's size comes from the catalog, a backlog from the
sweep's own index, capped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from reaper import errors
from reaper.commands import space
from reaper.config.settings import Settings
from reaper.config.sweeps import Sweep
from reaper.db import Database, Session, SweepStatements
from reaper.engine.clock import compute_cutoffs
from reaper.metrics import Metrics
from reaper.vocab import HorizonHolder

# The daemon's logger: operators filter its lines on logger="reaper.daemon".
log = structlog.get_logger("reaper.daemon")

# What the refresh reads each time, as the daemon holds it now (a reload swaps all three).
Current = Callable[[], tuple[Database, Sequence[Sweep], Settings]]
# The statements of a sweep, composed once.
StatementsFor = Callable[[Session, Sweep], SweepStatements]


class GaugeRefresher:
    """Refreshes the table-size and backlog gauges (the daemon's gauge job calls
    :meth:`refresh`).

    Args:
        metrics: where the gauges live.
        current: the database, the scheduled sweeps and the settings in force.
        statements_for: a sweep's checked statements (cached by the daemon).
        stop: once set, a refresh in progress ends before its next sweep.
    """

    def __init__(
        self,
        metrics: Metrics,
        current: Current,
        statements_for: StatementsFor,
        stop: threading.Event,
    ) -> None:
        self._metrics = metrics
        self._current = current
        self._statements_for = statements_for
        self._stop = stop

    def refresh(self) -> None:
        """Set reaper_storage_rows (catalog estimate) and, per sweep, reaper_backlog_rows (an
        index-served count up to --backlog-limit) and reaper_backlog_oldest_seconds. A sweep
        whose query fails keeps its last values; the failure is logged (``backlog_failed``;
        ``gauges_failed`` when the database cannot be reached). Before the backlogs, the dead
        rows and xmin horizon gauges (:meth:`_refresh_space`; ``space_failed`` when they cannot
        be read)."""
        # Not counted as work in flight: a refresh holds nothing a shutdown must wait for.
        if self._stop.is_set():
            return
        db, sweeps, settings = self._current()
        try:
            with db.session(read_only=True) as session:
                self._metrics.set_storage_rows(
                    session.storage_rows(sorted({s.table for s in sweeps}))
                )
                try:
                    self._refresh_space(session, sweeps)
                except errors.ConnectionFailed:
                    raise
                except errors.ReaperError as exc:
                    log.warning("space_failed", error=str(exc))
                for sweep in sweeps:
                    if self._stop.is_set():
                        return
                    try:
                        self._refresh_backlog(session, sweep, settings)
                    except errors.ConnectionFailed:
                        raise
                    except errors.ReaperError as exc:
                        log.warning("backlog_failed", sweep=sweep.name, error=str(exc))
        except errors.ReaperError as exc:
            log.warning("gauges_failed", error=str(exc))

    def _refresh_backlog(self, session: Session, sweep: Sweep, settings: Settings) -> None:
        cutoffs: dict[str, Any] = dict(compute_cutoffs(session, sweep, None))
        stmts = self._statements_for(session, sweep)
        rows = session.backlog_rows(stmts, cutoffs, settings.backlog_limit)
        oldest = (
            session.backlog_oldest_seconds(stmts, cutoffs, settings.backlog_limit)
            if rows
            else (0.0 if sweep.since else None)
        )
        self._metrics.set_backlog(sweep.name, rows, oldest)

    def _refresh_space(self, session: Session, sweeps: Sequence[Sweep]) -> None:
        """The dead rows of each swept table and the xmin horizon's holders. A table that
        cannot be read keeps its last values (``space_failed``, with the table)."""
        held = space.holders(session)
        now = session.now()
        ages: dict[HorizonHolder, tuple[int, float | None]] = {}
        for h in held:
            ages.setdefault(
                HorizonHolder(h.kind),
                (
                    h.xmin_age,
                    None if h.since is None else max((now - h.since).total_seconds(), 0.0),
                ),
            )
        self._metrics.set_horizon(ages)
        for table in sorted({s.table for s in sweeps}):
            try:
                found = space.table_space(session, table, held)
            except errors.ConnectionFailed:
                raise
            except errors.DatabaseError as exc:
                log.warning("space_failed", table=table, error=str(exc))
                continue
            if found.dead_rows is None:
                continue
            self._metrics.set_table_space(
                table,
                found.dead_rows,
                found.autovacuum_threshold,
                found.last_vacuum.timestamp() if found.last_vacuum else None,
            )
