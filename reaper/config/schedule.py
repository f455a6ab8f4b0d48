"""When a sweep may run: a cron schedule and a maintenance window, each read on a named zone's
clock.

A :class:`Cron` is a five-field crontab expression (``0 3 * * *``) with crontab's meaning, as
cronie, pg_cron and Kubernetes CronJobs read it: a day of the week by number (0 and 7 are
Sunday) or by name, and, when both day fields are restricted (neither starts with ``*``), a
day that matches either (``0 3 1 * mon``: the 1st, and every Monday). It becomes APScheduler
triggers that fire exactly those times: the day of the week by name (APScheduler counts from
Monday), and an OR of two triggers for the two day fields; tests/unit/config/test_cron_table.py
holds them to a table of next fire times from an independent crontab implementation.
A :class:`Window` (``01:00-05:00``) is
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
    from apscheduler.triggers.base import BaseTrigger

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

    def trigger(self) -> BaseTrigger:
        """APScheduler's trigger of this expression in its zone (every time it names, a time
        the clock shows twice included: :class:`reaper.daemon.triggers.SweepTrigger` fires
        that one once)."""
        return _trigger(self.expression.split(), _zone(self.zone))

    def __str__(self) -> str:
        return f"{self.expression} ({self.zone})"


# crontab's days of the week, by its numbers (0 and 7: Sunday), as APScheduler names them.
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DAY_TOKEN = re.compile(r"(\*|\w+)(?:-(\w+))?(?:/(\d+))?")


def _day_number(word: str) -> int:
    """A crontab day of the week: 0-7 (0 and 7: Sunday) or a name (``mon``, ``Mon``)."""
    if word.isdigit() and 0 <= int(word) <= 7:
        return int(word) % 7
    if word.lower()[:3] in _DAY_NAMES and len(word) == 3:
        return _DAY_NAMES.index(word.lower())
    raise ValueError(f"{word!r} is not a day of the week (0-7, 0 and 7 being Sunday, or sun-sat)")


def crontab_weekdays(field: str) -> str:
    """A crontab day-of-week field as APScheduler's names, with crontab's meaning: ``1-5``
    -> ``mon,tue,wed,thu,fri``, ``0`` and ``7`` -> ``sun``, ``*/2`` -> ``sun,tue,thu,sat``;
    ``*`` stays ``*``.

    Raises:
        ValueError: a token that is not a day, a range, a step or a list of them.
    """
    if field == "*":
        return field
    days: set[int] = set()
    for token in field.split(","):
        m = _DAY_TOKEN.fullmatch(token)
        if not m:
            raise ValueError(f"{token!r} is not a day of the week, a range or a step")
        first, last, step = m.groups()
        if first == "*":
            if last is not None:
                raise ValueError(f"{token!r} is not a range")
            low, high = 0, 6
        else:
            low = _day_number(first)
            # 7 closes a range as Sunday at its end (5-7: Friday to Sunday).
            high = low if last is None else (7 if last == "7" else _day_number(last))
            if high < low:
                raise ValueError(f"{token!r} is a range that ends before it starts")
            if step is not None and last is None:
                raise ValueError(f"{token!r}: a step needs a range or * (e.g. 1-5/2, */2)")
        days.update(d % 7 for d in range(low, high + 1, int(step or 1)))
    if len(days) == 7:
        return "*"
    return ",".join(_DAY_NAMES[d] for d in sorted(days, key=lambda d: (d + 6) % 7))


def _trigger(fields: list[str], zone: zoneinfo.ZoneInfo | Any, **bounds: Any) -> BaseTrigger:
    """The trigger of five crontab fields in ``zone`` (``bounds``: CronTrigger's start_date
    and end_date). When both day fields are restricted, a day that matches either: an OR of
    one trigger per day field, as crontab reads them."""
    # APScheduler is imported here, not at the top: the command line loads this module on
    # every start.
    from apscheduler.triggers.combining import OrTrigger
    from apscheduler.triggers.cron import CronTrigger

    minute, hour, day, month, weekday = fields
    weekdays = crontab_weekdays(weekday)

    def cron(day: str, weekdays: str) -> CronTrigger:
        return CronTrigger(
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=weekdays,
            timezone=zone,
            **bounds,
        )

    if day.startswith("*") or weekday.startswith("*"):
        return cron(day, weekdays)
    return OrTrigger([cron(day, "*"), cron("*", weekdays)])


def parse_cron(value: Any) -> str:
    """A crontab expression of five fields, e.g. ``0 3 * * *``, ``*/15 1-4 * * mon-fri`` or
    ``0 3 * * 1-5``, with crontab's meaning (see the module); returned normalised (single
    spaces). Checked by APScheduler's parser, and refused when it never fires
    (``0 0 30 2 *``).

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
    start = datetime(2030, 1, 1, tzinfo=UTC)
    try:
        weekdays = crontab_weekdays(fields[4])
        read = CronTrigger(
            minute=fields[0],
            hour=fields[1],
            day=fields[2],
            month=fields[3],
            day_of_week=weekdays,
            timezone=UTC,
        )
        # With an end: the search for a date that never comes stops there.
        bounded = _trigger(fields, UTC, start_date=start, end_date=start + _CRON_HORIZON)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{shown(value)} is not a cron expression: {exc}") from None
    # APScheduler drops what it does not understand in a named field (the /2 of jan-mar/2,
    # the #2 of mon#2) without a word: refuse any field it did not read whole.
    given_fields = [*fields[:4], weekdays]
    for given, field in zip(given_fields, (read.fields[i] for i in _CRON_FIELDS), strict=True):
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
