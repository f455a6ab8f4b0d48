"""When a sweep may run: a cron schedule and a maintenance window, each read on a named zone's
clock.

A :class:`Cron` is a five-field crontab expression (``0 3 * * *``), read by APScheduler's own
parser, so what loads is exactly what the daemon fires. A :class:`Window` (``01:00-05:00``) is
a span of wall-clock time each day: outside it no run starts, and a run still going at its
end stops before its next batch.

Time changes (DST) follow one rule for a cron time and for a window's start and end alike: a
time the clock shows twice (fall back) counts at its first showing, so a cron time fires once
and a window opens once; a time the clock skips (spring forward) is read with the offset before
the jump, i.e. that much later on the new clock (02:30 is 03:30 in Europe/Berlin), as
APScheduler fires a cron time that night. 01:00-05:00 in Europe/Berlin is open three hours on
the night the clocks go forward and five hours on the night they go back; a window wholly
inside the skipped hour is open its usual length, shifted; one that starts in the skipped hour
and ends after it closes before it would open, and stays shut that night (docs/daemon.md).
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from reaper.config.values import ANY_TIME, shown

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

_HHMM = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
# Where APScheduler's CronTrigger.fields holds minute, hour, day, month and day_of_week.
_CRON_FIELDS = (6, 5, 2, 1, 4)
# A cron expression that fires less than once in this long is a typo (Feb 30th).
_CRON_HORIZON = timedelta(days=366 * 5)


def _zone(name: str) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(name)


@dataclass(frozen=True)
class Cron:
    """A five-field crontab expression (minute hour day-of-month month day-of-week) on the
    clock of ``zone`` (an IANA name; :func:`reaper.config.values.time_zone` checked it)."""

    expression: str
    zone: str = "UTC"

    def trigger(self) -> CronTrigger:
        """APScheduler's trigger of this expression in its zone (every time it names, a time
        the clock shows twice included: :class:`reaper.daemon.triggers.SweepTrigger` fires
        that one once)."""
        # APScheduler is imported here, not at the top: the command line loads this module on
        # every start.
        from apscheduler.triggers.cron import CronTrigger

        return CronTrigger.from_crontab(self.expression, timezone=_zone(self.zone))

    def __str__(self) -> str:
        return f"{self.expression} ({self.zone})"


def parse_cron(value: Any) -> str:
    """A crontab expression of five fields, e.g. ``0 3 * * *`` or ``*/15 1-4 * * mon-fri``;
    returned normalised (single spaces). Checked by APScheduler's parser, and refused when it
    never fires (``0 0 30 2 *``).

    Raises:
        ValueError: not five fields, a field out of range, or an expression that never fires.
    """
    from apscheduler.triggers.cron import CronTrigger

    if not isinstance(value, str):
        raise ValueError(f"{shown(value)} is not a cron expression in quotes")
    fields = value.split()
    if len(fields) != 5:
        raise ValueError(
            f"{shown(value)} has {len(fields)} field(s); a cron expression has five: minute "
            "hour day-of-month month day-of-week"
        )
    text = " ".join(fields)
    weekdays = [token.partition("/") for token in fields[4].split(",")]
    if any(re.search(r"\d", base) or (step and base == "*") for base, _, step in weekdays):
        # APScheduler 3 reads 0 as Monday, crontab as Sunday: a number (or */2, which counts
        # from day 0) would run on the wrong day without a word. Names mean one day everywhere.
        raise ValueError(
            f"{shown(value)}: give the day of the week by name (mon, tue, wed, thu, fri, sat, "
            "sun; ranges such as mon-fri), not by number, whose meaning differs between crons"
        )
    start = datetime(2030, 1, 1, tzinfo=UTC)
    try:
        read = CronTrigger.from_crontab(text, timezone=UTC)
        # The same fields, with an end: the search for a date that never comes stops there.
        minute, hour, day, month, day_of_week = fields
        bounded = CronTrigger(
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=day_of_week,
            timezone=UTC,
            start_date=start,
            end_date=start + _CRON_HORIZON,
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{shown(value)} is not a cron expression: {exc}") from None
    # APScheduler drops what it does not understand in a named field (the /2 of jan-mar/2,
    # the #2 of mon#2) without a word: refuse any field it did not read whole.
    for given, field in zip(fields, (read.fields[i] for i in _CRON_FIELDS), strict=True):
        if _plain(given) != _plain(str(field)):
            raise ValueError(
                f"{shown(value)}: {given!r} is not a field reaper can read whole (it would run "
                f"as {str(field)!r}); use lists and ranges such as mon,wed,fri or 1-5"
            )
    if bounded.get_next_fire_time(None, start) is None:
        raise ValueError(f"{shown(value)} never fires (no such date)")
    return text


def _plain(field: str) -> str:
    """A cron field as compared: lower case, numbers without leading zeros."""
    return re.sub(r"\b0+(\d)", r"\1", field.lower())


@dataclass(frozen=True)
class Window:
    """A daily span of wall-clock time in ``zone``, ``start`` to ``end`` (an end at or before
    the start is on the next day: ``22:00-04:00``). See the module for time changes."""

    start: time
    end: time
    zone: str = "UTC"

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M} ({self.zone})"

    def _first_at(self, day: date, clock: time) -> datetime:
        """When the zone's clock reads ``clock`` on ``day`` (UTC): its first showing when it
        shows twice; a time it skips read with the offset before the jump (as APScheduler
        fires a cron time that night)."""
        return datetime.combine(day, clock).replace(tzinfo=_zone(self.zone), fold=0).astimezone(UTC)

    def span(self, day: date) -> tuple[datetime, datetime]:
        """When the window that opens on local ``day`` opens and closes (UTC); equal when the
        clock skips all of it that night."""
        overnight = self.end <= self.start
        opens = self._first_at(day, self.start)
        closes = self._first_at(day + timedelta(days=1 if overnight else 0), self.end)
        return opens, max(opens, closes)

    def _spans(self, at: datetime) -> list[tuple[datetime, datetime]]:
        today = at.astimezone(_zone(self.zone)).date()
        return [self.span(today + timedelta(days=n)) for n in range(-1, 4)]

    def closes_at(self, at: datetime) -> datetime | None:
        """When the window open at ``at`` closes (UTC); None when it is closed at ``at``."""
        for opens, closes in self._spans(at):
            if opens <= at < closes:
                return closes
        return None

    def is_open(self, at: datetime) -> bool:
        """Whether the window is open at ``at`` (aware)."""
        return self.closes_at(at) is not None

    def next_open(self, at: datetime) -> datetime:
        """``at`` (UTC) when the window is open then, else when it next opens."""
        at = at.astimezone(UTC)
        for opens, closes in self._spans(at):
            if at < closes and opens < closes:
                return max(opens, at)
        raise AssertionError(f"window {self} does not open within days of {at}")


def parse_window(value: Any) -> tuple[time, time]:
    """``HH:MM-HH:MM`` (24-hour clock), e.g. ``01:00-05:00``, or ``22:00-04:00`` over
    midnight.

    Raises:
        ValueError: not two times, a time out of range, or an empty window.
    """
    if not isinstance(value, str):
        raise ValueError(f"{shown(value)} is not a window in quotes")
    text = value.strip()
    m = re.fullmatch(r"(\S+)\s*-\s*(\S+)", text)
    times = [_HHMM.fullmatch(p) for p in m.groups()] if m else []
    if not m or not all(times):
        raise ValueError(
            f"{shown(value)} is not a window: give HH:MM-HH:MM on a 24-hour clock, "
            f'e.g. 01:00-05:00, or "{ANY_TIME}"'
        )
    start, end = (time(int(t.group(1)), int(t.group(2))) for t in times if t)
    if start == end:
        raise ValueError(
            f"{shown(value)} is an empty window; to run at any time, leave window unset or "
            f'give "{ANY_TIME}"'
        )
    return start, end


def next_run(
    at: datetime,
    *,
    cron: Cron | None,
    window: Window | None,
    interval_due: datetime | None = None,
) -> datetime | None:
    """When a sweep next runs after ``at`` (UTC), as its job would fire: its cron schedule's
    next time (None: an interval sweep, due at ``interval_due``, default ``at``), moved to
    the window's next opening when the window is shut then. None: no run is due (a cron
    that never fires again)."""
    when: datetime | None = interval_due or at
    if cron is not None:
        from reaper.config.triggers import SweepTrigger  # APScheduler: see Cron.trigger

        when = SweepTrigger(cron.trigger(), cron=cron).get_next_fire_time(None, at)
    if when is None:
        return None
    when = when.astimezone(UTC)
    return window.next_open(when) if window is not None else when
