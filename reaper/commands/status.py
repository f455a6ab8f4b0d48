"""``reaper status``: per sweep, how much garbage waits and how the table is kept up.

Cheap on a 30M-row table: the backlog is counted through the predicate's index and never past
a cap (``LIMIT``), the oldest eligible row is a ``min()`` the index answers in one row, and
the table's size, dead tuples and (auto)vacuum times come from the catalog and the statistics
collector, never from ``COUNT(*)``. Below the cap the backlog equals ``run-once --dry-run``'s
count for the same database, because both use the same predicate and the same cutoffs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from reaper import errors, sqltext
from reaper.commands import space
from reaper.commands.space import Space
from reaper.config.schedule import next_run
from reaper.config.settings import DEFAULT_BACKLOG_CAP, Settings
from reaper.config.sweeps import Sweep
from reaper.config.values import format_duration
from reaper.db import Database, LockHolder, Session, TableStatus, XminHolder, regclass_text
from reaper.engine.clock import compute_cutoffs
from reaper.engine.run import lock_keys

# Where a status's schedule comes from: this command's settings, which may not be those of a
# `reaper run` already running (a flag, a variable or the file may differ, or have changed
# since it started); the daemon logs its own in daemon_started.
SCHEDULE_SOURCE = "this command's settings"


@dataclass
class SweepStatus:
    """One sweep's backlog and its table's upkeep.

    Attributes:
        backlog_rows: rows eligible now, counted up to the cap (None on error).
        backlog_capped: True when there are at least ``backlog_rows`` (the cap).
        oldest_eligible: the least timestamp, among eligible rows, of the expressions (columns,
            mostly) the predicate compares with a cutoff (None when nothing is eligible).
        oldest_eligible_age_seconds: database now() minus ``oldest_eligible``, seconds.
        estimated_rows: ``pg_class.reltuples`` (-1: never analyzed).
        total_bytes: ``pg_total_relation_size`` (heap, indexes, TOAST), bytes.
        dead_tuples: ``pg_stat_user_tables.n_dead_tup``.
        last_vacuum, last_autovacuum: from ``pg_stat_user_tables`` (None: never).
        lock_holders: the sessions holding the sweep's advisory locks now (a running
            replica, or a squatter: every run is skipped while one holds them).
        schedule: when ``reaper run`` runs it under this command's settings: ``every 1h`` or
            a cron expression. A daemon already running keeps the settings it started with:
            see :data:`SCHEDULE_SOURCE`.
        zone: the time zone of its schedule and window (None: neither has one).
        next_run: when its cron schedule next fires, moved to its window's opening when the
            window is shut then; for an interval sweep, the window's opening while it is shut
            (None: the daemon's own timing, within one interval).
        window: its window (``01:00-05:00``), None when it has none.
        window_open: whether that window is open now (None: no window).
        window_changes: when the window next closes (open) or opens (shut).
        space: whether the table's dead rows are being reclaimed, and what holds them when
            they are not (None when it could not be read: ``space_error`` says why).
        now: the database clock when the status was read (the holders' ages are measured
            by it).
    """

    sweep: str
    table: str
    reason: str
    cutoffs: dict[str, datetime] = field(default_factory=dict)
    backlog_rows: int | None = None
    backlog_capped: bool = False
    oldest_eligible: datetime | None = None
    oldest_eligible_age_seconds: float | None = None
    estimated_rows: int | None = None
    total_bytes: int | None = None
    live_tuples: int | None = None
    dead_tuples: int | None = None
    last_vacuum: datetime | None = None
    last_autovacuum: datetime | None = None
    error: str | None = None
    lock_holders: list[LockHolder] = field(default_factory=list)
    schedule: str = ""
    zone: str | None = None
    next_run: datetime | None = None
    window: str | None = None
    window_open: bool | None = None
    window_changes: datetime | None = None
    space: Space | None = None
    space_error: str | None = None
    now: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: timestamps as ISO 8601."""

        def iso(d: datetime | None) -> str | None:
            return d.isoformat() if d is not None else None

        return {
            "sweep": self.sweep,
            "table": self.table,
            "reason": self.reason,
            "cutoffs": {k: v.isoformat() for k, v in self.cutoffs.items()},
            "backlog_rows": self.backlog_rows,
            "backlog_capped": self.backlog_capped,
            "oldest_eligible": iso(self.oldest_eligible),
            "oldest_eligible_age_seconds": (
                round(self.oldest_eligible_age_seconds, 3)
                if self.oldest_eligible_age_seconds is not None
                else None
            ),
            "estimated_rows": self.estimated_rows,
            "total_bytes": self.total_bytes,
            "live_tuples": self.live_tuples,
            "dead_tuples": self.dead_tuples,
            "last_vacuum": iso(self.last_vacuum),
            "last_autovacuum": iso(self.last_autovacuum),
            "error": self.error,
            "lock_holders": [h.as_dict() for h in self.lock_holders],
            "schedule": self.schedule,
            "schedule_source": SCHEDULE_SOURCE,
            "zone": self.zone,
            "next_run": iso(self.next_run),
            "window": self.window,
            "window_open": self.window_open,
            "window_changes": iso(self.window_changes),
            "space": self.space.as_dict() if self.space is not None else None,
            "space_error": self.space_error,
        }


def sweep_status(
    db: Database,
    sweeps: Sequence[Sweep],
    settings: Settings,
    *,
    cap: int = DEFAULT_BACKLOG_CAP,
    now: datetime | None = None,
) -> list[SweepStatus]:
    """The status of each sweep; an error in one is recorded in its ``error`` and the others
    go on.

    Args:
        cap: count at most this many eligible rows per sweep.
        now: pin the clock (tests); None uses the database's now() for the cutoffs and the
            host's clock for the schedules and windows (as the daemon does).

    Raises:
        ConnectionFailed: the database cannot be reached.
    """
    with db.session(read_only=True) as session:
        held_by: list[XminHolder] | errors.DatabaseError
        try:
            held_by = space.holders(session)
        except errors.DatabaseError as exc:
            held_by = exc
        # The holders' ages are measured by the database clock as it is, whatever ``now``
        # pins for the cutoffs.
        clock = session.now()
        return [_one(session, s, settings, cap, now, held_by, clock) for s in sweeps]


def backlog(
    session: Session, sweep: Sweep, settings: Settings, cap: int, now: datetime | None = None
) -> tuple[int, bool]:
    """``(rows, capped)``: the sweep's eligible rows now, counted up to ``cap``.

    Raises:
        DatabaseError: the count failed (a missing table, column or privilege).
    """
    stmts = session.statements(sweep.predicate)
    params = compute_cutoffs(session, sweep, now)
    rows = session.backlog_rows(stmts, params, cap)
    return rows, rows >= cap


def _one(
    session: Session,
    sweep: Sweep,
    settings: Settings,
    cap: int,
    now: datetime | None,
    held_by: list[XminHolder] | errors.DatabaseError,
    clock: datetime,
) -> SweepStatus:
    st = SweepStatus(sweep.name, sweep.table, sweep.reason)
    timing(st, sweep, now or datetime.now(UTC))
    try:
        st.lock_holders = session.advisory_lock_holders(lock_keys(sweep))
    except errors.DatabaseError as exc:
        st.error = str(exc)
        return st
    try:
        table = session.fetch(
            TableStatus, sqltext.ops("table_status"), {"table": regclass_text(sweep.table)}
        )
        if not table:
            raise errors.ObjectMissing(f'{sweep.table}: relation "{sweep.table}" does not exist')
        t = table[0]
        st.estimated_rows = t.estimated_rows
        st.total_bytes = t.total_bytes
        st.live_tuples = t.live_tuples
        st.dead_tuples = t.dead_tuples
        st.last_vacuum, st.last_autovacuum = t.last_vacuum, t.last_autovacuum
        db_now = session.now(now)
        stmts = session.statements(sweep.predicate)
        st.cutoffs = compute_cutoffs(session, sweep, now)
        st.backlog_rows = session.backlog_rows(stmts, st.cutoffs, cap)
        st.backlog_capped = st.backlog_rows >= cap
        st.oldest_eligible = session.oldest_eligible(stmts, st.cutoffs)
        if st.oldest_eligible is not None:
            st.oldest_eligible_age_seconds = (db_now - st.oldest_eligible).total_seconds()
    except (errors.DatabaseError, errors.ConfigError) as exc:
        st.error = str(exc)
        return st
    st.now = clock
    try:
        if isinstance(held_by, errors.DatabaseError):
            raise held_by
        st.space = space.table_space(session, sweep.table, held_by)
    except errors.DatabaseError as exc:
        # The backlog stands without it.
        st.space_error = str(exc)
    return st


def timing(st: SweepStatus, sweep: Sweep, at: datetime) -> None:
    """Fill in ``st``'s schedule, next run and window as of ``at`` (aware)."""
    if sweep.schedule is not None:
        st.schedule, st.zone = sweep.schedule.expression, sweep.schedule.zone
        st.next_run = next_run(at, cron=sweep.schedule, window=sweep.window)
    else:
        st.schedule = f"every {format_duration(sweep.interval)}"
    if sweep.window is None:
        return
    st.window = f"{sweep.window.start:%H:%M}-{sweep.window.end:%H:%M}"
    st.zone = sweep.window.zone
    closes = sweep.window.closes_at(at)
    st.window_open = closes is not None
    st.window_changes = closes if closes is not None else sweep.window.next_open(at)
    if sweep.schedule is None and closes is None:
        st.next_run = st.window_changes
