"""The clock check: the instant a run deletes by is cross-checked before its first delete.

A cutoff is the database clock's ``now()`` minus the retention, so a database clock that
jumped 60 days ahead (an NTP step, a VM restored from a snapshot, faketime) makes every row
younger than 60 days look old enough to go. Before a run's first delete (dry runs judge the
same way and report it), :func:`judge_clock` compares that reading with two other clocks:

- reaper's host clock, read just before and after the database's ``now()``
  (:class:`ClockCheck.HOST`): refused when they differ by more than ``max_clock_skew``,
  either way;
- the database clock as this process last read it, advanced by the host's monotonic clock
  (which no NTP step or ``date -s`` moves) since then (:class:`ClockCheck.HISTORY`):
  refused when the database clock is now further ahead of that than ``max_clock_skew``.
  Only forward: a clock going back makes cutoffs earlier, so a run deletes less.

docs/safety.md ("The clock check") says what each catches and what it cannot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from reaper.config.sweeps import Sweep
from reaper.config.values import format_duration
from reaper.db import Session, utc_instant
from reaper.vocab import ClockCheck


@dataclass(frozen=True)
class ClockReading:
    """One reading of the database clock, with the host's clocks around it.

    Attributes:
        database: the database's ``now()``, a UTC instant (the cutoffs' origin).
        host: the host's wall clock at the middle of the query, a UTC instant.
        monotonic: the host's monotonic clock at the middle of the query (seconds).
        round_trip: seconds the query took: the host reading is that uncertain.
    """

    database: datetime
    host: datetime
    monotonic: float
    round_trip: float = 0.0

    @property
    def host_skew(self) -> float:
        """Seconds the database clock is ahead of the host's (negative: behind)."""
        return (self.database - self.host).total_seconds()


def read_clock(
    database_now: Callable[[], datetime],
    wall: Callable[[], float],
    monotonic: Callable[[], float],
) -> ClockReading:
    """Read ``database_now`` (the session's ``now()``, a UTC instant) between two readings
    of the host's ``wall`` (Unix seconds) and ``monotonic`` clocks."""
    wall0, mono0 = wall(), monotonic()
    db_now = database_now()
    wall1, mono1 = wall(), monotonic()
    host = datetime.fromtimestamp((wall0 + wall1) / 2, UTC)
    return ClockReading(db_now, host, (mono0 + mono1) / 2, max(mono1 - mono0, 0.0))


class ClockHistory:
    """The last database clock reading of one database that a run went on with, kept by the
    process's :class:`reaper.engine.run.Sweeper` (thread-safe)."""

    def __init__(self) -> None:
        self._last: ClockReading | None = None
        self._lock = threading.Lock()

    @property
    def last(self) -> ClockReading | None:
        """The latest accepted reading (by the monotonic clock), or None."""
        with self._lock:
            return self._last

    def record(self, reading: ClockReading) -> None:
        """Keep ``reading`` if it is the latest (runs of one database run in parallel)."""
        with self._lock:
            if self._last is None or reading.monotonic >= self._last.monotonic:
                self._last = reading


@dataclass(frozen=True)
class ClockVerdict:
    """What :func:`judge_clock` found.

    Attributes:
        host_skew: seconds the database clock is ahead of the host's (negative: behind).
        history_skew: seconds it is ahead of its last reading advanced by the monotonic
            clock (None: no earlier reading).
        refused_by: the clock that refused it (None: the run may go on).
        message: the refusal's one line (None: the run may go on).
    """

    host_skew: float
    history_skew: float | None = None
    refused_by: ClockCheck | None = None
    message: str | None = None


def judge_clock(
    sweep: str,
    reading: ClockReading,
    last: ClockReading | None,
    bound: timedelta | None,
) -> ClockVerdict:
    """Judge ``reading`` against the host clock, then against ``last`` (the process's
    previous accepted reading of the same database), allowing ``bound`` either way to the
    host clock (plus the query's round trip) and ``bound`` ahead of the history.
    ``bound`` None: no check (the skews are still measured)."""
    host_skew = reading.host_skew
    history_skew = None
    if last is not None:
        expected = last.database + timedelta(seconds=reading.monotonic - last.monotonic)
        history_skew = (reading.database - expected).total_seconds()
    verdict = ClockVerdict(host_skew, history_skew)
    if bound is None:
        return verdict
    limit = bound.total_seconds()
    if abs(host_skew) > limit + reading.round_trip:
        way = "ahead of" if host_skew > 0 else "behind"
        return ClockVerdict(
            host_skew,
            history_skew,
            ClockCheck.HOST,
            f"sweep {sweep}: the database clock ({_instant(reading.database)}) is "
            f"{_span(host_skew)} {way} reaper's host clock ({_instant(reading.host)}), more "
            f"than max_clock_skew {format_duration(bound)}; nothing was deleted. Fix the "
            f"clock that is wrong, or set max_clock_skew = 0 (--max-clock-skew / "
            "REAPER_MAX_CLOCK_SKEW) to override",
        )
    if last is not None and history_skew is not None and history_skew > limit:
        ago = timedelta(seconds=reading.monotonic - last.monotonic)
        return ClockVerdict(
            host_skew,
            history_skew,
            ClockCheck.HISTORY,
            f"sweep {sweep}: the database clock ({_instant(reading.database)}) jumped "
            f"{_span(history_skew)} ahead since reaper last read it "
            f"({_instant(last.database)}, {_span(ago.total_seconds())} ago by reaper's "
            f"monotonic clock), more than max_clock_skew {format_duration(bound)}; nothing "
            "was deleted. Fix the clock; if the database clock is right now, restart reaper "
            "(it forgets the earlier reading), or set max_clock_skew = 0 (--max-clock-skew / "
            "REAPER_MAX_CLOCK_SKEW) to override",
        )
    return verdict


def _instant(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _span(seconds: float) -> str:
    """A duration to the second (``60d``, ``1h5m``, ``0s``)."""
    return format_duration(timedelta(seconds=round(abs(seconds))))


def compute_cutoffs(session: Session, sweep: Sweep, now: datetime | None) -> dict[str, datetime]:
    """Each of the sweep's cutoffs: ``now - retention``, from one reading of the database
    clock (so that all cutoffs of a run agree), retentions as exact durations, as UTC
    instants: the arithmetic is done on UTC (no DST), never on the session zone's wall
    clock, so a cutoff is the same instant whatever the server, database, role, DSN or
    process time zone.
    """
    return cutoffs_at(sweep, utc_instant(session.now(now)))


def cutoffs_at(sweep: Sweep, db_now: datetime) -> dict[str, datetime]:
    """Each of the sweep's cutoffs at ``db_now`` (a reading of the database clock), as
    :func:`compute_cutoffs` computes them."""
    db_now = utc_instant(db_now)
    return {param: utc_instant(db_now - retention) for param, retention in sweep.retentions.items()}
